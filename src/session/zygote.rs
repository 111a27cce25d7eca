//! ADDITION (issue 21): a Sandbox's zygote (`zygote: true`), the session's side. One box runs
//! the python driver with the zygote in front of it (`lang/zygote.py`), started at open(); each
//! python cell that may take it is forked from it by the call's own `kern` (`engine::zygote`).
//! Which calls may: the same as a prewarmed box's (no `env`, `cwd` or stdin of their own: the
//! interpreter started under the Sandbox's); the others run in fresh boxes as before.

use super::longbox;
use super::opened::Opened;
use crate::engine::launch::Kern;
use crate::error::{Error, Result};
use crate::lang::driver;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long the zygote may take to start python and import the driver (about 40 ms here; a
/// cold page cache on a slow disk is many times that).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The zygote's python: its source in front of the driver's, which hands over to it.
fn source() -> String {
    format!("{}\n{}", driver::ZYGOTE, driver::DRIVER)
}

pub(super) struct Zygote {
    /// Our end of the zygote's channel: one message per call, a byte and a socket.
    ctl: OwnedFd,
    box_: longbox::LongBox,
    /// What each call's box is made from (the Sandbox's scratch mounts and hostname).
    inputs: crate::engine::zygote::plan::Inputs,
    /// Kerns in their cgroups, each with a call's box the zygote forked and they set up, whose
    /// workload waits for a call; oldest first.
    spares: std::sync::Mutex<std::collections::VecDeque<Kern>>,
    /// Whether a call was told the zygote has ended (once).
    end_told: std::sync::atomic::AtomicBool,
}

/// How many boxes a zygote keeps set up ahead of calls (each a kern, and a fork of the zygote
/// sharing its memory until written).
const SPARES: usize = 2;

impl Zygote {
    /// Whether the zygote's box still runs.
    fn alive(&self) -> bool {
        !self.box_.ended.is_finished()
    }

    /// A kern with a fork of the zygote, set up as a call's box by the time the call comes.
    fn spawn_spare(&self, kern: &Path, limits: &crate::engine::spec::Limits) -> Option<Kern> {
        let (ours, theirs) = seqpacket_pair().ok()?;
        crate::engine::sys::send_with_fds(self.ctl.as_fd(), b"x", &[theirs.as_raw_fd()]).ok()?;
        drop(theirs);
        Kern::spawn_zygote(kern, limits, &self.inputs, ours).ok()
    }

    /// Once the zygote has ended (killed from outside, out of memory): a note for the next call,
    /// once. Python cells run in fresh boxes from then on.
    pub(super) fn end_note(&self) -> Option<String> {
        if self.alive()
            || self
                .end_told
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return None;
        }
        Some("note: zygote: the Sandbox's zygote has ended; python cells run in fresh boxes from now on (open a new Sandbox for a new zygote)".into())
    }

    /// Lets every spare go (close()): each kern ends its unused box and leaves.
    pub(super) fn retire(&self) {
        if let Ok(mut spares) = self.spares.lock() {
            spares.drain(..).for_each(Kern::retire);
        }
    }
}

/// What only open() knows: the image's account. The options were checked before
/// (`options::runtime::zygote_limits`).
fn check(opened: &Opened) -> Result<()> {
    if opened.image.user.as_ref().is_some_and(|u| u.uid != 0) {
        return crate::invalid!("option `zygote` can't be combined with an image whose USER is not root yet: the zygote's forks map only uid 0; leave `zygote` out for this image");
    }
    Ok(())
}

/// Starts the zygote's box and waits until it serves.
pub(super) async fn start(opened: Arc<Opened>, kern: &Path) -> Result<Zygote> {
    check(&opened)?;
    let workspace = opened.workspace_path()?;
    let mut spec = opened.call_spec(
        vec!["python3".into(), "-c".into(), source()],
        &[("PYTHONUNBUFFERED".into(), "1".into())],
        &[],
        longbox::LIFETIME_MS,
        true,
        &workspace,
    );
    spec.serves_zygote = true;
    // The one capability the zygote keeps, in its box's user namespace only: a fork may map
    // its own uid 0 into the user namespace it makes only if its creator held CAP_SETFCAP
    // (since Linux 5.12). The fork's workload holds none: it lives in its own namespace.
    spec.keep_caps = vec![crate::engine::caps::SETFCAP];
    crate::config::check_exec_size(&spec.argv, &spec.env)?;
    let (ours, theirs) =
        seqpacket_pair().map_err(|e| Error::Runtime(format!("socketpair for the zygote: {e}")))?;
    let (sink, mut output) = crate::engine::launch::chunk_channel();
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
            .map(|s| crate::engine::zygote::call::said_or(&s, "no output"))
            .unwrap_or_else(|_| "no output".into());
        return crate::invalid!(
            "option `zygote`: the image's python3 did not start the zygote ({said}); leave `zygote` out for this image"
        );
    }
    let inputs = crate::engine::zygote::plan::Inputs {
        tmpfs: opened.config.tmpfs.clone(),
        hostname: crate::engine::spec::DEFAULT_HOSTNAME.into(),
    };
    let z = Zygote {
        ctl: ours,
        box_,
        inputs,
        spares: Default::default(),
        end_told: Default::default(),
    };
    z.top_up(&opened, kern);
    Ok(z)
}

impl Zygote {
    /// Starts spares up to `SPARES`, unless the session is closing (checked under the lock
    /// `shut_down` retires them under).
    fn top_up(&self, opened: &Opened, kern: &Path) {
        let Ok(mut spares) = self.spares.lock() else {
            return;
        };
        while spares.len() < SPARES && !*opened.closing.borrow() && self.alive() {
            match self.spawn_spare(kern, &opened.config.limits) {
                Some(k) => spares.push_back(k),
                None => break,
            }
        }
    }
}

/// A kern whose box, forked from the zygote, is set up and waits for this call; None when the
/// session has no zygote, it has ended, or no spare is left (the call then runs in a fresh
/// box). The spares are topped up beside the call.
pub(super) fn take(opened: &Arc<Opened>, kern: &Path) -> Option<Kern> {
    let z = opened.zygote.get().filter(|z| z.alive())?;
    let taken = super::opened::oldest_live(&mut *z.spares.lock().ok()?);
    let (me, path) = (opened.clone(), kern.to_path_buf());
    tokio::task::spawn_blocking(move || {
        if let Some(z) = me.zygote.get() {
            z.top_up(&me, &path);
        }
    });
    taken
}

/// A socketpair that keeps message boundaries: each call's socket reaches the zygote in a
/// message of its own (a stream would merge two calls' messages, and one recvmsg would then
/// drop the second socket), and kern's plans and the call's lines arrive whole.
fn seqpacket_pair() -> nix::Result<(OwnedFd, OwnedFd)> {
    nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
}
