//! The exclusive lock on a data folder, taken before anything in the folder is read or
//! written and held for the store's whole life.
//!
//! sled 0.34 locks its own `db` file (`Config::try_lock`, an exclusive `flock` through fs2),
//! but only once it opens the database; anything done to the folder before that (such as the
//! copy aside that older builds made, issue 8 item 1) races with a live server. So the store
//! first takes an exclusive `flock` on `autoscaled.lock` inside the folder (std's
//! [`File::try_lock`], `flock(LOCK_EX | LOCK_NB)` on Linux) and writes its pid into it, so that
//! a refused second start can name the holder. The lock goes with the process: the kernel
//! releases it when the file descriptor is closed, including after SIGKILL, so a stale lock
//! file never blocks a restart.

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
};

/// The lock file's name inside the data folder.
pub(crate) const LOCK_FILE: &str = "autoscaled.lock";

/// A held folder lock; released when dropped (the file stays, with the last holder's pid).
#[derive(Debug)]
pub(crate) struct FolderLock {
    _file: File,
    /// This call created the lock file (the folder was not ours before).
    created: Option<PathBuf>,
}

/// Why the folder could not be locked.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another process (or another store in this process) holds the lock.
    InUse { pid: Option<u32> },
    /// The lock file could not be created or locked.
    Io(String),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::InUse { pid: Some(pid) } => {
                write!(f, "it is in use by another process (pid {pid}?)")
            }
            LockError::InUse { pid: None } => {
                write!(f, "it is in use by another process (pid unknown)")
            }
            LockError::Io(message) => f.write_str(message),
        }
    }
}

impl FolderLock {
    /// Creates `folder` if missing, then locks it. Never blocks: a folder in use is refused at
    /// once.
    pub(crate) fn acquire(folder: &Path) -> Result<Self, LockError> {
        std::fs::create_dir_all(folder)
            .map_err(|e| LockError::Io(format!("cannot create the folder: {e}")))?;
        let path: PathBuf = folder.join(LOCK_FILE);
        let existed = path.exists();
        // Not truncated on open: a refused start must not erase the holder's pid.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| LockError::Io(format!("cannot open the lock file {LOCK_FILE}: {e}")))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::InUse {
                    pid: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(e)) => {
                return Err(LockError::Io(format!(
                    "cannot lock the lock file {LOCK_FILE}: {e}"
                )));
            }
        }
        // Ours now: record who holds it. Best effort: the lock itself is what excludes.
        let pid = std::process::id();
        let written = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{pid}"))
            .and_then(|()| file.sync_data());
        if let Err(e) = written {
            tracing::warn!(error = %e, path = %path.display(), "cannot write the pid into the lock file");
        }
        Ok(FolderLock {
            _file: file,
            created: (!existed).then_some(path),
        })
    }

    /// Releases the lock after a refused start and removes the lock file if this start
    /// created it, so that a folder that is not ours is left as it was.
    pub(crate) fn release_refused(self) {
        if let Some(path) = &self.created {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_folder_is_refused_with_the_pid_until_the_first_goes() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("data");
        let first = FolderLock::acquire(&folder).unwrap();
        let err = FolderLock::acquire(&folder).unwrap_err();
        let pid = std::process::id();
        assert!(
            matches!(err, LockError::InUse { pid: Some(p) } if p == pid),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("it is in use by another process (pid {pid}?)")
        );
        drop(first);
        FolderLock::acquire(&folder).unwrap();
    }
}
