//! The caller's side of a box: spawn the `kern` runtime with a `BoxSpec`, drain the workload's
//! stdout/stderr (capped, never blocking the workload), stream chunks as they arrive, and read
//! kern's report. Runs on tokio in the addon's process; it never forks anything itself except
//! through `Command`, which execs `kern` straight away.

use super::spec::BoxSpec;
use super::status::{BoxReport, Fault, FaultKind};
use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::UnboundedSender;

/// Extra time past the box's own deadline before the caller gives up on `kern` itself.
const BACKSTOP: Duration = Duration::from_secs(10);
/// How long to keep reading output after `kern` exited (the box is dead by then; this only
/// guards against a pipe some other process still holds).
const DRAIN_GRACE: Duration = Duration::from_secs(2);
const SPEC_FD: RawFd = 3;
const STATUS_FD: RawFd = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One piece of output, in arrival order per stream.
#[derive(Debug)]
pub struct Chunk {
    pub stream: Stream,
    pub data: Vec<u8>,
}

pub struct Launch {
    pub kern: PathBuf,
    pub spec: BoxSpec,
    /// Cap per stream, in bytes.
    pub max_output: usize,
    pub sink: Option<UnboundedSender<Chunk>>,
}

#[derive(Debug)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub report: BoxReport,
    pub duration: Duration,
}

/// Runs one box to the end. `Err` only when `kern` could not be started at all; everything that
/// happens after is in the `Outcome`.
pub async fn run(l: Launch) -> Result<Outcome> {
    let start = Instant::now();
    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::Runtime(format!("pipe: {e}")))
    };
    let (spec_r, spec_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let mut json = serde_json::to_vec(&l.spec)
        .map_err(|e| Error::Runtime(format!("serialise the box spec: {e}")))?;
    json.push(b'\n');

    let mut cmd = std::process::Command::new(&l.kern);
    cmd.args(["box", "--spec-fd", "3", "--status-fd", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (sr, sw) = (spec_r.as_raw_fd(), status_w.as_raw_fd());
    // SAFETY: the closure runs between fork and exec in the child and only calls dup2/fcntl,
    // which are async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            place_fd(sr, SPEC_FD)?;
            place_fd(sw, STATUS_FD)
        });
    }
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Error::Runtime(format!(
                "cannot start the kern runtime at {}: {e}. Reinstall kern-sandbox, or point KERN_BIN at a kern binary",
                l.kern.display()
            ))
        })?;
    drop(spec_r);
    drop(status_w);

    // The spec may exceed a pipe's buffer (large code); write it without blocking a runtime
    // thread. The write end stays open as kern's lifeline until the run is over.
    let lifeline = tokio::task::spawn_blocking(move || -> std::io::Result<OwnedFd> {
        let mut f = std::fs::File::from(spec_w);
        std::io::Write::write_all(&mut f, &json)?;
        Ok(f.into())
    });

    let out = child
        .stdout
        .take()
        .map(|s| tokio::spawn(drain(s, Stream::Stdout, l.max_output, l.sink.clone())));
    let err = child
        .stderr
        .take()
        .map(|s| tokio::spawn(drain(s, Stream::Stderr, l.max_output, l.sink.clone())));
    let status = tokio::spawn(async move {
        let mut buf = Vec::new();
        if let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(status_r) {
            let _ = rx.read_to_end(&mut buf).await;
        }
        buf
    });

    let backstop = Duration::from_millis(l.spec.timeout_ms) + BACKSTOP;
    let waited = tokio::time::timeout(backstop, child.wait()).await;
    let mut backstop_fault = None;
    let exit = match waited {
        Ok(r) => r.ok(),
        Err(_) => {
            let _ = child.start_kill();
            backstop_fault = Some(Fault::new(
                FaultKind::Killed,
                "the kern runtime did not end the box at its deadline; the caller killed it",
            ));
            child.wait().await.ok()
        }
    };
    let lifeline = lifeline.await.ok().and_then(|r| r.ok());
    drop(lifeline);

    let mut truncated = false;
    let collect = |h: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>| async {
        match h {
            Some(mut h) => match tokio::time::timeout(DRAIN_GRACE, &mut h).await {
                Ok(Ok(r)) => r,
                _ => {
                    h.abort();
                    (Vec::new(), false)
                }
            },
            None => (Vec::new(), false),
        }
    };
    let (stdout, t1) = collect(out).await;
    let (stderr, t2) = collect(err).await;
    truncated |= t1 || t2;
    let status = tokio::time::timeout(DRAIN_GRACE, status)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();

    let mut report = parse_report(&status).unwrap_or_else(|| {
        let how = match exit {
            Some(s) => {
                use std::os::unix::process::ExitStatusExt;
                match s.signal() {
                    Some(sig) => format!("was killed by signal {sig}"),
                    None => format!("exited with code {}", s.code().unwrap_or(-1)),
                }
            }
            None => "could not be waited for".to_string(),
        };
        let kind = if how.contains("signal") {
            FaultKind::Killed
        } else {
            FaultKind::StartupFailed
        };
        BoxReport {
            exit_code: 125,
            fault: Some(Fault::new(
                kind,
                format!("the kern runtime {how} without reporting how the box ended"),
            )),
            setup_us: 0,
        }
    });
    if let Some(f) = backstop_fault {
        report.fault = Some(f);
    }
    Ok(Outcome {
        stdout,
        stderr,
        truncated,
        report,
        duration: start.elapsed(),
    })
}

/// Puts `fd` at `target` without CLOEXEC. Async-signal-safe (used between fork and exec).
fn place_fd(fd: RawFd, target: RawFd) -> std::io::Result<()> {
    if fd == target {
        return crate::engine::sys::clear_cloexec(fd);
    }
    // SAFETY: dup2 on integer fds touches no memory; it is async-signal-safe.
    if unsafe { libc::dup2(fd, target) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads a stream to EOF, keeping the first `cap` bytes and discarding the rest (but still
/// reading, so the writer never blocks on a full pipe).
async fn drain<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    stream: Stream,
    cap: usize,
    sink: Option<UnboundedSender<Chunk>>,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(kept.len());
        let take = n.min(room);
        if take < n {
            truncated = true;
        }
        if take > 0 {
            kept.extend_from_slice(&buf[..take]);
            if let Some(s) = &sink {
                let _ = s.send(Chunk {
                    stream,
                    data: buf[..take].to_vec(),
                });
            }
        }
    }
    (kept, truncated)
}

fn parse_report(status: &[u8]) -> Option<BoxReport> {
    let text = std::str::from_utf8(status).ok()?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    serde_json::from_str(line).ok()
}
