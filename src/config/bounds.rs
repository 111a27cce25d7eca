//! The bounds of the numeric options, the shared readers of sizes and box paths, and values in
//! words for messages (`show_bytes`, `describe`). A value outside a bound is a SandboxError
//! naming the option and the bound, before any box starts (never a box that dies, or a cap the
//! kernel ignores).

use crate::error::{Error, Result};
use serde_json::Value;

pub(crate) const MIB: u64 = 1 << 20;

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

/// `bytes` for a message or a listing, in the largest binary unit it reaches, whole or to a
/// tenth: `512 bytes`, `1.5 KiB`, `64 MiB`, `2 GiB`. The crate's one byte formatter.
pub fn show_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    let n = format!("{v:.1}");
    format!("{} {}", n.strip_suffix(".0").unwrap_or(&n), UNITS[u])
}

/// A JSON value in words, for the message of an option that got it.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
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

pub use crate::engine::shared::spec::at_or_under;

/// A mount target inside the box: absolute, normalised, and not one of the box's own: not at
/// or under `/proc`, `/dev`, `/sys` or the workspace mount `workspace`, nor over the latter.
pub fn check_target(key: &str, t: &str, workspace: &str) -> Result<String> {
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
    for reserved in ["/proc", "/dev", "/sys", workspace] {
        if at_or_under(norm, reserved) {
            return bad(&format!(
                "is inside {reserved}, which the box mounts itself"
            ));
        }
    }
    if at_or_under(workspace, norm) {
        return bad(&format!(
            "would hide the workspace, mounted at {workspace} (`workspaceMount`); pick another path"
        ));
    }
    Ok(norm.to_string())
}

/// The longest `workspaceMount`, in bytes: room for the paths under it within PATH_MAX.
pub const MAX_WORKSPACE_MOUNT_BYTES: usize = 256;

/// Where a workspace mount may not be, at or under: the box mounts `/proc`, `/sys` and `/dev`
/// itself; under the others a box could plant what the next box's programs load at their start
/// (`/etc/ld.so.preload`, a `sitecustomize.py`), where today only the workspace's own paths are
/// writable.
const WORKSPACE_MOUNT_RESERVED: &[&str] = &[
    "/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// `workspaceMount` (`kern run --workspace-mount`): where the boxes see the workspace. An
/// absolute, normalised box path, not the root, not at or under what `WORKSPACE_MOUNT_RESERVED`
/// lists or kern's own `/.kern-*`. Scratch and `mounts` are checked against it where they are
/// known.
pub fn check_workspace_mount(key: &str, t: &str) -> Result<String> {
    let bad = |why: String| {
        let shown: String = t.chars().take(100).collect();
        Err(Error::Invalid(format!("option `{key}` {shown:?} {why}")))
    };
    let try_ = "; pass an absolute, normalised box path such as \"/home/user\" (the default is \"/workspace\")";
    if t.len() > MAX_WORKSPACE_MOUNT_BYTES {
        return bad(format!(
            "is longer than {MAX_WORKSPACE_MOUNT_BYTES} bytes{try_}"
        ));
    }
    if t.contains('\0') {
        return bad(format!("contains a NUL byte{try_}"));
    }
    if !t.starts_with('/') {
        return bad(format!("is not an absolute path{try_}"));
    }
    if t == "/" {
        return bad(format!("is the box's root, which is the image{try_}"));
    }
    if t[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return bad(format!(
            "is not normalised (no '.', '..', '//' or trailing '/'){try_}"
        ));
    }
    if t[1..].starts_with(".kern") {
        return bad(format!("is under a path kern keeps for itself{try_}"));
    }
    for r in WORKSPACE_MOUNT_RESERVED {
        if at_or_under(t, r) {
            let why = if matches!(*r, "/proc" | "/sys" | "/dev") {
                "which the box mounts itself"
            } else {
                "the image's system files, which no box may write"
            };
            return bad(format!("is at or under {r}, {why}{try_}"));
        }
    }
    Ok(t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn bytes_shown() {
        assert_eq!(show_bytes(0), "0 bytes");
        assert_eq!(show_bytes(1023), "1023 bytes");
        assert_eq!(show_bytes(1536), "1.5 KiB");
        assert_eq!(show_bytes(64 << 20), "64 MiB");
        assert_eq!(show_bytes((1 << 30) + (1 << 29)), "1.5 GiB");
        assert_eq!(show_bytes(20 << 40), "20 TiB");
        assert_eq!(show_bytes(MAX_SAFE_BYTES), "8192 TiB");
    }
}
