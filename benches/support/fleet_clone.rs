//! The clone step of the fleet benchmark (`FLEET_CLONE_FROM`): fills every window of a large
//! fleet in minutes instead of hours, from records the real server wrote.
//!
//! The fleet is homogeneous: every target gets the same request at the same evaluation times,
//! so after the warm-up every target's records are the same bytes under its own keys (this
//! step checks it). The bench warms up `sources` targets through gRPC, stops the server
//! (SIGTERM: it flushes), and this step, in a child process (this binary re-executed, so sled's
//! file lock and threads are gone when it exits, before the server opens the folder again),
//! opens the data folder with the `sled` crate the server is built with (same version, same
//! trees, same default `segment_size`, which sled checks against the folder's `conf`) and
//! copies every record of target `j % sources` to target `j`'s keys, for `j` in
//! `sources..targets`, then flushes.
//!
//! Key layout (`src/store/keys.rs`): a record belongs to a target when its key is the target
//! key itself (`hpa_state`, `vpa_state`) or the target key, `0x00` and a suffix
//! (`hpa_decisions`: `be(time) ++ be(seq)`, kept as is). A key of any other shape in a tree
//! other than `meta` stops the step (a new layout must be taught here, not copied wrongly).
//! Values do not contain the target key today (`proto/store/v1/records.proto` has no key
//! field); the step checks every value for `fleet/` and, should a value hold its own target's
//! key, writes the clone's key at the same offsets (the keys are fixed width, so a length
//! prefix around it stays right); any other occurrence stops the step.

#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

/// Set in the environment of the re-executed benchmark binary that runs the clone step.
const CLONE_ENV: &str = "AUTOSCALED_FLEET_CLONE";
const CLONE_DIR_ENV: &str = "AUTOSCALED_FLEET_CLONE_DIR";
const CLONE_SOURCES_ENV: &str = "AUTOSCALED_FLEET_CLONE_SOURCES";
const CLONE_TARGETS_ENV: &str = "AUTOSCALED_FLEET_CLONE_TARGETS";
/// The line the child prints its report on.
const REPORT_PREFIX: &str = "fleet-clone-report";

/// The common prefix of the fleet's target keys.
const KEY_PREFIX: &[u8] = b"fleet/";
/// Digits of the target number (fixed width, so every key has the same length).
const DIGITS: usize = 7;
/// Fixed-width keys hold at most this many targets.
pub const MAX_TARGETS: usize = 10_000_000;
/// The tree the store keeps its layout marker in (not per target; left alone).
const META_TREE: &[u8] = b"meta";
/// The folder lock file of `src/store/folder_lock.rs`.
const LOCK_FILE: &str = "autoscaled.lock";

/// The key of fleet target `target`.
pub fn target_key(target: usize) -> String {
    format!("fleet/{target:0DIGITS$}")
}

/// True in the re-executed benchmark binary that is to run the clone step.
pub fn is_clone_child() -> bool {
    std::env::var_os(CLONE_ENV).is_some()
}

/// What the clone step did.
#[derive(Debug, Default)]
pub struct CloneReport {
    /// Records per warmed target, over all trees.
    pub records_per_target: u64,
    /// Records written (all clones).
    pub records_written: u64,
    /// Key and value bytes written.
    pub bytes_written: u64,
    /// Warmed targets whose records differ from target 0's (other than by their key).
    pub differing_sources: u64,
    /// Values that held their own target's key (rewritten for each clone).
    pub values_with_key: u64,
    /// Per tree: records per warmed target.
    pub trees: String,
    /// Seconds spent reading the sources, writing the clones, flushing.
    pub read_secs: f64,
    pub write_secs: f64,
    pub flush_secs: f64,
}

impl CloneReport {
    fn to_line(&self) -> String {
        format!(
            "{REPORT_PREFIX} records_per_target={} records_written={} bytes_written={} differing_sources={} values_with_key={} read_secs={:.3} write_secs={:.3} flush_secs={:.3} trees={}",
            self.records_per_target,
            self.records_written,
            self.bytes_written,
            self.differing_sources,
            self.values_with_key,
            self.read_secs,
            self.write_secs,
            self.flush_secs,
            self.trees,
        )
    }

    fn from_line(line: &str) -> anyhow::Result<Self> {
        let fields: BTreeMap<&str, &str> = line
            .strip_prefix(REPORT_PREFIX)
            .ok_or_else(|| anyhow::anyhow!("not a clone report: {line}"))?
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .collect();
        let get = |name: &str| {
            fields
                .get(name)
                .copied()
                .ok_or_else(|| anyhow::anyhow!("clone report without {name}: {line}"))
        };
        Ok(CloneReport {
            records_per_target: get("records_per_target")?.parse()?,
            records_written: get("records_written")?.parse()?,
            bytes_written: get("bytes_written")?.parse()?,
            differing_sources: get("differing_sources")?.parse()?,
            values_with_key: get("values_with_key")?.parse()?,
            read_secs: get("read_secs")?.parse()?,
            write_secs: get("write_secs")?.parse()?,
            flush_secs: get("flush_secs")?.parse()?,
            trees: get("trees")?.to_owned(),
        })
    }
}

/// Runs the clone step in a child process: this binary again, with the folder and counts in
/// its environment. The server must be stopped.
pub fn clone_in_child(
    folder: &Path,
    sources: usize,
    targets: usize,
) -> anyhow::Result<CloneReport> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(CLONE_ENV, "1")
        .env(CLONE_DIR_ENV, folder)
        .env(CLONE_SOURCES_ENV, sources.to_string())
        .env(CLONE_TARGETS_ENV, targets.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout is piped")
        .read_to_string(&mut out)?;
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "the clone step failed ({status})");
    let line = out
        .lines()
        .find(|l| l.starts_with(REPORT_PREFIX))
        .ok_or_else(|| anyhow::anyhow!("the clone step printed no report"))?;
    CloneReport::from_line(line)
}

/// The child's main: clone, print the report.
pub fn run_clone_child() -> anyhow::Result<()> {
    let folder = PathBuf::from(
        std::env::var_os(CLONE_DIR_ENV).ok_or_else(|| anyhow::anyhow!("{CLONE_DIR_ENV} unset"))?,
    );
    let number = |name: &str| -> anyhow::Result<usize> {
        Ok(std::env::var(name)
            .map_err(|_| anyhow::anyhow!("{name} unset"))?
            .parse()?)
    };
    let report = clone(
        &folder,
        number(CLONE_SOURCES_ENV)?,
        number(CLONE_TARGETS_ENV)?,
    )?;
    println!("{}", report.to_line());
    Ok(())
}

/// One record of a warmed target: its tree, the key after the target key, the value, and
/// where in the value the target's own key appears (empty today).
struct Record {
    tree: usize,
    suffix: Vec<u8>,
    value: sled::IVec,
    key_at: Vec<usize>,
}

/// Copies the records of targets `0..sources` to targets `sources..targets` (target `j` gets
/// target `j % sources`'s records).
pub fn clone(folder: &Path, sources: usize, targets: usize) -> anyhow::Result<CloneReport> {
    anyhow::ensure!(
        0 < sources && sources < targets && targets <= MAX_TARGETS,
        "cloning needs 0 < sources ({sources}) < targets ({targets}) <= {MAX_TARGETS}"
    );
    // The server's folder lock: refuse a folder a server still has open.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(folder.join(LOCK_FILE))?;
    if lock.try_lock().is_err() {
        anyhow::bail!("{} is in use by a server", folder.display());
    }
    let config = sled::Config::new()
        .path(folder)
        .cache_capacity(256 * 1024 * 1024)
        .flush_every_ms(None);
    // sled's own lock on `db` may outlive a handle this process just dropped by a few
    // milliseconds (its threads let go last), as `src/store/db.rs` `open_db` waits for too.
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let db = loop {
        match config.open() {
            Ok(db) => break db,
            Err(sled::Error::Io(e))
                if e.to_string().starts_with("could not acquire lock on")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    };

    let read_started = Instant::now();
    let mut report = CloneReport::default();
    let mut trees = Vec::new();
    let mut per_source: Vec<Vec<Record>> = (0..sources).map(|_| Vec::new()).collect();
    let mut tree_counts = Vec::new();
    for name in db.tree_names() {
        let tree = db.open_tree(&name)?;
        let shown = String::from_utf8_lossy(&name).into_owned();
        if name.as_ref() == META_TREE {
            // The layout marker (and a probe value while a store was failing): not per target.
            for item in tree.iter() {
                let (k, _) = item?;
                anyhow::ensure!(
                    !k.starts_with(KEY_PREFIX),
                    "tree meta holds a target's key {k:?}: the clone step does not know it"
                );
            }
            continue;
        }
        let index = trees.len();
        let mut count = 0u64;
        for item in tree.iter() {
            let (k, value) = item?;
            let (target, suffix) = parse_key(&k).ok_or_else(|| {
                anyhow::anyhow!(
                    "tree {shown}: key {:?} is neither a target key nor a target key, 0x00 and a suffix; teach the clone step this layout",
                    String::from_utf8_lossy(&k)
                )
            })?;
            anyhow::ensure!(
                target < sources,
                "tree {shown}: a record of target {target}, beyond the {sources} warmed targets"
            );
            let key_at = own_key_offsets(&value, &k[..KEY_PREFIX.len() + DIGITS])
                .map_err(|e| anyhow::anyhow!("tree {shown}, key {k:?}: {e}"))?;
            if !key_at.is_empty() {
                report.values_with_key += 1;
            }
            per_source[target].push(Record {
                tree: index,
                suffix: suffix.to_vec(),
                value,
                key_at,
            });
            count += 1;
        }
        trees.push(tree);
        if count > 0 {
            tree_counts.push(format!("{shown}:{:.2}", count as f64 / sources as f64));
        }
    }
    report.trees = tree_counts.join(",");
    report.records_per_target = per_source[0].len() as u64;
    anyhow::ensure!(
        report.records_per_target > 0,
        "target 0 has no records: was the warm-up written?"
    );
    report.differing_sources = per_source[1..]
        .iter()
        .filter(|records| !same_records(&per_source[0], records))
        .count() as u64;
    report.read_secs = read_started.elapsed().as_secs_f64();
    eprintln!(
        "  clone: read {} records of {sources} warmed targets in {:.1} s ({}; {} differ from target 0; {} values hold their key)",
        per_source.iter().map(Vec::len).sum::<usize>(),
        report.read_secs,
        report.trees,
        report.differing_sources,
        report.values_with_key,
    );

    let write_started = Instant::now();
    let step = (targets / 10).max(1);
    for target in sources..targets {
        let key = target_key(target);
        for record in &per_source[target % sources] {
            let mut k = Vec::with_capacity(key.len() + record.suffix.len());
            k.extend_from_slice(key.as_bytes());
            k.extend_from_slice(&record.suffix);
            let value = if record.key_at.is_empty() {
                record.value.clone()
            } else {
                let mut v = record.value.to_vec();
                for &at in &record.key_at {
                    v[at..at + key.len()].copy_from_slice(key.as_bytes());
                }
                sled::IVec::from(v)
            };
            report.bytes_written += (k.len() + value.len()) as u64;
            trees[record.tree].insert(k, value)?;
            report.records_written += 1;
        }
        if (target + 1) % step == 0 {
            eprintln!(
                "  clone: {} targets, {:.0} records/s",
                target + 1,
                report.records_written as f64 / write_started.elapsed().as_secs_f64()
            );
        }
    }
    report.write_secs = write_started.elapsed().as_secs_f64();
    let flush_started = Instant::now();
    db.flush()?;
    report.flush_secs = flush_started.elapsed().as_secs_f64();
    drop(trees);
    drop(db);
    drop(lock);
    Ok(report)
}

/// `(target, suffix)` of a fleet key: `fleet/NNNNNNN` alone or followed by `0x00` and more.
fn parse_key(key: &[u8]) -> Option<(usize, &[u8])> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let digits = rest.get(..DIGITS)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let suffix = &rest[DIGITS..];
    if !(suffix.is_empty() || suffix[0] == 0) {
        return None;
    }
    let target = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some((target, suffix))
}

/// Offsets of `own` (the record's target key) in `value`; another target's key is an error.
fn own_key_offsets(value: &[u8], own: &[u8]) -> Result<Vec<usize>, String> {
    let mut offsets = Vec::new();
    let mut from = 0;
    while let Some(at) = find(&value[from..], KEY_PREFIX) {
        let at = from + at;
        match value.get(at..at + own.len()) {
            Some(found) if found == own => offsets.push(at),
            _ => return Err(format!("the value names another key at offset {at}")),
        }
        from = at + own.len();
    }
    Ok(offsets)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Same trees, suffixes and values (own-key offsets included, so the values compare equal
/// only where they do not name the key, or name it at the same places).
fn same_records(a: &[Record], b: &[Record]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.tree == y.tree
                && x.suffix == y.suffix
                && x.key_at == y.key_at
                && masked_eq(&x.value, &y.value, &x.key_at)
        })
}

fn masked_eq(a: &[u8], b: &[u8], key_at: &[usize]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let key_len = KEY_PREFIX.len() + DIGITS;
    let mut from = 0;
    for &at in key_at {
        if a[from..at] != b[from..at] {
            return false;
        }
        from = at + key_len;
    }
    a[from..] == b[from..]
}
