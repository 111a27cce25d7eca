//! ADDITION (issue 21): starting a Sandbox's zygote at open() (`zygote`: what the session then
//! holds): its box runs the python driver with the zygote in front of it, in an environment
//! that names no place a box writes, and is waited for until it serves.

use super::longbox;
use super::opened::Opened;
use super::percall::PerCall;
use super::prepared::{prepare, Workload};
use super::zygote::{seqpacket_pair, source, start_env, Zygote};
use crate::error::{Error, Result};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long the zygote may take to start python and import the driver (about 40 ms here; a
/// cold page cache on a slow disk is many times that).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// What only open() knows: the image's account. The options were checked before
/// (`options::runtime::zygote_limits`).
fn check(opened: &Opened) -> Result<()> {
    if opened.image.user.as_ref().is_some_and(|u| u.uid != 0) {
        return crate::invalid!("option `zygote` can't be combined with an image whose USER is not root yet: the zygote's forks map only uid 0; leave `zygote` out for this image");
    }
    // The zygote finds python3 on the image's PATH (`start_env`): none of it may be a place a
    // box writes.
    let ws = &opened.config.workspace_target;
    let path = opened
        .base_env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(crate::engine::shared::spec::DEFAULT_PATH, |(_, v)| {
            v.as_str()
        });
    if let Some(dir) = super::zygote::path_in_workspace(path, ws) {
        return crate::invalid!("option `zygote` can't be combined with `workspaceMount` {ws:?}: the image's PATH entry {dir}, where the zygote finds python3, would be the workspace or in it, which boxes write, and the zygote's python starts before any call and runs nothing a box could have written; pick another workspaceMount, or leave `zygote` out");
    }
    Ok(())
}

/// The pyc hook's directory when the Sandbox's boxes get the compiled-stdlib cache: kern's own
/// read-only files, which the zygote takes too.
fn pyc_bind_hook(cache: &super::pyc::Cache) -> Option<&'static str> {
    cache.bind().map(|_| super::pyc::HOOK_DIR)
}

/// Starts the zygote's box and waits until it serves.
pub(super) async fn start(opened: Arc<Opened>, kern: &Path) -> Result<Zygote> {
    check(&opened)?;
    let python = Workload::Own {
        argv: vec!["python3".into(), "-c".into(), source()],
        env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
        channel: true,
    };
    let mut spec = prepare(&opened, python, longbox::LIFETIME_MS, PerCall::default())?.spec;
    spec.serves_zygote = true;
    spec.env = start_env(
        &spec.env,
        &opened.base_env,
        &spec.workspace_target,
        opened.pyc.as_ref().and_then(pyc_bind_hook),
    )?;
    // The one capability the zygote keeps, in its box's user namespace only: a fork may map
    // its own uid 0 into the user namespace it makes only if its creator held CAP_SETFCAP
    // (since Linux 5.12). The fork's workload holds none: it lives in its own namespace.
    spec.keep_caps = vec![crate::engine::shared::caps::SETFCAP];
    crate::config::check_exec_size(&spec.argv, &spec.env)?;
    let (ours, theirs) =
        seqpacket_pair().map_err(|e| Error::Runtime(format!("socketpair for the zygote: {e}")))?;
    let (sink, mut output) = crate::engine::addon::launch::chunk_channel();
    let box_ = longbox::spawn(opened.clone(), kern, spec, Some(theirs), sink)?;
    // The zygote's own output (python's errors, if it fails to start) is kept for the error.
    let said = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = said.clone();
    tokio::spawn(async move {
        while let Some(c) = output.recv().await {
            if let Ok(mut k) = kept.lock() {
                if k.len() < 64 << 10 {
                    k.extend_from_slice(&c.data);
                }
            }
        }
    });
    let ready = ours
        .try_clone()
        .map_err(|e| Error::Runtime(format!("the zygote's channel: {e}")))?;
    let answered = tokio::task::spawn_blocking(move || {
        // A signal to the addon's process (a child's SIGCHLD) interrupts the wait: it goes on,
        // for what is left of it (an EINTR taken as the answer failed open() now and then).
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(nix::errno::Errno::ETIMEDOUT);
            }
            let mut fds = [nix::poll::PollFd::new(
                ready.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            let mut b = [0u8; 1];
            return match nix::unistd::read(&ready, &mut b) {
                Ok(1) => Ok(b[0]),
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => Err(nix::errno::Errno::EPIPE),
                Err(e) => Err(e),
            };
        }
    })
    .await
    .map_err(|e| Error::Runtime(format!("the zygote's start: {e}")))?;
    if !matches!(answered, Ok(b'r')) {
        box_.stop.send_replace(true);
        let said = said
            .lock()
            .map(|s| crate::engine::monitor::zygote::call::said_or(&s, "no output"))
            .unwrap_or_else(|_| "no output".into());
        return crate::invalid!(
            "option `zygote`: the image's python3 did not start the zygote ({said}); leave `zygote` out for this image"
        );
    }
    let inputs = crate::engine::plan::Inputs {
        tmpfs: opened.config.tmpfs.clone(),
        hostname: crate::engine::shared::spec::DEFAULT_HOSTNAME.into(),
    };
    let z = Zygote::new(
        ours,
        box_.ended,
        box_.stop,
        inputs,
        super::opened::spare_share_mb(&opened.config),
    );
    z.top_up(&opened.closing, kern, &opened.config.limits);
    Ok(z)
}
