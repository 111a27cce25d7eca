//! A call's own additions to the session's box (`PerCallOptions`): its `env` (over the Sandbox's,
//! same rules), its `cwd` (workspace-relative), its `stdin` (a pipe kern's caller feeds, then
//! closes) and its abort (`signal`: the close() path, for one call). Checked here before any box
//! starts; whether the directory exists, and where its symlinks lead, only the box can say
//! (`engine::boxside::init`, `Pid1Msg::CwdRefused`).

use super::result::ExecRequest;
use crate::config::show_bytes;
use crate::error::{Error, Result};
use serde_json::Value;
use std::os::fd::OwnedFd;

/// The most a call's `stdin` may hold. It is copied out of the caller's buffer before the
/// call starts, so this bounds what one call adds to the host's memory; more input belongs in
/// a workspace file.
pub const MAX_STDIN_BYTES: usize = 16 << 20;

/// What a call brings beside its request's data: the bytes for its stdin, and its abort
/// (turning true ends the call's box, as close() does, and the call then fails).
#[derive(Debug, Default)]
pub struct CallInput {
    pub stdin: Option<Vec<u8>>,
    pub abort: Option<tokio::sync::watch::Receiver<bool>>,
    /// Where a python cell's results go as they are kept (`onResult`).
    pub results: Option<crate::lang::driver::ResultSink>,
    /// Fires (or is dropped) once the caller holds the result. Work the call leaves behind that
    /// would take the CPUs from handing it over — the prewarm refill starts a box and an
    /// interpreter — waits for it. None: that work starts as the result is whole.
    pub delivered: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// The message of a call that was aborted: the error of one aborted before its box, and the
/// fault of one aborted while it ran (the JS layer rejects with the signal's reason instead,
/// unless the call's `onAbort` is "resolve").
pub const ABORTED: &str = "the call was aborted; its box and everything in it were ended";

/// Whether `abort` has turned true.
pub(super) fn aborted(abort: Option<&tokio::sync::watch::Receiver<bool>>) -> bool {
    abort.is_some_and(|a| *a.borrow())
}

/// The cancel a call's box runs under (`launch::Kern::run`): the session's `closing`, or, with
/// an abort, a receiver that turns true when either does. The task that joins them lives as
/// long as the returned guard.
pub(super) fn cancel_either(
    closing: tokio::sync::watch::Receiver<bool>,
    abort: Option<tokio::sync::watch::Receiver<bool>>,
) -> (tokio::sync::watch::Receiver<bool>, Option<AbortOnDrop>) {
    let Some(abort) = abort else {
        return (closing, None);
    };
    let now = *closing.borrow() || *abort.borrow();
    let (tx, rx) = tokio::sync::watch::channel(now);
    let task = tokio::spawn(async move {
        let (mut closing, mut abort) = (closing, abort);
        tokio::select! {
            () = turns_true(&mut closing) => {}
            () = turns_true(&mut abort) => {}
        }
        tx.send_replace(true);
    });
    (rx, Some(AbortOnDrop(task)))
}

/// Resolves once `abort` is true; never without one (a kernel cell's, waited on beside its
/// deadline; open()'s, beside its steps).
pub(super) async fn abort_requested(abort: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match abort {
        Some(rx) => turns_true(rx).await,
        None => std::future::pending::<()>().await,
    }
}

/// Resolves once `rx` is true; never, if its sender is gone first (nothing can turn it then).
async fn turns_true(rx: &mut tokio::sync::watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Aborts a task when dropped.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A call's `stdin` of `len` bytes against `MAX_STDIN_BYTES`, before it is copied.
pub fn check_stdin(len: usize) -> Result<()> {
    if len > MAX_STDIN_BYTES {
        return crate::invalid!(
            "option `stdin` is {len} bytes; a call's stdin may hold at most {MAX_STDIN_BYTES} bytes ({}). Write larger input to a workspace file (writeFile) and read it from there",
            show_bytes(MAX_STDIN_BYTES as u64)
        );
    }
    Ok(())
}

/// The workload's stdin: a pipe whose read end goes to the box (`BoxSpec::stdin`) and whose
/// write end a task feeds `data` into, then closes, so the workload reads the bytes and then
/// EOF. The task ends at EOF, or at EPIPE once no reader is left; the caller aborts it when the
/// call is over, so a workload that never read leaves nothing behind.
pub(super) fn stdin_pipe(data: Vec<u8>) -> Result<(OwnedFd, tokio::task::JoinHandle<()>)> {
    use tokio::io::AsyncWriteExt;
    let io = |e: std::io::Error| Error::Runtime(format!("a pipe for the call's stdin: {e}"));
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| io(e.into()))?;
    let mut tx = tokio::net::unix::pipe::Sender::from_owned_fd(write).map_err(io)?;
    let feeder = tokio::spawn(async move {
        // EPIPE (the workload exited without reading it all) is the workload's business.
        let _ = tx.write_all(&data).await;
    });
    Ok((read, feeder))
}

/// What one call adds to the session's box, checked.
#[derive(Debug, Default, Clone)]
pub(super) struct PerCall {
    /// Goes over the Sandbox's `env` (and the language's own), as the Sandbox's goes over the
    /// image's.
    pub(super) env: Vec<(String, String)>,
    /// The workload's cwd in the box, absolute (under the workspace target); None: the workspace.
    pub(super) cwd: Option<String>,
    /// The account the call's box runs as, as the caller wrote it (resolved in the image by
    /// `prepare`); None: the Sandbox's.
    pub(super) user: Option<String>,
}

impl PerCall {
    /// Reads `env` and `cwd` from the request; `target` is where the workspace is in the box.
    pub(super) fn of(req: &ExecRequest, target: &str) -> Result<PerCall> {
        let env = match req.env.as_ref().filter(|v| !v.is_null()) {
            Some(v) => super::options::parse_env(v)?,
            None => Vec::new(),
        };
        let cwd = match req.cwd.as_ref().filter(|v| !v.is_null()) {
            Some(Value::String(s)) => Some(box_cwd(target, s)?),
            Some(other) => {
                return crate::invalid!(
                    "option `cwd` must be a workspace-relative path as a string, got {}",
                    crate::config::describe(other)
                )
            }
            None => None,
        };
        // The Sandbox option's checks; resolved in the image by `prepare`.
        let user = match req.user.as_ref().filter(|v| !v.is_null()) {
            Some(v) => Some(super::options::account(v)?),
            None => None,
        };
        Ok(PerCall { env, cwd, user })
    }

    /// Whether a prewarmed box or a zygote fork can serve the call: they were started before
    /// the call's env, cwd and account were known, and their interpreter already runs with the
    /// session's.
    pub(super) fn is_plain(&self) -> bool {
        self.env.is_empty() && self.cwd.is_none() && self.user.is_none()
    }
}

/// `cwd` as an absolute path in the box. A relative path is taken from the workspace (`target`)
/// and stays in it: a `..` that leaves it is refused, and the box refuses one its symlinks lead
/// out of. An absolute path names any directory of the box (its own namespace: `/home/user`,
/// `/tmp`, `/`), as E2B's and a shell's `cd` do. `.` and `..` are resolved here, by name.
fn box_cwd(target: &str, cwd: &str) -> Result<String> {
    if cwd.is_empty() {
        return crate::invalid!("option `cwd` is empty; give a path relative to the workspace, such as \"src\" or \".\", or an absolute path in the box");
    }
    if cwd.contains('\0') {
        return crate::invalid!("option `cwd` contains a NUL byte");
    }
    let under = cwd
        .strip_prefix(target)
        .filter(|r| r.is_empty() || r.starts_with('/'));
    let rest = match (cwd.starts_with('/'), under) {
        (true, Some(r)) => r,
        (true, None) => return Ok(absolute(cwd)),
        (false, _) => cwd,
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return crate::invalid!(
                        "option `cwd`: {cwd:?} leads out of the workspace through `..`"
                    );
                }
            }
            c => parts.push(c),
        }
    }
    Ok(if parts.is_empty() {
        target.to_string()
    } else {
        format!("{}/{}", target.trim_end_matches('/'), parts.join("/"))
    })
}

/// An absolute path outside the workspace, `.` and `..` resolved by name (`/..` is `/`).
fn absolute(cwd: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in cwd.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_is_resolved_under_the_workspace_by_name() {
        let t = "/workspace";
        assert_eq!(box_cwd(t, "src").unwrap(), "/workspace/src");
        assert_eq!(box_cwd(t, "./a//b/").unwrap(), "/workspace/a/b");
        assert_eq!(box_cwd(t, ".").unwrap(), "/workspace");
        assert_eq!(box_cwd(t, "a/../b").unwrap(), "/workspace/b");
        assert_eq!(box_cwd(t, "/workspace").unwrap(), "/workspace");
        assert_eq!(box_cwd(t, "/workspace/x/..").unwrap(), "/workspace");
    }

    #[test]
    fn an_absolute_cwd_is_any_path_of_the_box() {
        let t = "/workspace";
        assert_eq!(box_cwd(t, "/etc").unwrap(), "/etc");
        assert_eq!(box_cwd(t, "/workspaces/a").unwrap(), "/workspaces/a");
        assert_eq!(box_cwd(t, "/home/user/").unwrap(), "/home/user");
        assert_eq!(box_cwd(t, "/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(box_cwd(t, "/../..").unwrap(), "/");
        assert_eq!(box_cwd(t, "/").unwrap(), "/");
    }

    #[test]
    fn a_relative_cwd_may_not_leave_the_workspace() {
        let t = "/workspace";
        for (bad, why) in [
            ("..", "`..`"),
            ("a/../..", "`..`"),
            ("/workspace/..", "`..`"),
            ("", "empty"),
            ("a\0b", "NUL"),
        ] {
            let e = box_cwd(t, bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[tokio::test]
    async fn a_call_is_cancelled_by_its_abort_or_by_close_and_not_by_a_dropped_abort() {
        use tokio::sync::watch;
        let (closing, closing_rx) = watch::channel(false);
        let (abort, abort_rx) = watch::channel(false);
        let (mut rx, _guard) = cancel_either(closing_rx.clone(), Some(abort_rx));
        abort.send_replace(true);
        assert!(rx.wait_for(|v| *v).await.is_ok());

        // An abort whose sender is gone (the call's registration ended) cancels nothing;
        // close() still does.
        let (abort, abort_rx) = watch::channel(false);
        let (mut rx, _guard) = cancel_either(closing_rx, Some(abort_rx));
        drop(abort);
        tokio::task::yield_now().await;
        assert!(!*rx.borrow());
        closing.send_replace(true);
        assert!(rx.wait_for(|v| *v).await.is_ok());
        assert!(aborted(Some(&watch::channel(true).1)));
        assert!(!aborted(None));
    }

    #[test]
    fn env_takes_the_sandbox_env_rules() {
        let req = |v: Value| ExecRequest {
            env: Some(v),
            ..Default::default()
        };
        let ok = PerCall::of(&req(serde_json::json!({"A": "1"})), "/workspace").unwrap();
        assert_eq!(ok.env, vec![("A".to_string(), "1".to_string())]);
        assert!(!ok.is_plain());
        for bad in [
            serde_json::json!({"A=B": "1"}),
            serde_json::json!({"A": 1}),
            serde_json::json!(["A"]),
        ] {
            let e = PerCall::of(&req(bad), "/workspace")
                .unwrap_err()
                .to_string();
            assert!(e.contains("option `env`"), "{e}");
        }
        let plain = PerCall::of(&ExecRequest::default(), "/workspace").unwrap();
        assert!(plain.is_plain());
    }
}
