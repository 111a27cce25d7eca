//! ADDITION (issue 21): a Sandbox's zygote (`zygote: true`), the session's side: what the
//! opened session holds (`Zygote`, its spares) and the zygote's environment; `zygote_start`
//! starts it at open(), `route` takes its forks. One box runs
//! the python driver with the zygote in front of it (`lang/zygote.py`), started at open(); each
//! python cell that may take it is forked from it by the call's own `kern` (`engine::monitor::zygote`).
//! Which calls may: python `runCode` cells with no `env`, `cwd` or stdin of their own (the
//! interpreter started under the Sandbox's), streaming ones and ones with a `signal` included;
//! the others run in fresh boxes as before. The zygote's environment holds no place a box writes
//! (`start_env`); each call's workload takes them back in its own box.

use super::spares::Spares;
use crate::engine::addon::launch::{Kern, Outcome};
use crate::error::Result;
use crate::lang::sources;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

/// The zygote's python: its source in front of the driver's, which hands over to it.
pub(super) fn source() -> String {
    format!("{}\n{}", sources::ZYGOTE, sources::DRIVER)
}

pub(super) struct Zygote {
    /// Our end of the zygote's channel: one message per call, a byte and a socket.
    ctl: OwnedFd,
    /// Resolves when the zygote's box has ended.
    ended: tokio::task::JoinHandle<Result<Option<Outcome>>>,
    /// Turning true would end the zygote's box; held, not used: its session's close() ends it.
    _stop: tokio::sync::watch::Sender<bool>,
    /// What each call's box is made from (the Sandbox's scratch mounts and hostname).
    inputs: crate::engine::plan::Inputs,
    /// Spare kerns in their cgroups, each with a call's box the zygote forked and they set up,
    /// whose workload waits for a call.
    spares: Spares<Kern>,
    /// Whether a call was told the zygote has ended (once).
    end_told: std::sync::atomic::AtomicBool,
}

/// How many boxes a zygote keeps set up ahead of calls at least (each a kern, and a fork of the
/// zygote sharing its memory until written); more follow the cells in flight, within half of
/// `spareMemoryMb` (`spares`).
const SPARES: usize = 2;

impl Zygote {
    /// The zygote of a box that has said it serves on `ctl`; no spares yet (`top_up`).
    pub(super) fn new(
        ctl: OwnedFd,
        ended: tokio::task::JoinHandle<Result<Option<Outcome>>>,
        stop: tokio::sync::watch::Sender<bool>,
        inputs: crate::engine::plan::Inputs,
        spare_share_mb: u64,
    ) -> Zygote {
        Zygote {
            ctl,
            ended,
            _stop: stop,
            inputs,
            spares: Spares::new(
                SPARES,
                super::opened::spare_max(SPARES, spare_share_mb, super::opened::ZYGOTE_SPARE_KIB),
            ),
            end_told: Default::default(),
        }
    }

    /// Whether the zygote's box still runs: its kern has not reported it ended, and the far end
    /// of its channel is open. The channel says so first: it closes as the zygote dies (killed
    /// from outside, OOM), before the forks it made are gone and well before its kern's report,
    /// and a call given a fork of a dying zygote would end with it instead of running fresh.
    pub(super) fn alive(&self) -> bool {
        if self.ended.is_finished() {
            return false;
        }
        let mut fds = [nix::poll::PollFd::new(
            self.ctl.as_fd(),
            nix::poll::PollFlags::empty(),
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
            Ok(n) if n > 0 => !fds[0].revents().is_some_and(|r| {
                r.intersects(nix::poll::PollFlags::POLLHUP | nix::poll::PollFlags::POLLERR)
            }),
            _ => true,
        }
    }

    /// Starts spares up to as many as are wanted now, unless the session is `closing` (checked
    /// under the lock `shut_down` retires them under).
    pub(super) fn top_up(
        &self,
        closing: &tokio::sync::watch::Sender<bool>,
        kern: &Path,
        limits: &crate::engine::shared::spec::Limits,
    ) {
        self.spares.top_up(
            || !*closing.borrow() && self.alive(),
            || self.spawn_spare(kern, limits),
        );
    }

    /// The oldest live spare: a kern whose box, forked from the zygote, is set up and waits
    /// for a call.
    pub(super) fn take(&self) -> Option<Kern> {
        self.spares.take()
    }

    /// A kern with a fork of the zygote, set up as a call's box by the time the call comes.
    fn spawn_spare(
        &self,
        kern: &Path,
        limits: &crate::engine::shared::spec::Limits,
    ) -> Option<Kern> {
        let (ours, theirs) = seqpacket_pair().ok()?;
        crate::engine::shared::sys::send_with_fds(self.ctl.as_fd(), b"x", &[theirs.as_raw_fd()])
            .ok()?;
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

    /// Lets the spares beyond the minimum go once no cell has asked for one for a while.
    pub(super) fn trim_idle(&self) {
        self.spares.trim_idle(super::spares::IDLE);
    }

    /// Lets every spare go (close()): each kern ends its unused box and leaves.
    pub(super) fn retire(&self) -> Vec<super::spares::Gone> {
        self.spares.retire_all()
    }

    /// Whether a spare is being made for it now.
    pub(super) fn making(&self) -> bool {
        self.spares.making()
    }
}

/// Variables the zygote's python takes at its start as a fresh box's python does: each sets how
/// the interpreter behaves, none names a place code or bytecode is loaded from.
const KEPT: &[&str] = &[
    "PYTHONUNBUFFERED",
    "PYTHONHASHSEED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONOPTIMIZE",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONWARNINGS",
    "PYTHONFAULTHANDLER",
    "PYTHONTRACEMALLOC",
    "PYTHONDEVMODE",
    "PYTHONMALLOC",
    "PYTHONMALLOCSTATS",
    "PYTHONINTMAXSTRDIGITS",
    "PYTHONNODEBUGRANGES",
    "PYTHONWARNDEFAULTENCODING",
    "PYTHONCOERCECLOCALE",
    "PYTHONVERBOSE",
    "PYTHONDEBUG",
    "PYTHONPROFILEIMPORTTIME",
    "PYTHONINSPECT",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHON_CPU_COUNT",
    "PYTHON_GIL",
    "PYTHON_JIT",
    "PYTHON_FROZEN_MODULES",
];

/// Variables a fresh box's python or loader takes only at its start, from a place: the zygote
/// can neither take them (a box may have written there) nor give them to a call afterwards.
/// Allowed as the image's config sets them (the image is read-only in the box).
pub(crate) fn refused(name: &str) -> bool {
    name.starts_with("LD_")
        || [
            "PYTHONHOME",
            "PYTHONPLATLIBDIR",
            "PYTHON_PRESITE",
            "GCONV_PATH",
            "GETCONF_DIR",
            "GLIBC_TUNABLES",
            "LOCPATH",
            "NLSPATH",
        ]
        .contains(&name)
}

/// The first entry of `path` (a PATH) that is the workspace at `ws` or inside it, where a box
/// could plant the program the zygote runs.
pub(super) fn path_in_workspace<'a>(path: &'a str, ws: &str) -> Option<&'a str> {
    path.split(':').find(|d| crate::config::at_or_under(d, ws))
}

/// Where the zygote's HOME points: nowhere, so no user site is read at its start.
const NO_HOME: &str = "/nonexistent";

/// The zygote's environment, from the one a fresh box of the Sandbox gets (`env`): nothing in it
/// names a place a box could have written (see `lang/zygote.py`). Every variable that could
/// (PYTHONPATH, PYTHONUSERBASE, PYTHONSTARTUP, any PYTHON* not in `KEPT`, OPENSSL_*, HOME, PATH) goes
/// aside into `KERN_ZYGOTE_ENV`, with the workspace, for each call's workload to put back in its
/// own box; HOME points nowhere, PATH is the image's, PYTHONPATH is only the pyc hook. A
/// variable in `refused` the image did not set is refused: no call could get it.
pub(super) fn start_env(
    env: &[(String, String)],
    image_env: &[(String, String)],
    workspace_target: &str,
    hook: Option<&str>,
) -> Result<Vec<(String, String)>> {
    let mut kept = Vec::new();
    let mut aside = serde_json::Map::new();
    for (k, v) in env {
        if refused(k) && !image_env.iter().any(|(ik, iv)| ik == k && iv == v) {
            return crate::invalid!(
                "option `zygote` can't be combined with the environment variable {k} (from `env`): python or its loader reads it only at start, from a place a box could write, and the zygote's python starts before any call and runs nothing a box could have written; leave `zygote` out, or {k} out of `env`"
            );
        }
        // OPENSSL_*: libcrypto reads its config and modules from there once loaded; the zygote
        // loads none today, and a call's workload gets them back before it could.
        if k == "HOME"
            || k == "PATH"
            || k.starts_with("OPENSSL_")
            || (k.starts_with("PYTHON") && !KEPT.contains(&k.as_str()))
        {
            aside.insert(k.clone(), serde_json::Value::String(v.clone()));
        } else {
            kept.push((k.clone(), v.clone()));
        }
    }
    let image_path = image_env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(crate::engine::shared::spec::DEFAULT_PATH, |(_, v)| {
            v.as_str()
        });
    kept.push(("HOME".into(), NO_HOME.into()));
    kept.push(("PATH".into(), image_path.into()));
    let hook = hook.filter(|h| {
        aside
            .get("PYTHONPATH")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|p| p.split(':').next() == Some(*h))
    });
    if let Some(h) = hook {
        kept.push(("PYTHONPATH".into(), h.into()));
    }
    let info = serde_json::json!({ "env": aside, "cwd": workspace_target, "hook": hook });
    kept.push(("KERN_ZYGOTE_ENV".into(), info.to_string()));
    Ok(kept)
}

/// A socketpair that keeps message boundaries: each call's socket reaches the zygote in a
/// message of its own (a stream would merge two calls' messages, and one recvmsg would then
/// drop the second socket), and kern's plans and the call's lines arrive whole.
pub(super) fn seqpacket_pair() -> nix::Result<(OwnedFd, OwnedFd)> {
    nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_into_the_workspace_is_found() {
        let path = "/usr/bin:/home/user/.local/bin:/bin";
        assert_eq!(
            path_in_workspace(path, "/home/user"),
            Some("/home/user/.local/bin")
        );
        assert_eq!(
            path_in_workspace(path, "/home/user/.local/bin"),
            Some("/home/user/.local/bin")
        );
        assert_eq!(path_in_workspace(path, "/home/username"), None);
        assert_eq!(path_in_workspace(path, "/workspace"), None);
        // A workspace inside a PATH directory leaves the rest of it to the image.
        assert_eq!(path_in_workspace(path, "/usr/bin/x"), None);
    }

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_place_a_box_writes_reaches_the_zygote_s_start() {
        let image = kv(&[("PATH", "/usr/bin:/bin"), ("PYTHON_VERSION", "3.12.1")]);
        let env = kv(&[
            ("PATH", "/workspace/.deps/python/bin:/usr/bin:/bin"),
            ("HOME", "/workspace"),
            ("PYTHON_VERSION", "3.12.1"),
            ("PYTHONPATH", "/.kern-pyc/hook:/workspace/lib"),
            ("PYTHONUSERBASE", "/workspace/.deps/pyuser"),
            ("PYTHONSTARTUP", "/workspace/s.py"),
            ("PYTHONHASHSEED", "0"),
            ("OPENSSL_CONF", "/workspace/openssl.cnf"),
            ("LANG", "C.UTF-8"),
        ]);
        let out = start_env(&env, &image, "/workspace", Some("/.kern-pyc/hook")).expect("env");
        let get = |k: &str| out.iter().find(|(ek, _)| ek == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HOME"), Some(NO_HOME));
        assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
        assert_eq!(get("PYTHONPATH"), Some("/.kern-pyc/hook"));
        assert_eq!(get("PYTHONHASHSEED"), Some("0"));
        assert_eq!(get("LANG"), Some("C.UTF-8"));
        for k in [
            "PYTHONUSERBASE",
            "PYTHONSTARTUP",
            "PYTHON_VERSION",
            "OPENSSL_CONF",
        ] {
            assert_eq!(get(k), None, "{k}");
        }
        let info: serde_json::Value =
            serde_json::from_str(get("KERN_ZYGOTE_ENV").expect("info")).expect("json");
        assert_eq!(info["env"]["PYTHONPATH"], "/.kern-pyc/hook:/workspace/lib");
        assert_eq!(info["env"]["HOME"], "/workspace");
        assert_eq!(info["cwd"], "/workspace");
        // No hook unless the PYTHONPATH a fresh box gets starts with it.
        let out = start_env(&kv(&[("PYTHONPATH", "/w")]), &image, "/w", Some("/h")).expect("env");
        assert!(!out.iter().any(|(k, _)| k == "PYTHONPATH"));
    }

    #[test]
    fn loader_and_stdlib_places_are_refused_unless_the_image_set_them() {
        let image = kv(&[("LD_LIBRARY_PATH", "/usr/local/cuda/lib64")]);
        for (k, v) in [
            ("LD_PRELOAD", "/workspace/x.so"),
            ("LD_LIBRARY_PATH", "/workspace"),
            ("PYTHONHOME", "/workspace/py"),
            ("GCONV_PATH", "/tmp"),
        ] {
            let e = start_env(&kv(&[(k, v)]), &image, "/workspace", None)
                .expect_err(k)
                .to_string();
            assert!(e.contains(k) && e.contains("zygote"), "{e}");
        }
        assert!(start_env(&image, &image, "/workspace", None).is_ok());
    }
}
