//! The Sandbox options as the spec defines them, checked one by one so that every mistake names
//! the option and says what to do. Options this release does not build are refused here, never
//! accepted and ignored.

use crate::engine::spec::{Limits, TmpfsSpec, DEFAULT_WORKSPACE_TARGET};
use crate::error::{Error, Result};
use crate::image::Source;
use serde_json::{Map, Value};
use std::path::PathBuf;

const MIB: u64 = 1 << 20;
pub const DEFAULT_TMPFS_MB: u64 = 64;
pub const DEFAULT_MEMORY_MB: u64 = 512;
pub const DEFAULT_PIDS: u64 = 256;
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_MAX_OUTPUT: usize = 64 << 20;
/// The most extra host mounts a session may ask for (each is a descriptor kern receives).
pub const MAX_MOUNTS: usize = 16;
/// The most prewarmed boxes a session keeps.
pub const MAX_PREWARM: usize = 64;
/// The spec's default image, pulled from Docker Hub on first use.
pub const DEFAULT_IMAGE: &str = "python:3.12-slim";

// Bounds of the numeric options: a value outside them is a SandboxError naming the option and
// the bound, before any box starts (never a box that dies, or a cap the kernel ignores).

/// The least memory a box may be given. Measured under a memory cgroup (what the box's runtime,
/// interpreter and driver take): `print()` in python needs 6 MiB, python importing json, asyncio
/// and subprocess 12 MiB, node 20 MiB, sh less than 1 MiB. Below the floor a box ends in a
/// confusing `killed` or `oom` fault, or hangs until its timeout (node at 16 MiB).
pub const MIN_MEMORY_MB: u64 = 32;
/// The most memory a cap may name: 16 TiB. More caps nothing on any host; `null` says that.
pub const MAX_MEMORY_MB: u64 = 16 << 20;
/// `cpu.max` takes no quota under 1 ms per 100 ms period.
pub const MIN_CPUS: f64 = 0.01;
/// More cores than Linux schedules on (NR_CPUS is at most 8192) caps nothing; the kernel
/// refuses a quota over 2^44 us anyway.
pub const MAX_CPUS: f64 = 8192.0;
/// The fewest tasks a box may be capped to. Measured: at 1 no box starts (`startup_failed`), at 2
/// python runs but a shell can't start a command; 8 leaves room for a pipeline.
pub const MIN_PIDS: u64 = 8;
/// `pids.max` takes at most PID_MAX_LIMIT (4 Mi on 64-bit).
pub const MAX_PIDS: u64 = 4 << 20;
/// The shortest timeout: kern's clock runs in milliseconds, and no box starts in less.
pub const MIN_TIMEOUT_S: f64 = 0.01;
/// The longest timeout: 7 days.
pub const MAX_TIMEOUT_S: f64 = 7.0 * 86_400.0;
/// The most output a call may keep per stream: 256 MiB, half of the longest string V8 makes
/// (2^29 characters), so that any output, decoded, still fits the result.
pub const MAX_OUTPUT_BYTES: u64 = 256 << 20;
/// A tmpfs (or `vdisk`) is at least a page; at most the memory cap's bound (a larger size wraps
/// to "unlimited" in the kernel's page count).
pub const MIN_TMPFS_BYTES: u64 = 4096;
pub const MAX_TMPFS_BYTES: u64 = MAX_MEMORY_MB * MIB;
/// Byte counts JavaScript holds exactly: 2^53 - 1 (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_BYTES: u64 = (1 << 53) - 1;
/// The longest `persistTtlS`: a year.
pub const MAX_PERSIST_TTL_S: f64 = 365.0 * 86_400.0;

/// Why a memory cap of `bytes` is out of bounds, in words that follow the option's name.
pub fn memory_out_of_bounds(bytes: u64) -> Option<String> {
    if bytes < MIN_MEMORY_MB * MIB {
        return Some(format!(
            "is {}, below the {MIN_MEMORY_MB} MiB a box needs to start (python with a few imports \
             takes 12 MiB, node 20 MiB, before any code of yours runs); give at least \
             {MIN_MEMORY_MB} MiB",
            show_bytes(bytes)
        ));
    }
    if bytes > MAX_MEMORY_MB * MIB {
        return Some(format!(
            "is {}, over the {MAX_MEMORY_MB} MiB (16 TiB) a memory cap may be; a larger one caps \
             nothing: turn the cap off instead (memoryMb: null; kern run --memory 0)",
            show_bytes(bytes)
        ));
    }
    None
}

/// Why a tmpfs size of `bytes` is out of bounds.
pub fn tmpfs_out_of_bounds(bytes: u64) -> Option<String> {
    if bytes < MIN_TMPFS_BYTES {
        return Some(format!(
            "is {}, below the {MIN_TMPFS_BYTES} bytes (one page) a tmpfs holds at least",
            show_bytes(bytes)
        ));
    }
    if bytes > MAX_TMPFS_BYTES {
        return Some(format!(
            "is {}, over the {} MiB (16 TiB) a tmpfs may be",
            show_bytes(bytes),
            MAX_TMPFS_BYTES >> 20
        ));
    }
    None
}

/// Why a cpu cap of `cores` is out of bounds.
pub fn cpus_out_of_bounds(cores: f64) -> Option<String> {
    if cores < MIN_CPUS {
        return Some(format!(
            "is {cores}, below the {MIN_CPUS} cores the kernel can cap to (1 ms of CPU per 100 ms)"
        ));
    }
    if cores > MAX_CPUS {
        return Some(format!(
            "is {cores}, over the {MAX_CPUS} cores Linux can schedule on; for no cap leave it \
             out"
        ));
    }
    None
}

/// Why a pids cap of `n` is out of bounds.
pub fn pids_out_of_bounds(n: u64) -> Option<String> {
    if n < MIN_PIDS {
        return Some(format!(
            "is {n}, below the {MIN_PIDS} tasks a box needs to start (its init, the workload and \
             the interpreter's threads)"
        ));
    }
    if n > MAX_PIDS {
        return Some(format!(
            "is {n}, over the {MAX_PIDS} tasks the kernel can cap to; turn the cap off instead \
             (pids: null; kern run --pids-limit 0)"
        ));
    }
    None
}

/// `bytes` for a message, in the largest unit that keeps it readable.
fn show_bytes(bytes: u64) -> String {
    let whole_or_tenths = |n: f64| {
        if n.fract() == 0.0 {
            format!("{n}")
        } else {
            format!("{n:.1}")
        }
    };
    if bytes >= MIB {
        format!("{} MiB", whole_or_tenths(bytes as f64 / MIB as f64))
    } else if bytes >= 1024 {
        format!("{} KiB", whole_or_tenths(bytes as f64 / 1024.0))
    } else {
        format!("{bytes} bytes")
    }
}

/// A positive number no larger than `max`; `what` says the unit for the message.
fn positive_at_most(key: &str, v: &Value, integer: bool, max: f64, what: &str) -> Result<f64> {
    let n = positive(key, v, integer)?;
    if n > max {
        return crate::invalid!("option `{key}` is {n}, over the {max} {what} it may be");
    }
    Ok(n)
}

const KNOWN: &[&str] = &[
    "image",
    "setup",
    "workspace",
    "workspaceMaxBytes",
    "name",
    "persist",
    "persistTtlS",
    "memoryMb",
    "cpus",
    "pids",
    "timeoutS",
    "network",
    "egressAllow",
    "mounts",
    "tmpfs",
    "profiles",
    "env",
    "maxOutputBytes",
    "enforceLimits",
    "requireLimits",
    "securityProfile",
    "apparmor",
    "capDrop",
    "user",
    "depsReadonly",
    "setupNetwork",
    "pycCache",
    "trackFiles",
    "onStdout",
    "onStderr",
    "prewarm",
];

/// Everything a session needs, validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the root comes from; resolved (pulled, imported) at open().
    pub image: Source,
    pub workspace: Option<PathBuf>,
    pub limits: Limits,
    pub timeout_ms: u64,
    pub max_output: usize,
    pub tmpfs: Vec<TmpfsSpec>,
    pub env: Vec<(String, String)>,
    pub track_files: bool,
    /// Prewarmed python boxes to keep (`prewarm`).
    pub prewarm: usize,
    /// Extra host binds, checked (`mounts`).
    pub mounts: Vec<super::mounts::Mount>,
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
    /// The AppArmor profile every box's workload enters (`apparmor`).
    pub apparmor: Option<String>,
    /// Capabilities boxes keep: all but those `capDrop` names (none by default).
    pub keep_caps: Vec<u32>,
    /// `user`: the account every box runs as, resolved in the image at open(); None: the
    /// image's USER.
    pub user: Option<String>,
    /// `securityProfile: "untrusted"`: the seccomp programs every box runs under.
    pub seccomp: Option<crate::engine::seccomp::Programs>,
    /// Host character devices every box gets (`vgpio:` profiles).
    pub devices: Vec<crate::engine::spec::DeviceSpec>,
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

/// How the session's boxes (not its `setup` box: see `SetupNetwork`) reach the network.
#[derive(Debug, Clone)]
pub enum Network {
    /// A namespace with only `lo` (the default).
    None,
    /// The host's network namespace (`network: true`).
    Host,
    /// The allowlist proxy, with the policy the `egressAllow` entries make.
    Egress(crate::engine::proxy::Policy),
}

fn type_err(key: &str, want: &str, v: &Value) -> Error {
    Error::Invalid(format!(
        "option `{key}` must be {want}, got {}",
        describe(v)
    ))
}

pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn positive(key: &str, v: &Value, integer: bool) -> Result<f64> {
    let want = if integer {
        "a positive integer"
    } else {
        "a positive number"
    };
    let n = v.as_f64().ok_or_else(|| type_err(key, want, v))?;
    if !n.is_finite() || n <= 0.0 || (integer && n.fract() != 0.0) {
        return Err(type_err(key, want, v));
    }
    Ok(n)
}

/// `"<user>[:<group>]"`, each part a name or a number; names are looked up at open().
fn check_account(account: &str) -> Result<&str> {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 32
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
            && !p.starts_with('-')
    };
    let mut parts = account.split(':');
    let ok = parts.next().is_some_and(part_ok)
        && parts.next().is_none_or(part_ok)
        && parts.next().is_none();
    if !ok {
        return crate::invalid!("option `user` {account:?} is not \"<user>[:<group>]\": give a name or a numeric id for each, such as \"node\", \"1000\" or \"1000:1000\"");
    }
    let range = crate::engine::idmap::RANGE;
    for part in account.split(':') {
        let numeric = part.bytes().all(|b| b.is_ascii_digit());
        if numeric && part.parse::<u32>().map_or(true, |id| id >= range) {
            return crate::invalid!("option `user` {account:?}: id {part} is outside the {range} ids a box has (0 to {}), root or not; give an id below {range}", range - 1);
        }
    }
    Ok(account)
}

fn boolean(key: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| type_err(key, "true or false", v))
}

fn strings(key: &str, v: &Value) -> Result<Vec<String>> {
    let arr = v
        .as_array()
        .ok_or_else(|| type_err(key, "an array of strings", v))?;
    arr.iter()
        .map(|s| {
            s.as_str()
                .map(str::to_string)
                .ok_or_else(|| type_err(key, "an array of strings", v))
        })
        .collect()
}

/// Closest known option name, for "did you mean".
fn suggest(key: &str) -> Option<&'static str> {
    fn dist(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) = (
            a.to_lowercase().chars().collect(),
            b.to_lowercase().chars().collect(),
        );
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let cost = usize::from(ca != cb);
                cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    KNOWN
        .iter()
        .map(|k| (dist(key, k), *k))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, k)| k)
}

/// Parses "64m", "1g", "512k", "1048576" (bytes) into bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let s = s
        .strip_suffix('b')
        .filter(|r| !r.is_empty() && r.ends_with(['k', 'm', 'g', 't']))
        .unwrap_or(&s);
    let (num, mult) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1u64 << 10),
        'm' => (&s[..s.len() - 1], 1 << 20),
        'g' => (&s[..s.len() - 1], 1 << 30),
        't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: f64 = num.parse().ok()?;
    (n.is_finite() && n > 0.0)
        .then_some((n * mult as f64) as u64)
        .filter(|b| *b > 0)
}

/// A mount target inside the box: absolute, normalised, and not one of the box's own.
pub fn check_target(key: &str, t: &str) -> Result<String> {
    let bad = |why: &str| {
        Err(Error::Invalid(format!(
            "option `{key}`: target {t:?} {why}"
        )))
    };
    if !t.starts_with('/') {
        return bad("is not an absolute path inside the box");
    }
    let norm = t.trim_end_matches('/');
    if norm.is_empty() {
        return bad("is the box's root, which is the image");
    }
    if norm
        .split('/')
        .skip(1)
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return bad("is not a normalised path (no '.', '..' or '//')");
    }
    for reserved in ["/proc", "/dev", "/sys", DEFAULT_WORKSPACE_TARGET] {
        if norm == reserved || norm.starts_with(&format!("{reserved}/")) {
            return bad(&format!(
                "is inside {reserved}, which the box mounts itself"
            ));
        }
    }
    Ok(norm.to_string())
}

fn parse_tmpfs(v: &Value) -> Result<Vec<TmpfsSpec>> {
    let key = "tmpfs";
    let default = DEFAULT_TMPFS_MB * MIB;
    let mut out: Vec<TmpfsSpec> = Vec::new();
    let mut push = |target: &str, size: u64| -> Result<()> {
        let target = check_target(key, target)?;
        if out.iter().any(|t| t.target == target) {
            return crate::invalid!("option `tmpfs` names {target:?} twice");
        }
        out.push(TmpfsSpec {
            target,
            size_bytes: size,
        });
        Ok(())
    };
    match v {
        Value::Array(items) => {
            for item in items {
                let t = item
                    .as_str()
                    .ok_or_else(|| type_err(key, "an array of absolute paths", item))?;
                push(t, default)?;
            }
        }
        Value::Object(map) => {
            for (target, size) in map {
                let bytes = match size {
                    Value::Null => default,
                    Value::String(s) => {
                        let bytes = parse_size(s).ok_or_else(|| {
                            Error::Invalid(format!("option `tmpfs`: size {s:?} for {target:?} is not a size like \"64m\", \"1g\" or \"512k\""))
                        })?;
                        if let Some(why) = tmpfs_out_of_bounds(bytes) {
                            return crate::invalid!(
                                "option `tmpfs`: size {s:?} for {target:?} {why}"
                            );
                        }
                        bytes
                    }
                    other => {
                        return Err(type_err(
                            key,
                            "a map of path -> size string (\"64m\") or null",
                            other,
                        ))
                    }
                };
                push(target, bytes)?;
            }
        }
        other => {
            return Err(type_err(
                key,
                "a map { \"/path\": \"64m\" } or an array [\"/path\"]",
                other,
            ))
        }
    }
    Ok(out)
}

/// The kernel's cap on one argv or environment string, its NUL included (MAX_ARG_STRLEN: 32
/// pages of 4 KiB).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;
/// What a box's exec budget keeps free of the caller's `env` for what kern adds to it: the
/// image's ENV, kern's own variables, and the call's argv (runCode's code, up to 128 KiB, and
/// python's driver).
pub const EXEC_RESERVE: usize = 256 << 10;

/// What argv and environment may take together at exec: a quarter of the stack rlimit, at most
/// 6 MiB (3/4 of the kernel's _STK_LIM) and at least 128 KiB (fs/exec.c). A box's workload
/// inherits this process's stack rlimit.
pub fn exec_budget() -> usize {
    use nix::sys::resource::{getrlimit, Resource};
    let stack = getrlimit(Resource::RLIMIT_STACK).map_or(8 << 20, |(soft, _)| soft);
    usize::try_from((stack / 4).clamp(128 << 10, 6 << 20)).unwrap_or(6 << 20)
}

/// Bytes an exec's string of `len` takes on the new stack: with its NUL, plus its pointer.
fn exec_cost(len: usize) -> usize {
    len + 1 + std::mem::size_of::<usize>()
}

/// The first environment string over MAX_ARG_STRLEN, as (name, length of `NAME=value`), and
/// what all of them take at exec.
fn env_exec_size(env: &[(String, String)]) -> (Option<(&str, usize)>, usize) {
    let len = |(k, v): &(String, String)| k.len() + 1 + v.len();
    let over = env
        .iter()
        .find(|kv| len(kv) + 1 > MAX_ARG_STRLEN)
        .map(|kv| (kv.0.as_str(), len(kv)));
    (over, env.iter().map(|kv| exec_cost(len(kv))).sum())
}

/// The caller's `env` against the exec limits, before any box: each `NAME=value` within
/// MAX_ARG_STRLEN, and the whole within the budget less what kern adds.
fn check_env_size(env: &[(String, String)]) -> Result<()> {
    let (over, total) = env_exec_size(env);
    if let Some((k, len)) = over {
        return crate::invalid!("option `env`: {k:?} is {} as NAME=value; Linux caps each environment string at {} KiB (MAX_ARG_STRLEN) and would refuse to start the box. Pass large data as a workspace file (writeFile) instead", show_bytes(len as u64), MAX_ARG_STRLEN >> 10);
    }
    let budget = exec_budget();
    let room = budget.saturating_sub(EXEC_RESERVE);
    if total > room {
        return crate::invalid!("option `env` takes {} at exec; a box's arguments and environment together may take {} here (a quarter of the stack rlimit, as Linux allows), of which {} KiB are kept for the image's environment, kern's own and the call's arguments, so `env` may take {}. Pass large data as a workspace file (writeFile) instead", show_bytes(total as u64), show_bytes(budget as u64), EXEC_RESERVE >> 10, show_bytes(room as u64));
    }
    Ok(())
}

/// A box's whole argv and environment (what kern adds included) against the exec limits: a
/// SandboxError before the box starts, where the kernel's E2BIG would fail it.
pub fn check_exec_size(argv: &[String], env: &[(String, String)]) -> Result<()> {
    if let Some((i, a)) = argv
        .iter()
        .enumerate()
        .find(|(_, a)| a.len() + 1 > MAX_ARG_STRLEN)
    {
        return crate::invalid!("argument {i} of the call is {}; Linux caps each argument at {} KiB (MAX_ARG_STRLEN) and would refuse to start it. Pass large data as a workspace file (writeFile) instead", show_bytes(a.len() as u64), MAX_ARG_STRLEN >> 10);
    }
    let (over, env_total) = env_exec_size(env);
    if let Some((k, len)) = over {
        return crate::invalid!("the box's environment variable {k:?} is {}; Linux caps each at {} KiB (MAX_ARG_STRLEN)", show_bytes(len as u64), MAX_ARG_STRLEN >> 10);
    }
    // The program's path is copied too: at most PATH_MAX.
    let total = argv.iter().map(|a| exec_cost(a.len())).sum::<usize>() + env_total + 4096;
    let budget = exec_budget();
    if total > budget {
        return crate::invalid!("the call's arguments and environment take {} at exec, over the {} Linux allows here (a quarter of the stack rlimit); pass large data as a workspace file (writeFile) instead", show_bytes(total as u64), show_bytes(budget as u64));
    }
    Ok(())
}

fn parse_env(v: &Value) -> Result<Vec<(String, String)>> {
    let map = v
        .as_object()
        .ok_or_else(|| type_err("env", "an object of string values", v))?;
    map.iter()
        .map(|(k, val)| {
            let s = val
                .as_str()
                .ok_or_else(|| Error::Invalid(format!("option `env`: the value of {k:?} must be a string, got {}", describe(val))))?;
            if k.is_empty() || k.contains('=') || k.contains('\0') || s.contains('\0') {
                return crate::invalid!("option `env`: {k:?} is not a valid variable (no empty name, '=' in the name, or NUL bytes)");
            }
            Ok((k.clone(), s.to_string()))
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|env| check_env_size(&env).map(|()| env))
}

/// Validates the options object (`null` = defaults).
pub fn parse(v: &Value) -> Result<Config> {
    let empty = Map::new();
    let map = match v {
        Value::Null => &empty,
        Value::Object(m) => m,
        other => return Err(type_err("options", "an object", other)),
    };
    for key in map.keys() {
        if !KNOWN.contains(&key.as_str()) {
            let hint = suggest(key)
                .map(|s| format!(" Did you mean `{s}`?"))
                .unwrap_or_default();
            return crate::invalid!(
                "unknown option `{key}`.{hint} See index.d.ts for the options a Sandbox takes."
            );
        }
    }
    let get = |k: &str| map.get(k);
    let mut cfg = Config {
        image: Source::Host,
        workspace: None,
        limits: Limits {
            memory_bytes: Some(DEFAULT_MEMORY_MB * MIB),
            pids: Some(DEFAULT_PIDS),
            cpus: None,
            enforce: true,
            require: false,
        },
        timeout_ms: DEFAULT_TIMEOUT_MS,
        max_output: DEFAULT_MAX_OUTPUT,
        tmpfs: vec![TmpfsSpec {
            target: "/tmp".into(),
            size_bytes: DEFAULT_TMPFS_MB * MIB,
        }],
        env: Vec::new(),
        track_files: true,
        prewarm: 0,
        mounts: Vec::new(),
        setup: None,
        workspace_max_bytes: None,
        deps_readonly: true,
        setup_network: SetupNetwork::Public,
        pyc_cache: true,
        network: Network::None,
        apparmor: None,
        keep_caps: Vec::new(),
        seccomp: None,
        resident: None,
        user: None,
        devices: Vec::new(),
        notes: Vec::new(),
    };

    // Mutually exclusive first: the mistake is the combination.
    let network = match get("network") {
        None => false,
        Some(v) => boolean("network", v)?,
    };
    let egress = match get("egressAllow") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => strings("egressAllow", v)?,
    };
    if network && get("egressAllow").is_some_and(|v| !v.is_null()) {
        return crate::invalid!("`network: true` and `egressAllow` are mutually exclusive: network shares the host's network, egressAllow restricts it. Pick one.");
    }
    if network {
        cfg.network = Network::Host;
    } else if !egress.is_empty() {
        // An empty list allows nothing: the default, a box with no network at all.
        cfg.network = Network::Egress(egress_policy(&egress)?);
    }

    match get("image") {
        None | Some(Value::Null) => cfg.image = Source::parse(DEFAULT_IMAGE)?,
        Some(Value::String(s)) => cfg.image = Source::parse(s)?,
        Some(v) => {
            return Err(type_err(
                "image",
                "a string (a reference like \"python:3.12-slim\", an absolute path, or \"host\")",
                v,
            ))
        }
    }
    if let Some(v) = get("setup") {
        match v {
            Value::Null => {}
            Value::String(s) if s.trim().is_empty() => {
                return crate::invalid!("option `setup` is an empty command; leave it out or pass a shell command such as \"pip install pandas\"")
            }
            Value::String(s) if s.contains('\0') => {
                return crate::invalid!("option `setup` contains a NUL byte")
            }
            Value::String(s) => cfg.setup = Some(s.clone()),
            other => return Err(type_err("setup", "a shell command string", other)),
        }
    }
    if let Some(v) = get("workspace") {
        match v {
            Value::Null => {}
            Value::String(s) if s.is_empty() => return crate::invalid!("option `workspace` is empty; pass an absolute directory path or leave it out"),
            Value::String(s) if !s.starts_with('/') => {
                return crate::invalid!("option `workspace` {s:?} is relative; pass an absolute path (e.g. path.resolve({s:?}))")
            }
            Value::String(s) => cfg.workspace = Some(PathBuf::from(s)),
            other => return Err(type_err("workspace", "an absolute directory path", other)),
        }
    }
    if let Some(v) = get("workspaceMaxBytes").filter(|v| !v.is_null()) {
        cfg.workspace_max_bytes = Some(positive_at_most(
            "workspaceMaxBytes",
            v,
            true,
            MAX_SAFE_BYTES as f64,
            "bytes (2^53 - 1, the largest integer JavaScript holds exactly)",
        )? as u64);
    }
    let name = match get("name").filter(|v| !v.is_null()) {
        Some(v) => {
            let n = v
                .as_str()
                .ok_or_else(|| type_err("name", "a string or null", v))?;
            crate::engine::resident::check_name(n)
                .map_err(|e| Error::Invalid(format!("option `name`: {e}")))?;
            Some(n.to_string())
        }
        None => None,
    };
    let persist = match get("persist") {
        Some(v) => boolean("persist", v)?,
        None => false,
    };
    let ttl_s = match get("persistTtlS").filter(|v| !v.is_null()) {
        Some(v) => Some(positive_at_most(
            "persistTtlS",
            v,
            false,
            MAX_PERSIST_TTL_S,
            "seconds (a year)",
        )?),
        None => None,
    };
    if persist {
        let Some(name) = name else {
            return crate::invalid!("option `persist: true` needs a `name`: processes that name the same sandbox meet the same resident box");
        };
        if cfg.workspace.is_none() {
            return crate::invalid!("option `persist: true` needs a `workspace` (an absolute directory path): the resident box outlives this Sandbox, and a temporary workspace would be deleted at close()");
        }
        let ttl_s = ttl_s.unwrap_or(DEFAULT_PERSIST_TTL_S as f64);
        cfg.resident = Some(ResidentOpts {
            name,
            ttl_ms: (ttl_s * 1000.0).ceil() as u64,
        });
    } else if name.is_some() {
        return crate::invalid!("option `name` is only used with `persist: true` (it names the resident box); add `persist: true`, or leave `name` out");
    } else if ttl_s.is_some() {
        return crate::invalid!("option `persistTtlS` is only used with `persist: true`; add `persist: true`, or leave `persistTtlS` out");
    }
    match get("memoryMb") {
        None => {}
        Some(Value::Null) => cfg.limits.memory_bytes = None,
        Some(v) => {
            // Saturating: a value past u64 is reported as over the bound, not wrapped.
            let bytes = (positive("memoryMb", v, false)? * MIB as f64) as u64;
            if let Some(why) = memory_out_of_bounds(bytes) {
                return crate::invalid!("option `memoryMb` {why}");
            }
            cfg.limits.memory_bytes = Some(bytes)
        }
    }
    match get("cpus") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let cores = positive("cpus", v, false)?;
            if let Some(why) = cpus_out_of_bounds(cores) {
                return crate::invalid!("option `cpus` {why}");
            }
            cfg.limits.cpus = Some(cores)
        }
    }
    match get("pids") {
        None => {}
        Some(Value::Null) => cfg.limits.pids = None,
        Some(v) => {
            let n = positive("pids", v, true)? as u64;
            if let Some(why) = pids_out_of_bounds(n) {
                return crate::invalid!("option `pids` {why}");
            }
            cfg.limits.pids = Some(n)
        }
    }
    if let Some(v) = get("timeoutS") {
        cfg.timeout_ms = timeout_ms("timeoutS", v)?;
    }
    if let Some(v) = get("mounts").filter(|v| !v.is_null()) {
        if !v.is_object() {
            return Err(type_err("mounts", "an object { hostSrc: boxTarget }", v));
        }
        let ctx = super::mounts::Context::from_host(DEFAULT_WORKSPACE_TARGET);
        cfg.mounts = super::mounts::parse(v, &ctx)?;
        // Parents before children, so a nested target is mounted on top of its parent's.
        cfg.mounts.sort_by_key(|m| m.target.matches('/').count());
        if cfg.mounts.len() > MAX_MOUNTS {
            return crate::invalid!(
                "option `mounts` has {} entries; at most {MAX_MOUNTS} are allowed",
                cfg.mounts.len()
            );
        }
    }
    let explicit_tmpfs = get("tmpfs").is_some_and(|v| !v.is_null());
    if explicit_tmpfs {
        cfg.tmpfs = parse_tmpfs(get("tmpfs").unwrap_or(&Value::Null))?;
    }
    // A mount at /tmp replaces the default scratch; one the caller also asked for is a conflict.
    // Mounts and scratch never nest: one would hide the other.
    for m in &cfg.mounts {
        if !explicit_tmpfs && m.target == "/tmp" {
            cfg.tmpfs.retain(|t| t.target != "/tmp");
        }
        for t in &cfg.tmpfs {
            let nested = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
            if nested(&m.target, &t.target) || nested(&t.target, &m.target) {
                return crate::invalid!("the mount at {} and the tmpfs at {} overlap; drop one of them (a mount at /tmp replaces the default /tmp scratch by itself)", m.target, t.target);
            }
        }
    }
    if let Some(v) = get("profiles").filter(|v| !v.is_null()) {
        // After memoryMb, cpus, mounts and tmpfs: a profile yields to those options and must
        // not land on their paths.
        super::profiles::apply(
            &mut cfg,
            &strings("profiles", v)?,
            get("memoryMb"),
            get("cpus"),
        )?;
    }
    if let Some(v) = get("env").filter(|v| !v.is_null()) {
        cfg.env = parse_env(v)?;
    }
    if let Some(v) = get("maxOutputBytes") {
        cfg.max_output = positive_at_most(
            "maxOutputBytes",
            v,
            true,
            MAX_OUTPUT_BYTES as f64,
            "bytes (256 MiB per stream: what a JavaScript string of the output can hold)",
        )? as usize;
    }
    if let Some(v) = get("enforceLimits") {
        cfg.limits.enforce = boolean("enforceLimits", v)?;
    }
    if let Some(v) = get("requireLimits") {
        cfg.limits.require = boolean("requireLimits", v)?;
        if cfg.limits.require && !cfg.limits.enforce {
            return crate::invalid!("`requireLimits: true` and `enforceLimits: false` contradict each other: requireLimits insists on the cgroup caps that enforceLimits: false turns off. Drop one.");
        }
    }
    if let Some(v) = get("securityProfile").filter(|v| !v.is_null()) {
        let name = v
            .as_str()
            .ok_or_else(|| type_err("securityProfile", "\"untrusted\" or null", v))?;
        if name != "untrusted" {
            return crate::invalid!("option `securityProfile` {name:?} is not a profile: the one profile is \"untrusted\" (null keeps kern's standard posture)");
        }
        let programs = crate::engine::seccomp::untrusted()
            .map_err(|e| Error::Invalid(format!("option `securityProfile`: {e}")))?;
        cfg.seccomp = Some(programs.clone());
    }
    if let Some(v) = get("user").filter(|v| !v.is_null()) {
        let account = v
            .as_str()
            .ok_or_else(|| type_err("user", "\"<user>[:<group>]\" or null", v))?;
        cfg.user = Some(check_account(account)?.to_string());
    }
    if let Some(v) = get("apparmor").filter(|v| !v.is_null()) {
        let name = v
            .as_str()
            .ok_or_else(|| type_err("apparmor", "a profile name or null", v))?;
        if name.is_empty()
            || name.len() > 255
            || name.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return crate::invalid!("option `apparmor` {name:?} is not an AppArmor profile name: give the name of a profile loaded on the host (no spaces or control characters, at most 255 bytes)");
        }
        cfg.apparmor = Some(name.to_string());
    }
    if let Some(v) = get("capDrop").filter(|v| !v.is_null()) {
        let drop = strings("capDrop", v)?;
        cfg.keep_caps = crate::engine::caps::kept_after_dropping(&drop)
            .map_err(|e| Error::Invalid(format!("option `capDrop`: {e}")))?;
        if cfg.seccomp.is_some() && !cfg.keep_caps.is_empty() {
            return crate::invalid!("`securityProfile: \"untrusted\"` drops every capability, and `capDrop` keeps some: use capDrop [\"ALL\"] (or leave it out) with the untrusted profile, or drop the profile");
        }
        // Run as root, box root writes through the idmapped workspace as the workspace's owner:
        // a file capability it set (`setcap cap_setuid+ep`) would be one the host honours.
        if nix::unistd::geteuid().is_root() && cfg.keep_caps.contains(&crate::engine::caps::SETFCAP)
        {
            return crate::invalid!("option `capDrop` keeps SETFCAP, and kern-sandbox runs as root: box root could then give a workspace file capabilities (`setcap cap_setuid+ep`) that the host honours; add \"SETFCAP\" to capDrop (e.g. capDrop: [\"SETFCAP\"] to keep every other capability)");
        }
    }
    if let Some(v) = get("depsReadonly") {
        cfg.deps_readonly = boolean("depsReadonly", v)?;
    }
    if let Some(v) = get("setupNetwork").filter(|v| !v.is_null()) {
        cfg.setup_network = match v.as_str() {
            Some("public") => SetupNetwork::Public,
            Some("host") => SetupNetwork::Host,
            _ => {
                return Err(type_err(
                    "setupNetwork",
                    "\"public\" (the default) or \"host\"",
                    v,
                ))
            }
        };
    }
    if let Some(v) = get("pycCache") {
        cfg.pyc_cache = boolean("pycCache", v)?;
    }
    if let Some(v) = get("trackFiles") {
        cfg.track_files = boolean("trackFiles", v)?;
    }
    if let Some(v) = get("prewarm") {
        let n = v
            .as_f64()
            .ok_or_else(|| type_err("prewarm", "a non-negative integer", v))?;
        if !n.is_finite() || n < 0.0 || n.fract() != 0.0 {
            return Err(type_err("prewarm", "a non-negative integer", v));
        }
        if n > MAX_PREWARM as f64 {
            return crate::invalid!("option `prewarm` is {n}; at most {MAX_PREWARM} boxes are kept warm (each holds a booted interpreter for the whole session)");
        }
        cfg.prewarm = n as usize;
    }
    if cfg.resident.is_some() {
        // Refused, never accepted and ignored: each needs something the resident box can't give.
        if matches!(cfg.network, Network::Egress(_)) {
            return crate::invalid!("options `persist` and `egressAllow` can't be combined yet: the allowlist proxy lives in the process that opened the Sandbox, and a resident box outlives it; use network: false or true");
        }
        if cfg.prewarm > 0 {
            return crate::invalid!("options `persist` and `prewarm` can't be combined: a resident box runs every call itself (each call still starts a fresh interpreter); leave `prewarm` out");
        }
        if cfg.keep_caps.contains(&crate::engine::caps::SYS_ADMIN) {
            return crate::invalid!("options `persist` and a `capDrop` that keeps SYS_ADMIN can't be combined yet: such a box's mounts are locked in a nested namespace that resident calls do not join; drop SYS_ADMIN (the default capDrop [\"ALL\"] does)");
        }
        // The compiled stdlib is bound into a box when it starts; a resident box would miss a
        // cache built later, so its calls compile as they import.
        if get("pycCache").and_then(Value::as_bool) == Some(true) {
            return crate::invalid!("options `persist` and `pycCache: true` can't be combined yet: the cache is bound into a box when it starts, and a resident box starts before it is built; leave pycCache out (it is off for resident boxes)");
        }
        cfg.pyc_cache = false;
    }
    Ok(cfg)
}

/// The proxy's policy from `egressAllow` entries; a bad entry is the option's error.
pub fn egress_policy(entries: &[String]) -> Result<crate::engine::proxy::Policy> {
    crate::engine::proxy::Policy::parse(entries)
        .map_err(|e| Error::Invalid(format!("option `egressAllow`: {e}")))
}

/// The checks that need nothing but the options themselves, made when a Sandbox is
/// constructed (the rest waits for open(), which may touch the filesystem and the network).
pub fn check_early(options: &Value) -> Result<()> {
    let Some(map) = options.as_object() else {
        return Ok(());
    };
    if let Some(v) = map.get("egressAllow").filter(|v| !v.is_null()) {
        let entries = strings("egressAllow", v)?;
        if map.get("network").and_then(Value::as_bool) == Some(true) {
            return crate::invalid!("`network: true` and `egressAllow` are mutually exclusive: network shares the host's network, egressAllow restricts it. Pick one.");
        }
        egress_policy(&entries)?;
    }
    if let Some(v) = map.get("profiles").filter(|v| !v.is_null()) {
        super::profiles::check_tokens(&strings("profiles", v)?)?;
    }
    // An env the kernel can't exec is refused here, not by every box that tries.
    if let Some(v) = map.get("env").filter(|v| !v.is_null()) {
        parse_env(v)?;
    }
    Ok(())
}

/// A timeout in seconds as milliseconds, checked.
pub fn timeout_ms(key: &str, v: &Value) -> Result<u64> {
    let s = positive(key, v, false)?;
    if s < MIN_TIMEOUT_S {
        return crate::invalid!("option `{key}` is {s} s; the shortest timeout is {MIN_TIMEOUT_S} s (10 ms: no box starts sooner)");
    }
    if s > MAX_TIMEOUT_S {
        return crate::invalid!(
            "option `{key}` is {s} s; the longest supported timeout is 7 days ({MAX_TIMEOUT_S} s)"
        );
    }
    Ok((s * 1000.0).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        parse(&v).unwrap_err().to_string()
    }

    #[test]
    fn defaults_follow_the_spec() {
        let c = parse(&json!({"image": "host"})).unwrap();
        assert_eq!(c.limits.memory_bytes, Some(512 * MIB));
        assert_eq!(c.limits.pids, Some(256));
        assert_eq!(c.limits.cpus, None);
        assert_eq!(c.timeout_ms, 30_000);
        assert_eq!(c.max_output, 64 << 20);
        assert_eq!(
            c.tmpfs,
            vec![TmpfsSpec {
                target: "/tmp".into(),
                size_bytes: 64 * MIB
            }]
        );
        assert!(c.track_files && c.limits.enforce);
    }

    #[test]
    fn null_uncaps_and_absent_keeps_the_default() {
        let c = parse(&json!({"image": "host", "memoryMb": null, "pids": null})).unwrap();
        assert_eq!((c.limits.memory_bytes, c.limits.pids), (None, None));
    }

    #[test]
    fn mistakes_name_the_option() {
        assert!(err(json!({"image": "host", "memoryMB": 1})).contains("Did you mean `memoryMb`"));
        assert!(err(json!({"image": "host", "memoryMb": -1})).contains("memoryMb"));
        assert!(err(json!({"image": "host", "pids": 1.5})).contains("pids"));
        assert!(err(json!({"image": "host", "workspace": "rel/dir"})).contains("relative"));
        assert!(
            err(json!({"image": "host", "network": true, "egressAllow": ["a.com"]}))
                .contains("mutually exclusive")
        );
        assert!(err(json!({"image": "/nonexistent-rootfs"})).contains("No such file"));
        assert!(err(json!({"image": "host", "tmpfs": {"/proc/x": "1m"}})).contains("/proc"));
        assert!(err(json!({"image": "host", "tmpfs": {"/a/../b": "1m"}})).contains("normalised"));
        assert!(err(json!({"image": "host", "tmpfs": {"/x": "lots"}})).contains("size"));
        assert!(err(json!({"image": "host", "securityProfile": "strict"})).contains("untrusted"));
        for bad in ["", "a:b:c", ":0", "0:", "-x", "a b", "root\n"] {
            assert!(
                err(json!({"image": "host", "user": bad})).contains("<user>[:<group>]"),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse(&json!({"image": "host", "user": "node:1000"}))
                .unwrap()
                .user
                .as_deref(),
            Some("node:1000")
        );
        assert!(
            err(json!({"image": "host", "securityProfile": "untrusted", "capDrop": []}))
                .contains("capDrop")
        );
        assert!(
            parse(&json!({"image": "host", "securityProfile": "untrusted"}))
                .unwrap()
                .seccomp
                .is_some()
        );
    }

    #[test]
    fn numbers_are_bounded() {
        let host = |k: &str, v: Value| {
            let mut o = json!({"image": "host"});
            o[k] = v;
            o
        };
        for (k, v, want) in [
            ("memoryMb", json!(1), "below the 32 MiB"),
            ("memoryMb", json!(0.5), "is 512 KiB, below"),
            ("memoryMb", json!(31.9), "below the 32 MiB"),
            ("memoryMb", json!(1e12), "over the 16777216 MiB"),
            ("memoryMb", json!(1e300), "over the 16777216 MiB"),
            ("cpus", json!(1e9), "over the 8192 cores"),
            ("cpus", json!(0.001), "below the 0.01 cores"),
            ("pids", json!(1), "below the 8 tasks"),
            ("pids", json!(1e9), "over the 4194304 tasks"),
            (
                "maxOutputBytes",
                json!(1u64 << 60),
                "over the 268435456 bytes",
            ),
            ("maxOutputBytes", json!(1.5), "positive integer"),
            ("timeoutS", json!(1e-9), "shortest timeout"),
            ("timeoutS", json!(1e9), "longest supported timeout"),
            (
                "workspaceMaxBytes",
                json!(1e300),
                "over the 9007199254740991 bytes",
            ),
            ("tmpfs", json!({"/x": "1e30g"}), "over the 16777216 MiB"),
            ("tmpfs", json!({"/x": "1"}), "below the 4096 bytes"),
            ("user", json!("70000"), "outside the 65536 ids"),
            ("user", json!("0:65536"), "outside the 65536 ids"),
            (
                "user",
                json!("99999999999999999999"),
                "outside the 65536 ids",
            ),
            ("prewarm", json!(65), "at most 64"),
            ("prewarm", json!(0.5), "non-negative integer"),
        ] {
            let e = err(host(k, v.clone()));
            assert!(e.contains(k) && e.contains(want), "{k}={v}: {e}");
        }
        let ttl = err(
            json!({"image": "host", "persist": true, "name": "a", "workspace": "/tmp", "persistTtlS": 1e12}),
        );
        assert!(
            ttl.contains("persistTtlS") && ttl.contains("a year"),
            "{ttl}"
        );
        for (k, v) in [
            ("memoryMb", json!(32)),
            ("memoryMb", json!(16u64 << 20)),
            ("cpus", json!(0.01)),
            ("cpus", json!(8192)),
            ("pids", json!(8)),
            ("timeoutS", json!(0.01)),
            ("maxOutputBytes", json!(256u64 << 20)),
            ("user", json!("65535:65535")),
        ] {
            assert!(parse(&host(k, v.clone())).is_ok(), "{k}={v}");
        }
    }

    #[test]
    fn an_env_the_kernel_cannot_exec_is_refused_early() {
        let big = "x".repeat(MAX_ARG_STRLEN);
        let e = check_early(&json!({"env": {"A": big}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("option `env`") && e.contains("128 KiB"), "{e}");
        // Many variables each within the string cap, together over the budget.
        let v = "x".repeat(100 << 10);
        let many: Map<String, Value> = (0..70).map(|i| (format!("V{i}"), json!(v))).collect();
        let e = check_early(&json!({ "env": many }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("option `env`") && e.contains("may take"), "{e}");
        assert!(check_early(&json!({"env": {"A": "x".repeat(MAX_ARG_STRLEN - 3)}})).is_ok());
        // The whole exec: argv and env together.
        let arg = "y".repeat(MAX_ARG_STRLEN);
        assert!(check_exec_size(&[arg], &[])
            .unwrap_err()
            .to_string()
            .contains("argument 0"));
        let args: Vec<String> = (0..100).map(|_| "y".repeat(100 << 10)).collect();
        assert!(check_exec_size(&args, &[])
            .unwrap_err()
            .to_string()
            .contains("stack rlimit"));
        assert!(check_exec_size(&["true".into()], &[("A".into(), "b".into())]).is_ok());
    }

    #[test]
    fn resident_options_are_checked() {
        let ws = json!("/tmp");
        assert!(err(json!({"image": "host", "persist": true})).contains("`name`"));
        assert!(err(json!({"image": "host", "persist": true, "name": "a"})).contains("`workspace`"));
        assert!(
            err(json!({"image": "host", "name": "a"})).contains("only used with `persist: true`")
        );
        assert!(err(json!({"image": "host", "persistTtlS": 5}))
            .contains("only used with `persist: true`"));
        assert!(
            err(json!({"image": "host", "persist": true, "name": "../x", "workspace": ws}))
                .contains("not a valid sandbox name")
        );
        assert!(err(json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "persistTtlS": 0})).contains("persistTtlS"));
        assert!(err(
            json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "prewarm": 1})
        )
        .contains("prewarm"));
        assert!(err(json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "egressAllow": ["a.com"]})).contains("egressAllow"));
        let c = parse(&json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "persistTtlS": 2.5})).unwrap();
        let r = c.resident.unwrap();
        assert_eq!((r.name.as_str(), r.ttl_ms), ("a", 2500));
        let c = parse(&json!({"image": "host", "persist": true, "name": "a", "workspace": ws}))
            .unwrap();
        assert_eq!(c.resident.unwrap().ttl_ms, DEFAULT_PERSIST_TTL_S * 1000);
        // The default image is the spec's, as a registry reference (pulled at open()).
        let d = parse(&json!({})).unwrap();
        assert!(
            matches!(&d.image, Source::Registry(r) if r.to_string() == "docker.io/library/python:3.12-slim")
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64m"), Some(64 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("512kb"), Some(512 << 10));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("-1m"), None);
        assert_eq!(parse_size("m"), None);
    }
}
