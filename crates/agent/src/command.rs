//! Runs the scheduler's commands: argv without a shell, placeholders replaced, a timeout
//! that kills the command's whole process group (a hung `nomad job scale` and its children),
//! and output bounded.

use std::{process::Stdio, time::Duration};

use tokio::{io::AsyncReadExt, process::Command};

use crate::config::CommandSpec;

/// The most output kept from a command (stdout and stderr each); the rest is read and dropped.
const MAX_OUTPUT_BYTES: u64 = 1 << 20;
/// How long the output of a command that exited is still read (a background child it
/// started may hold its pipes open for ever).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// What a command printed, if it exited 0.
pub struct Output {
    pub stdout: String,
}

/// `{replicas}`, `{current}` and `{key}` in each argument.
pub fn render(argv: &[String], key: &str, current: i32, replicas: i32) -> Vec<String> {
    argv.iter()
        .map(|a| {
            a.replace("{replicas}", &replicas.to_string())
                .replace("{current}", &current.to_string())
                .replace("{key}", key)
        })
        .collect()
}

/// Runs `argv` (already rendered) with `spec.timeout`. An error says what failed in one
/// line: the program missing, a non-zero exit with the end of its stderr, or the timeout.
pub async fn run(argv: &[String], timeout: Duration) -> Result<Output, String> {
    let (program, args) = argv.split_first().ok_or("an empty command")?;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout kills what it started too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {program:?}: {e}"))?;
    let pid = child.id();
    // A period dropped while its command runs (the agent stopping) leaves nothing behind.
    let mut group = GroupGuard(pid);
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    // Each pipe is read up to the cap and drained past it (a chatty command must not block
    // on a full pipe), beside the wait for the exit: a command that exited while a child it
    // left in the background still holds its pipes has finished all the same.
    let reader = |mut pipe: Box<dyn tokio::io::AsyncRead + Send + Unpin>| {
        tokio::spawn(async move {
            let mut kept = Vec::new();
            let _ = (&mut pipe)
                .take(MAX_OUTPUT_BYTES)
                .read_to_end(&mut kept)
                .await;
            let _ = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await;
            kept
        })
    };
    let out_task = reader(Box::new(stdout));
    let err_task = reader(Box::new(stderr));
    let work = async {
        let status = child.wait().await.map_err(|e| e.to_string())?;
        let collect = |task: tokio::task::JoinHandle<Vec<u8>>| async move {
            let abort = task.abort_handle();
            match tokio::time::timeout(PIPE_GRACE, task).await {
                Ok(Ok(kept)) => kept,
                _ => {
                    abort.abort();
                    Vec::new()
                }
            }
        };
        let (out, err) = tokio::join!(collect(out_task), collect(err_task));
        Ok::<_, String>((status, out, err))
    };
    let outcome = tokio::time::timeout(timeout, work).await;
    if outcome.is_ok() {
        // It exited: what it left in the background is its own business.
        group.0 = None;
    }
    match outcome {
        Ok(Ok((status, out, err))) => {
            if status.success() {
                Ok(Output {
                    stdout: String::from_utf8_lossy(&out).into_owned(),
                })
            } else {
                let err = String::from_utf8_lossy(&err);
                let last = err
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                let last: String = last.chars().take(300).collect();
                Err(format!("{program:?} failed ({status}): {}", last.trim()))
            }
        }
        Ok(Err(e)) => Err(format!("{program:?}: {e}")),
        Err(_) => {
            if let Some(pid) = group.0.take() {
                kill_group(pid);
            }
            Err(format!(
                "{program:?} did not finish within {timeout:?}; killed"
            ))
        }
    }
}

/// Kills the command's process group when dropped before the command exited.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            kill_group(pid);
        }
    }
}

/// SIGKILL to the process group `pid` leads (its own: `process_group(0)`).
fn kill_group(pid: u32) {
    let group = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(group) = group
        && let Err(e) = rustix::process::kill_process_group(group, rustix::process::Signal::KILL)
    {
        tracing::warn!(pid, error = %e, "cannot kill the command's process group");
    }
}

/// Runs a rendered [`CommandSpec`].
pub async fn run_spec(spec: &CommandSpec, argv: Vec<String>) -> Result<Output, String> {
    run(&argv, spec.timeout).await
}

/// The replica count a command printed (a bare non-negative integer, surrounding whitespace
/// allowed).
pub fn parse_replicas(stdout: &str) -> Result<i32, String> {
    let text = stdout.trim();
    text.parse::<i32>().ok().filter(|n| *n >= 0).ok_or_else(|| {
        let shown: String = text.chars().take(80).collect();
        format!("the replicas command printed {shown:?}, not a replica count")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_exit_codes_and_timeouts() {
        let ok = run(
            &["sh".into(), "-c".into(), "echo 3".into()],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(parse_replicas(&ok.stdout), Ok(3));
        let failed = run(
            &["sh".into(), "-c".into(), "echo nope >&2; exit 4".into()],
            Duration::from_secs(5),
        )
        .await
        .err()
        .unwrap();
        assert!(failed.contains("nope") && failed.contains('4'), "{failed}");
        let started = std::time::Instant::now();
        let hung = run(&["sleep".into(), "30".into()], Duration::from_millis(200))
            .await
            .err()
            .unwrap();
        assert!(hung.contains("did not finish"), "{hung}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let missing = run(&["/no/such/program".into()], Duration::from_secs(1))
            .await
            .err()
            .unwrap();
        assert!(missing.contains("cannot run"), "{missing}");
        assert!(parse_replicas("-1").is_err());
        assert!(parse_replicas("3 replicas").is_err());
    }

    /// Past the output cap the rest is drained, and a command whose background child keeps
    /// its pipes open has finished when it exits: neither is a timeout.
    #[tokio::test]
    async fn chatty_commands_and_background_children_are_not_timeouts() {
        let chatty = run(
            &[
                "sh".into(),
                "-c".into(),
                "head -c 3000000 /dev/zero; echo done >&2".into(),
            ],
            Duration::from_secs(10),
        )
        .await;
        assert!(chatty.is_ok(), "{:?}", chatty.err());
        let started = std::time::Instant::now();
        let detached = run(
            &["sh".into(), "-c".into(), "sleep 30 & echo 4".into()],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(8));
        assert!(detached.stdout.is_empty() || detached.stdout.trim() == "4");
    }

    /// A period dropped while its command runs (the agent giving up on a stop) kills the
    /// command's whole process group: nothing it started outlives the agent.
    #[tokio::test]
    async fn a_dropped_command_leaves_no_process_behind() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let task = tokio::spawn(async move {
            run(&["sh".into(), "-c".into(), script], Duration::from_secs(60)).await
        });
        let mut child = None;
        for _ in 0..100 {
            if let Ok(text) = std::fs::read_to_string(&pid_file)
                && let Ok(pid) = text.trim().parse::<u32>()
            {
                child = Some(pid);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let child = child.expect("the command started its child");
        task.abort();
        let _ = task.await;
        // Dead: gone, or a zombie waiting for init to reap it.
        let alive = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        };
        for _ in 0..100 {
            if !alive(child) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the command's child {child} outlived the dropped period");
    }

    #[test]
    fn placeholders() {
        let argv = vec![
            "scale".into(),
            "{key}".into(),
            "--count={replicas}".into(),
            "{current}".into(),
        ];
        assert_eq!(
            render(&argv, "web", 2, 5),
            ["scale", "web", "--count=5", "2"]
        );
    }
}
