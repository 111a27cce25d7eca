//! `profiles`: named resource profiles from the user's own `kern.toml`. A Sandbox names them
//! (`["vcpu:heavy", "vgpio:leds", "vdisk:scratch"]`); the file says what each one is. The file
//! is `$KERN_CONFIG` when set (an absolute path), else `~/.config/kern/kern.toml`, and it is read
//! only when `profiles` is non-empty, at `open()`.
//!
//! ```toml
//! [[vcpu]]               # a CPU and memory slice; at most one per Sandbox
//! name = "heavy"         # 1-64 ASCII letters or digits, unique within its kind
//! cpus = 1.5             # optional: cores, > 0
//! memory = "2G"          # optional: "512M", "2G", "1.5g", or an integer number of bytes
//!
//! [[vgpio]]              # host devices (the only way to grant a box hardware)
//! name = "leds"
//! devices = ["/dev/gpiochip0", "/dev/i2c-1"]   # character devices only
//!
//! [[vdisk]]              # a size-capped scratch area, fresh per box
//! name = "scratch"
//! size = "256M"          # same forms as `memory`
//! path = "/scratch"      # optional: absolute box path, default /scratch
//! ```
//!
//! Memory has one spelling, `memory`; `memory_mb` is refused by name. Unknown keys and sections are
//! refused. Every mistake in the file is `Error::Invalid` with `<file>:<line>:` in front, from the
//! `toml` parser's spans.
//!
//! Precedence: an explicit option wins over a `vcpu` profile. `memoryMb` defaults to 512, and
//! that default counts as explicit: only `memoryMb: null` lets the profile's `memory` apply
//! (uncapped when it has none). `cpus` defaults to null, so the profile's `cpus` apply unless
//! the option is a number.
//!
//! Devices: the path as written is resolved on the host (udev's symlinks such as
//! `/dev/serial/by-id/...` included) to the real node, which must be a character device; its
//! device, inode and device number are recorded, and `kern` opens the resolved path again with
//! no symlinks allowed and binds it only if it is still that node. In the box the node appears
//! at the path as written when that is under `/dev`, else at `/dev/<file name>`, never over one
//! of the box's own `/dev` entries. Physical memory and I/O port nodes are refused outright.
//!
//! A `vdisk` is a tmpfs with `size=` (memory-backed in 0.1, charged to the box's memory cgroup),
//! so it joins the session's `tmpfs` list and a memory fault names it like any scratch.
//!
//! Here: where the file is and how it is read, and `apply`; `token` (an entry), `file` (the
//! file's sections and lookups), `device` (a `vgpio` device on the host).

mod device;
mod file;
mod token;

pub use file::{Vcpu, DEFAULT_VDISK_PATH};
pub use token::{check_tokens, parse_token, Kind, Token, MAX_NAME_LEN};

use crate::config::Config;
use crate::engine::shared::spec::Limits;
use crate::error::{Error, Result};
use file::{Chosen, Profiles, Source, Taken};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The environment variable naming the file instead of `~/.config/kern/kern.toml`.
pub const CONFIG_ENV: &str = "KERN_CONFIG";
/// A larger kern.toml is refused: it is a short hand-written file.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The file `profiles` are read from: `$KERN_CONFIG`, else `~/.config/kern/kern.toml`.
pub fn config_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(CONFIG_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_absolute() {
            return crate::invalid!(
                "{CONFIG_ENV}={} is a relative path; set it to the absolute path of your kern.toml",
                p.display()
            );
        }
        return Ok(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
        });
    match home {
        Some(h) => Ok(h.join(".config/kern/kern.toml")),
        None => crate::invalid!(
            "option `profiles` needs ~/.config/kern/kern.toml, but there is no home directory; \
             set {CONFIG_ENV} to the absolute path of your kern.toml"
        ),
    }
}

fn read_config(path: &Path, tokens: &[Token]) -> Result<String> {
    use std::io::Read;
    let first = &tokens[0];
    let f = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Invalid(format!(
                "option `profiles` names {first}, but {} does not exist; create it with a [[{}]] \
                 section named {:?} (the format is in index.d.ts, `profiles`), or set \
                 {CONFIG_ENV} to your kern.toml",
                path.display(),
                first.kind.prefix(),
                first.name
            ))
        } else {
            Error::Invalid(format!(
                "option `profiles`: cannot read {} ({e}); check its permissions",
                path.display()
            ))
        }
    })?;
    let meta = f
        .metadata()
        .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
    if !meta.is_file() {
        return crate::invalid!(
            "option `profiles`: {} is not a regular file; point {CONFIG_ENV} at your kern.toml",
            path.display()
        );
    }
    if meta.len() > MAX_FILE_BYTES {
        return crate::invalid!(
            "{}: the file is {} bytes; a kern.toml is at most {MAX_FILE_BYTES}",
            path.display(),
            meta.len()
        );
    }
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| {
            Error::Invalid(format!(
                "{}: cannot be read as UTF-8 text ({e})",
                path.display()
            ))
        })?;
    Ok(text)
}

/// A `vcpu` profile under the options: `memoryMb` yields only when it is `null` (its absence
/// means the 512 MiB default, which is explicit); `cpus` yields unless it is a number.
pub fn with_vcpu(
    limits: &mut Limits,
    vcpu: &Vcpu,
    memory_option: Option<&Value>,
    cpus_option: Option<&Value>,
) {
    if matches!(memory_option, Some(Value::Null)) {
        limits.memory_bytes = vcpu.memory_bytes;
    }
    if matches!(cpus_option, None | Some(Value::Null)) {
        limits.cpus = vcpu.cpus;
    }
}

/// Reads the file at `path` and resolves `tokens` against it and the session so far.
fn load(path: &Path, tokens: &[Token], taken: &Taken) -> Result<Chosen> {
    let text = read_config(path, tokens)?;
    let src = Source { path, text: &text };
    Profiles::parse(&src)?.select(&src, tokens, taken)
}

/// The `profiles` option applied to a session whose other options are parsed (`memory_option`
/// and `cpus_option` are the raw `memoryMb` and `cpus`). An empty list reads nothing.
pub fn apply(
    cfg: &mut Config,
    entries: &[String],
    memory_option: Option<&Value>,
    cpus_option: Option<&Value>,
) -> Result<()> {
    apply_from(cfg, entries, memory_option, cpus_option, config_path)
}

/// `apply`, with the file's location from `path` (asked only when there are profiles).
fn apply_from(
    cfg: &mut Config,
    entries: &[String],
    memory_option: Option<&Value>,
    cpus_option: Option<&Value>,
    path: impl FnOnce() -> Result<PathBuf>,
) -> Result<()> {
    let tokens = check_tokens(entries)?;
    if tokens.is_empty() {
        return Ok(());
    }
    let path = path()?;
    let mounts: Vec<String> = cfg.mounts.iter().map(|m| m.target.clone()).collect();
    let taken = Taken {
        tmpfs: &cfg.tmpfs,
        mounts: &mounts,
    };
    let chosen = load(&path, &tokens, &taken)?;
    if let Some(v) = &chosen.vcpu {
        with_vcpu(&mut cfg.limits, v, memory_option, cpus_option);
        // The spec's precedence, said aloud: an absent memoryMb is its 512 MiB default.
        if let (None, Some(bytes)) = (memory_option, v.memory_bytes) {
            let name = tokens.iter().find(|t| t.kind == Kind::Vcpu);
            cfg.notes.push(format!(
                "note: profile {} sets memory to {} MiB, but memoryMb's default of {} MiB applies (an explicit option wins over a profile, and memoryMb defaults to 512); pass memoryMb: null to let the profile's memory apply",
                name.map(ToString::to_string).unwrap_or_default(),
                bytes >> 20,
                crate::config::DEFAULT_MEMORY_MB
            ));
        }
    }
    cfg.devices = chosen.devices;
    cfg.tmpfs.extend(chosen.disks);
    Ok(())
}

#[cfg(test)]
mod tests;
