//! `BoxSpec`: everything `kern` needs to build one box, as plain data. The addon serialises it to
//! JSON and hands it to `kern` on an inherited pipe (never argv, never a path on disk), so the
//! caller's `env` is never visible in any process's command line.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the box's read-only root comes from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RootSpec {
    /// A directory holding a complete root filesystem (debootstrap output, an unpacked image).
    Dir { path: PathBuf },
    /// The host's own `/usr`, `/bin`, `/lib*` and a reduced `/etc`, read-only.
    Host,
}

/// One scratch tmpfs inside the box.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TmpfsSpec {
    /// Absolute path inside the box.
    pub target: String,
    /// Size cap in bytes.
    pub size_bytes: u64,
}

/// The account the workload runs as, in the box's own ids (the image's `USER`, resolved in its
/// /etc/passwd and /etc/group). None: box root.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BoxUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups; only settable when the box has an id range (kern started as root).
    #[serde(default)]
    pub groups: Vec<u32>,
}

/// Resource caps. `None` means uncapped.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// CPU cap in cores (fractional allowed).
    pub cpus: Option<f64>,
    /// true: cgroups (hard); false: rlimits only (best effort).
    pub enforce: bool,
    /// `requireLimits`: refuse to run unless the memory and pids caps asked for are read back
    /// from the box's cgroup as set.
    #[serde(default)]
    pub require: bool,
}

/// One box, one workload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BoxSpec {
    pub root: RootSpec,
    /// Host directory bound read-write at `workspace_target`, the workload's cwd.
    pub workspace: PathBuf,
    pub workspace_target: String,
    pub tmpfs: Vec<TmpfsSpec>,
    pub limits: Limits,
    /// Wall-clock limit in milliseconds, enforced by `kern` outside the box.
    pub timeout_ms: u64,
    /// The argv to exec; `argv[0]` without a slash is looked up in the box's PATH.
    pub argv: Vec<String>,
    /// The complete environment of the workload (defaults already merged by the caller).
    pub env: Vec<(String, String)>,
    pub hostname: String,
    /// Who the workload runs as; None is box root.
    #[serde(default)]
    pub user: Option<BoxUser>,
    /// The caller sent a socket with this spec (SCM_RIGHTS); the workload gets it as fd 3, its
    /// private channel to the caller (the python driver's results travel on it).
    #[serde(default)]
    pub channel: bool,
    /// The caller sent a pipe's read end with this spec (SCM_RIGHTS, after the channel and the
    /// egress line): the workload's fd 0, which the caller feeds and closes (a call's `stdin`).
    /// Without it, fd 0 is /dev/null.
    #[serde(default)]
    pub stdin: bool,
    /// Extra host binds (the `mounts` option, checked by the caller), mounted in this order.
    #[serde(default)]
    pub binds: Vec<BindSpec>,
    /// Share the host's network namespace instead of a private one with only `lo` (the `setup`
    /// box). Nothing else of the posture changes.
    #[serde(default)]
    pub host_network: bool,
    /// Files placed at `/etc/<name>` in place of the image's (a `setup` box's resolv.conf and
    /// the host's CA bundle). Non-empty makes `/etc` a skeleton of the image's entries.
    #[serde(default)]
    pub etc: Vec<EtcOverride>,
    /// Workspace-relative directories mounted read-only over themselves (`.deps` when
    /// `depsReadonly`). A missing one is skipped; one that is not a real directory is refused.
    #[serde(default)]
    pub readonly_in_workspace: Vec<String>,
    /// `egressAllow`: the box's PID 1 runs a relay listening on `127.0.0.1:<port>` in the box's
    /// own network namespace, which hands every connection it accepts (the socket itself, by
    /// SCM_RIGHTS) to the host's proxy over a socket the caller sent with this spec.
    #[serde(default)]
    pub egress: Option<EgressSpec>,
    /// An AppArmor profile the workload enters at exec (`apparmor`); the box fails to start
    /// when it can't.
    #[serde(default)]
    pub apparmor: Option<String>,
    /// Capabilities the workload keeps (`capDrop` names what goes); empty: none, the default.
    #[serde(default)]
    pub keep_caps: Vec<u32>,
    /// `securityProfile: "untrusted"`: the seccomp programs the workload runs under; escapes it
    /// stops come back as `escape_blocked`.
    #[serde(default)]
    pub seccomp: Option<crate::engine::boxside::seccomp::Programs>,
    /// Host character devices bound into the box's `/dev` (the `vgpio:` profiles), read-write.
    #[serde(default)]
    pub devices: Vec<DeviceSpec>,
    /// A resident box (`persist`): start one, or exec this call into a live one.
    #[serde(default)]
    pub resident: Option<Resident>,
    /// The workload's cwd when it is not the workspace (the setup box starts in an empty
    /// scratch directory, so nothing a box left in the workspace is on its import path).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The workload's stdin, stdout and stderr are a new terminal of the box's own devpts
    /// (`sb.terminal`, `kern run -it`), its controlling terminal, of this size. The caller sent
    /// a socket for it (`BoxFds::tty`); the terminal's master goes back on it (`engine::boxside::pty`).
    #[serde(default)]
    pub tty: Option<TtySize>,
    /// The caller sent a socket (`BoxFds::connect`): PID 1 forks the connector, which dials
    /// `127.0.0.1:<port>` inside the box when asked and hands the connected socket back
    /// (`SandboxProcess.connect`, `engine::boxside::connector`).
    #[serde(default)]
    pub connector: bool,
    /// ADDITION (issue 21): this box is a Sandbox's zygote (`engine::monitor::zygote`): its workload may
    /// make the user namespaces of the calls it forks, and its `/proc` is left unmasked so a
    /// call's own `/proc` can be mounted (each call masks its own).
    #[serde(default)]
    pub serves_zygote: bool,
    /// ADDITION (issue 21): this call runs in the box its kern (a zygote spare,
    /// `launch::Kern::spawn_zygote`) had the Sandbox's zygote fork and set up before the call,
    /// instead of a box kern clones.
    #[serde(default)]
    pub zygote: bool,
    /// ADDITION (issue 34): the caller watches the workspace (`workspace::watch`) and clears
    /// the set-id bits of every file the box changed there, at the cost of what changed. kern's
    /// own sweep then takes only `.deps` (which the watch leaves out) and the `"rw"` binds; after
    /// its report it waits for the caller's `Command::Swept`, and sweeps the whole workspace
    /// itself when that doesn't come (the caller died, or could not finish).
    #[serde(default)]
    pub setid_watched: bool,
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct TtySize {
    pub cols: u16,
    pub rows: u16,
}

/// The two halves of a resident box.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Resident {
    /// Build the box, but PID 1 runs no workload: it only reaps. The monitor writes the state
    /// file `name` (its opener holds the name's lock meanwhile), reports, detaches from its
    /// caller and keeps the box until `ttl_ms` (or a stop), then removes state and cgroup.
    /// `timeout_ms` of the spec bounds only the start.
    Start {
        name: String,
        ttl_ms: u64,
        /// The options that define the box, by option name (a mismatch names them).
        posture: std::collections::BTreeMap<String, String>,
    },
    /// Run this spec's argv in the live box `name`, whose PID 1 must be `pid1`.
    Exec {
        name: String,
        pid1: super::sys::ProcId,
    },
}

/// Where the egress relay listens inside the box.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EgressSpec {
    pub port: u16,
    /// Loopback addresses `egressAllow` lists (`127.0.0.1:8080`): the relay listens on each in
    /// the box too and tunnels it to the host's, so clients that go straight to loopback
    /// (`NO_PROXY`) reach the listed service.
    #[serde(default)]
    pub direct: Vec<(std::net::IpAddr, u16)>,
}

/// One host path bound into the box. The caller resolved and checked `source` and recorded the
/// inode it saw; `kern` opens it again and refuses to mount anything else.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BindSpec {
    pub source: PathBuf,
    /// Absolute, normalised path in the box.
    pub target: String,
    pub writable: bool,
    pub dir: bool,
    pub dev: u64,
    pub ino: u64,
}

/// One host character device bound into the box. The caller resolved `source` (symlinks and
/// all) to the real node and recorded its identity; `kern` opens that path again without
/// following symlinks and binds it only if it is still this node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The real node on the host (canonical, no symlinks in it).
    pub source: PathBuf,
    /// Absolute, normalised path in the box, under `/dev/`.
    pub target: String,
    pub dev: u64,
    pub ino: u64,
    /// The device number the node stands for (major/minor): an inode reused for another device
    /// is refused too.
    pub rdev: u64,
}

/// What goes at `/etc/<name>`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EtcOverride {
    /// A small generated file.
    Contents { name: String, contents: String },
    /// A host file bound read-only (trusted: chosen by the caller, not the box).
    HostFile { name: String, source: PathBuf },
}

impl EtcOverride {
    pub fn name(&self) -> &str {
        match self {
            EtcOverride::Contents { name, .. } | EtcOverride::HostFile { name, .. } => name,
        }
    }
}

/// The descriptor number the caller's channel has in the workload.
pub const CHANNEL_FD: i32 = 3;

impl BoxSpec {
    /// For unit tests: the host's root, no caps, nothing asked beyond running `true` in a
    /// workspace that need not exist; a test sets the fields it is about.
    #[cfg(test)]
    pub(crate) fn for_tests() -> BoxSpec {
        BoxSpec {
            root: RootSpec::Host,
            workspace: "/nonexistent".into(),
            workspace_target: "/workspace".into(),
            tmpfs: Vec::new(),
            limits: Default::default(),
            timeout_ms: 1000,
            argv: vec!["true".into()],
            env: Vec::new(),
            hostname: "sandbox".into(),
            user: None,
            channel: false,
            stdin: false,
            binds: Vec::new(),
            host_network: false,
            etc: Vec::new(),
            readonly_in_workspace: Vec::new(),
            egress: None,
            apparmor: None,
            keep_caps: Vec::new(),
            seccomp: None,
            devices: Vec::new(),
            resident: None,
            cwd: None,
            tty: None,
            connector: false,
            serves_zygote: false,
            zygote: false,
            setid_watched: false,
        }
    }

    /// Whether the box's mounts must be locked (`nest`): only a workload that keeps
    /// CAP_SYS_ADMIN can mount, remount or unmount at all; without it the lock would buy
    /// nothing and cost a user namespace per box.
    pub fn locks_mounts(&self) -> bool {
        self.keep_caps.contains(&super::caps::SYS_ADMIN)
    }

    /// The PATH the workload's `argv[0]` is resolved with.
    pub fn path_var(&self) -> &str {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
            .unwrap_or(DEFAULT_PATH)
    }
}

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
pub const DEFAULT_HOSTNAME: &str = "kern";
pub const DEFAULT_WORKSPACE_TARGET: &str = "/workspace";

/// `a` is the box path `b` or a path under it (both normalised, absolute): where a cwd, a
/// mount or a PATH entry stands against the workspace target or another mount.
pub fn at_or_under(a: &str, b: &str) -> bool {
    a == b || b == "/" || a.strip_prefix(b).is_some_and(|rest| rest.starts_with('/'))
}
