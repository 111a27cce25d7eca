//! The resolved configuration of a session, and the defaults it starts from: what
//! `session::options` makes of a Sandbox's options object, and what `kern run` fills from its
//! flags. A leaf: it takes types from `engine` and `image`, nothing from `session`, so the
//! `kern` binary and both sides of the options (their parser, `kern.toml` profiles, the
//! host-bind policy) can share it.

mod bounds;
mod env;
mod exec;

pub use bounds::*;
pub use env::base_env;
pub use exec::*;

use crate::engine::shared::spec::{Limits, TmpfsSpec, DEFAULT_WORKSPACE_TARGET};
use crate::image::Source;
use std::path::PathBuf;

pub const DEFAULT_TMPFS_MB: u64 = 64;
pub const DEFAULT_MEMORY_MB: u64 = 512;
pub const DEFAULT_PIDS: u64 = 256;
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_MAX_OUTPUT: usize = 64 << 20;
/// The most extra host mounts a session may ask for (each is a descriptor kern receives).
pub const MAX_MOUNTS: usize = 16;
/// The most prewarmed boxes a session keeps.
pub const MAX_PREWARM: usize = 64;
/// ADDITION (issue 34): what a Sandbox may spend on spares beyond its minimum, by default
/// (`spareMemoryMb`), and at most.
pub const DEFAULT_SPARE_MEMORY_MB: u64 = 64;
pub const MAX_SPARE_MEMORY_MB: u64 = 4096;
/// The spec's default image, pulled from Docker Hub on first use.
pub const DEFAULT_IMAGE: &str = "python:3.12-slim";

/// Everything a session needs, validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the root comes from; resolved (pulled, imported) at open().
    pub image: Source,
    pub workspace: Option<PathBuf>,
    /// Where the boxes see the workspace (`workspaceMount`), checked by
    /// `check_workspace_mount`.
    pub workspace_target: String,
    pub limits: Limits,
    pub timeout_ms: u64,
    pub max_output: usize,
    /// ADDITION (issue 35): output past `max_output` goes to a workspace file (`spillOutput`).
    pub spill_output: bool,
    pub tmpfs: Vec<TmpfsSpec>,
    pub env: Vec<(String, String)>,
    pub track_files: bool,
    /// Prewarmed python boxes to keep (`prewarm`).
    pub prewarm: usize,
    /// ADDITION (issue 21): python cells forked by a zygote (`zygote`).
    pub zygote: bool,
    /// ADDITION (issue 34): the memory spares may take beyond the minimum (`spareMemoryMb`).
    pub spare_memory_mb: u64,
    /// Extra host binds, checked (`mounts`); the `volumes` among them too.
    pub mounts: Vec<crate::engine::shared::spec::BindSpec>,
    /// ADDITION (issue 35): the named volumes mounted (`volumes`), each also in `mounts`;
    /// open() takes them (`volume::acquire`) before any box.
    pub volumes: Vec<crate::volume::Use>,
    /// The `setup` command, run once at open() in a networked box.
    pub setup: Option<String>,
    /// Cooperative cap on the workspace's disk usage (`workspaceMaxBytes`).
    pub workspace_max_bytes: Option<u64>,
    /// `.deps` read-only in every box (`depsReadonly`).
    pub deps_readonly: bool,
    /// How the `setup` box reaches the network (`setupNetwork`).
    pub setup_network: SetupNetwork,
    /// Byte-compile the image's stdlib once per image (`pycCache`).
    pub pyc_cache: bool,
    /// The boxes' way out (`network`, `egressAllow`).
    pub network: Network,
    /// `secrets`: placeholders in the boxes' environment, values substituted by the proxy.
    pub secrets: Vec<crate::proxy::SecretSpec>,
    /// ADDITION (issue 35): where the egress proxy keeps package files (`packageCache`).
    pub package_cache: PackageCacheChoice,
    /// The AppArmor profile every box's workload enters (`apparmor`).
    pub apparmor: Option<String>,
    /// Capabilities boxes keep: all but those `capDrop` names (none by default).
    pub keep_caps: Vec<u32>,
    /// `user`: the account every box runs as, resolved in the image at open(); None: the
    /// image's USER.
    pub user: Option<String>,
    /// `securityProfile: "untrusted"`: the seccomp programs every box runs under.
    pub seccomp: Option<crate::engine::boxside::seccomp::Programs>,
    /// Host character devices every box gets (`vgpio:` profiles).
    pub devices: Vec<crate::engine::shared::spec::DeviceSpec>,
    /// Runtime notes about the options, given with the session's first call.
    pub notes: Vec<String>,
    /// `persist`: every call runs in one resident box of this name.
    pub resident: Option<ResidentOpts>,
}

/// `persist`, `name`, `persistTtlS`.
#[derive(Debug, Clone)]
pub struct ResidentOpts {
    pub name: String,
    pub ttl_ms: u64,
}

/// `persistTtlS` when left out: an hour.
pub const DEFAULT_PERSIST_TTL_S: u64 = 3600;

/// How the `setup` box reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupNetwork {
    /// Every public host on ports 80 and 443 through the egress proxy, plus what `egressAllow`
    /// lists: never the host's loopback or private ranges unless listed (the default).
    Public,
    /// The host's network namespace, as the host has it (a private package index, a proxy).
    Host,
}

/// Where the egress proxy (the `setup` box's, and `egressAllow`'s) keeps the package files
/// boxes download from PyPI and npm (`proxy::PackageCache`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageCacheChoice {
    /// None: those hosts' TLS runs end to end, as any other's (`packageCache: false`).
    Off,
    /// The user's (`$KERN_HOME/packages`), the default.
    Default,
    /// A directory the caller names (`packageCache: "/abs/dir"`).
    At(std::path::PathBuf),
}

/// How the session's boxes (not its `setup` box: see `SetupNetwork`) reach the network.
#[derive(Debug, Clone)]
pub enum Network {
    /// A namespace with only `lo` (the default).
    None,
    /// The host's network namespace (`network: true`).
    Host,
    /// The allowlist proxy, with the policy the `egressAllow` entries make.
    Egress(crate::proxy::Policy),
}

impl Config {
    /// The configuration of an empty options object, before its image is chosen: the spec's
    /// defaults.
    pub fn defaults() -> Config {
        Config {
            image: Source::Host,
            workspace: None,
            workspace_target: DEFAULT_WORKSPACE_TARGET.into(),
            limits: Limits {
                memory_bytes: Some(DEFAULT_MEMORY_MB * MIB),
                pids: Some(DEFAULT_PIDS),
                cpus: None,
                enforce: true,
                require: false,
            },
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_output: DEFAULT_MAX_OUTPUT,
            spill_output: false,
            tmpfs: vec![TmpfsSpec {
                target: "/tmp".into(),
                size_bytes: DEFAULT_TMPFS_MB * MIB,
            }],
            env: Vec::new(),
            track_files: true,
            prewarm: 0,
            zygote: false,
            spare_memory_mb: DEFAULT_SPARE_MEMORY_MB,
            mounts: Vec::new(),
            volumes: Vec::new(),
            setup: None,
            workspace_max_bytes: None,
            deps_readonly: true,
            setup_network: SetupNetwork::Public,
            pyc_cache: true,
            network: Network::None,
            secrets: Vec::new(),
            package_cache: PackageCacheChoice::Default,
            apparmor: None,
            keep_caps: Vec::new(),
            seccomp: None,
            resident: None,
            user: None,
            devices: Vec::new(),
            notes: Vec::new(),
        }
    }
}
