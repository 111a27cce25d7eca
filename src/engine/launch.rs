//! The caller's side of a box: spawn the `kern` runtime with a `BoxSpec`, drain the workload's
//! stdout/stderr (capped, never blocking the workload), stream chunks as they arrive, and read
//! kern's report. Runs on tokio in the addon's process; it never forks anything itself except
//! through `Command`, which execs `kern` straight away.

use super::spec::{BoxSpec, Limits};
use super::status::{BoxReport, Fault, FaultKind};
use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
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

#[derive(Debug)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub report: BoxReport,
    pub duration: Duration,
}

/// A started `kern` that has its caps (line 1 of the protocol) and waits for a box spec. A
/// session keeps one spare, so the cgroup move (an RCU grace period) happens between calls.
pub struct Kern {
    child: tokio::process::Child,
    spec_w: OwnedFd,
    status_r: OwnedFd,
    limits: Limits,
}

impl Kern {
    /// Starts `kern box` and hands it the caps. `Err` only when `kern` can't be started.
    pub fn spawn(kern: &Path, limits: &Limits) -> Result<Kern> {
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| Error::Runtime(format!("pipe: {e}")))
        };
        let (spec_r, spec_w) = pipe()?;
        let (status_r, status_w) = pipe()?;
        let mut cmd = std::process::Command::new(kern);
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
        let child = tokio::process::Command::from(cmd).spawn().map_err(|e| {
            Error::Runtime(format!(
                "cannot start the kern runtime at {}: {e}. Reinstall kern-sandbox, or point KERN_BIN at a kern binary",
                kern.display()
            ))
        })?;
        drop(spec_r);
        drop(status_w);
        let mut line = serde_json::to_vec(limits)
            .map_err(|e| Error::Runtime(format!("serialise the caps: {e}")))?;
        line.push(b'\n');
        // A few hundred bytes into an empty pipe: never blocks.
        nix::unistd::write(&spec_w, &line)
            .map_err(|e| Error::Runtime(format!("write to kern: {e}")))?;
        Ok(Kern {
            child,
            spec_w,
            status_r,
            limits: limits.clone(),
        })
    }

    /// False once the process has exited (a spare killed from outside).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The caps this kern prepared.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Runs one box to the end. Everything that happens is in the `Outcome`; `Ok(None)` means
    /// this kern had already died before it got the spec (a spare killed from outside), so
    /// nothing ran and the caller may use another.
    pub async fn run(
        mut self,
        spec: &BoxSpec,
        max_output: usize,
        sink: Option<UnboundedSender<Chunk>>,
    ) -> Result<Option<Outcome>> {
        let start = Instant::now();
        let mut json = serde_json::to_vec(spec)
            .map_err(|e| Error::Runtime(format!("serialise the box spec: {e}")))?;
        json.push(b'\n');
        // The spec may exceed a pipe's buffer (large code): write it off the runtime's threads.
        // kern reads it at once; the write end then stays open as kern's lifeline.
        let spec_w = self.spec_w;
        let written = tokio::task::spawn_blocking(move || -> std::io::Result<OwnedFd> {
            let mut f = std::fs::File::from(spec_w);
            std::io::Write::write_all(&mut f, &json)?;
            Ok(f.into())
        })
        .await
        .map_err(|e| Error::Runtime(format!("write the spec: {e}")))?;
        let lifeline = match written {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => return Ok(None),
            Err(e) => return Err(Error::Runtime(format!("write the spec to kern: {e}"))),
        };
        let out = self
            .child
            .stdout
            .take()
            .map(|s| tokio::spawn(drain(s, Stream::Stdout, max_output, sink.clone())));
        let err = self
            .child
            .stderr
            .take()
            .map(|s| tokio::spawn(drain(s, Stream::Stderr, max_output, sink.clone())));
        let status_r = self.status_r;
        let mut status = tokio::spawn(async move {
            let mut buf = Vec::new();
            if let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(status_r) {
                let _ = rx.read_to_end(&mut buf).await;
            }
            buf
        });

        // kern closes the status pipe and its stdio as soon as the box has ended; its cgroup
        // teardown after that is not the caller's wait.
        let backstop = Duration::from_millis(spec.timeout_ms) + BACKSTOP;
        let mut backstop_fault = None;
        let status = match tokio::time::timeout(backstop, &mut status).await {
            Ok(r) => r.unwrap_or_default(),
            Err(_) => {
                let _ = self.child.start_kill();
                backstop_fault = Some(Fault::new(
                    FaultKind::Killed,
                    "the kern runtime did not end the box at its deadline; the caller killed it",
                ));
                status.await.unwrap_or_default()
            }
        };
        drop(lifeline);

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

        let mut child = self.child;
        let mut report = match parse_report(&status) {
            Some(r) => {
                // Reap kern once it finished its teardown, off the caller's path.
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
                r
            }
            None => crash_report(
                tokio::time::timeout(DRAIN_GRACE, child.wait())
                    .await
                    .ok()
                    .and_then(|r| r.ok()),
            ),
        };
        if let Some(f) = backstop_fault {
            report.fault = Some(f);
        }
        Ok(Some(Outcome {
            stdout,
            stderr,
            truncated: t1 || t2,
            report,
            duration: start.elapsed(),
        }))
    }
}

/// What to report when kern ended without saying how the box ended.
fn crash_report(exit: Option<std::process::ExitStatus>) -> BoxReport {
    use std::os::unix::process::ExitStatusExt;
    let (kind, how) = match exit {
        Some(s) => match s.signal() {
            Some(sig) => (FaultKind::Killed, format!("was killed by signal {sig}")),
            None => (
                FaultKind::StartupFailed,
                format!("exited with code {}", s.code().unwrap_or(-1)),
            ),
        },
        None => (FaultKind::Killed, "did not exit".to_string()),
    };
    BoxReport {
        exit_code: 125,
        fault: Some(Fault::new(
            kind,
            format!("the kern runtime {how} without reporting how the box ended"),
        )),
        setup_us: 0,
    }
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
