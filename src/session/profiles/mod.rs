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
//! Memory has one spelling, `memory`; `memory_mb` is refused by name. Unknown keys and sections are refused. Every mistake in the file is `Error::Invalid`
//! with `<file>:<line>:` in front, from the `toml` parser's spans.
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

use crate::config::{
    cpus_out_of_bounds, memory_out_of_bounds, parse_size, tmpfs_out_of_bounds, Config,
};
use crate::engine::spec::{DeviceSpec, Limits, TmpfsSpec, DEFAULT_WORKSPACE_TARGET};
use crate::error::{Error, Result};
use nix::sys::stat::{fstat, SFlag};
use serde::Deserialize;
use serde_json::Value;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The environment variable naming the file instead of `~/.config/kern/kern.toml`.
pub const CONFIG_ENV: &str = "KERN_CONFIG";
/// The longest profile name.
pub const MAX_NAME_LEN: usize = 64;
/// Where a `vdisk` goes when it names no `path`.
pub const DEFAULT_VDISK_PATH: &str = "/scratch";
/// A larger kern.toml is refused: it is a short hand-written file.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Names the box's own `/dev` holds; a device may not appear at or under one of them.
const BOX_DEV: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout", "stderr", "ptmx",
    "pts", "shm",
];
/// Box paths a `vdisk` may not be at or under: the box provides them itself.
const DISK_RESERVED: &[&str] = &["/proc", "/dev", "/sys", "/etc", "/tmp"];

/// The three kinds of profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Vcpu,
    Vgpio,
    Vdisk,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Vcpu, Kind::Vgpio, Kind::Vdisk];

    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Vcpu => "vcpu",
            Kind::Vgpio => "vgpio",
            Kind::Vdisk => "vdisk",
        }
    }
}

/// One `profiles` entry, checked: `<kind>:<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub name: String,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.prefix(), self.name)
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Parses one entry against `^(vcpu|vgpio|vdisk):[A-Za-z0-9]{1,64}$`. Nothing else gets
/// through, so an entry can never carry a flag or a path.
pub fn parse_token(s: &str) -> Result<Token> {
    let shown: String = s.chars().take(80).collect();
    let bad = |why: String| {
        Error::Invalid(format!(
            "option `profiles`: {shown:?} {why}; an entry is a kind and a name, such as \
             \"vcpu:heavy\", \"vgpio:leds\" or \"vdisk:scratch\" (the name: 1 to \
             {MAX_NAME_LEN} ASCII letters or digits, as in kern.toml)"
        ))
    };
    let Some((prefix, name)) = s.split_once(':') else {
        return Err(bad("has no kind prefix".into()));
    };
    let Some(kind) = Kind::ALL.into_iter().find(|k| k.prefix() == prefix) else {
        let p: String = prefix.chars().take(20).collect();
        return Err(bad(format!(
            "has the unknown kind {p:?} (known: vcpu, vgpio, vdisk)"
        )));
    };
    if !valid_name(name) {
        return Err(bad("has a name that is not only letters and digits".into()));
    }
    Ok(Token {
        kind,
        name: name.to_string(),
    })
}

/// Every entry parsed; the same entry twice, or two `vcpu` entries, are mistakes.
pub fn check_tokens(entries: &[String]) -> Result<Vec<Token>> {
    let mut out: Vec<Token> = Vec::new();
    for e in entries {
        let t = parse_token(e)?;
        if out.contains(&t) {
            return crate::invalid!("option `profiles` names {t} twice; list each profile once");
        }
        if let Some(first) = out
            .iter()
            .find(|o| o.kind == Kind::Vcpu && t.kind == Kind::Vcpu)
        {
            return crate::invalid!(
                "option `profiles` names two vcpu profiles, {first} and {t}; a box has one CPU and \
                 memory slice, so pick one"
            );
        }
        out.push(t);
    }
    Ok(out)
}

/// kern.toml as written. Spans give every later mistake its line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    vcpu: Vec<VcpuEntry>,
    #[serde(default)]
    vgpio: Vec<VgpioEntry>,
    #[serde(default)]
    vdisk: Vec<VdiskEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VcpuEntry {
    name: Spanned<String>,
    cpus: Option<Spanned<f64>>,
    memory: Option<Spanned<toml::Value>>,
}

/// `memory_mb` is refused by name: `memory` is the one spelling, so nobody wonders which won.
const MEMORY_MB: &str = "`memory_mb` is not a kern.toml key: the memory of a [[vcpu]] is written \
                         one way, as `memory`, such as memory = \"2048M\" or memory = \"2G\"";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VgpioEntry {
    name: Spanned<String>,
    devices: Spanned<Vec<Spanned<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VdiskEntry {
    name: Spanned<String>,
    size: Spanned<toml::Value>,
    path: Option<Spanned<String>>,
}

/// A `vcpu` profile's caps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Vcpu {
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
}

#[derive(Debug)]
struct Vgpio {
    /// The device paths as written, with their spans (checked on the host only when chosen).
    devices: Vec<Spanned<String>>,
}

#[derive(Debug)]
struct Vdisk {
    size_bytes: u64,
    path: String,
    path_span: Range<usize>,
}

/// One profile of the file: its name, the span of that name, and what it says.
#[derive(Debug)]
struct Named<T> {
    name: String,
    span: Range<usize>,
    value: T,
}

/// Where mistakes are reported: the file and its text (for line numbers).
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }

    fn err(&self, span: &Range<usize>, msg: impl std::fmt::Display) -> Error {
        Error::Invalid(format!(
            "{}:{}: {msg}",
            self.path.display(),
            self.line(span)
        ))
    }
}

/// The parsed and checked file: every profile of every kind.
#[derive(Debug, Default)]
struct Profiles {
    vcpu: Vec<Named<Vcpu>>,
    vgpio: Vec<Named<Vgpio>>,
    vdisk: Vec<Named<Vdisk>>,
}

/// What the chosen profiles add to a session.
#[derive(Debug, Default, PartialEq)]
struct Chosen {
    vcpu: Option<Vcpu>,
    devices: Vec<DeviceSpec>,
    disks: Vec<TmpfsSpec>,
}

/// Box paths the session already uses, which a `vdisk` must keep clear of.
struct Taken<'a> {
    tmpfs: &'a [TmpfsSpec],
    mounts: &'a [String],
}

fn nested(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}/"))
}

/// A size: an integer number of bytes, or a string such as "256M".
fn bytes_of(v: &toml::Value) -> Option<u64> {
    match v {
        toml::Value::Integer(n) if *n > 0 => u64::try_from(*n).ok(),
        toml::Value::String(s) => parse_size(s),
        _ => None,
    }
}

/// A value as the file spells it, for messages (without toml's `display` feature).
fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => "an array".into(),
        toml::Value::Table(_) => "a table".into(),
    }
}

/// Absolute and normalised: no `.`, `..`, `//`, trailing `/` or NUL.
fn normalised(p: &str) -> bool {
    p.starts_with('/')
        && !p.contains('\0')
        && p[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

fn check_disk_path(p: &str) -> std::result::Result<(), String> {
    if p == "/" {
        return Err("path \"/\" is the box's root (the image); use a path such as /scratch".into());
    }
    if !normalised(p) {
        return Err(format!(
            "path {p:?} is not an absolute, normalised box path; use one such as /scratch (no \
             '.', '..', '//' or trailing '/')"
        ));
    }
    for r in DISK_RESERVED {
        if nested(p, r) {
            let tmp = if *r == "/tmp" {
                " (its size is the `tmpfs` option's)"
            } else {
                ""
            };
            return Err(format!(
                "path {p:?} is at or under {r}, which the box provides itself{tmp}; use a path \
                 such as /scratch"
            ));
        }
    }
    if nested(p, DEFAULT_WORKSPACE_TARGET) || nested(DEFAULT_WORKSPACE_TARGET, p) {
        return Err(format!(
            "path {p:?} would be over or inside the workspace {DEFAULT_WORKSPACE_TARGET}; use a \
             path such as /scratch"
        ));
    }
    Ok(())
}

impl Profiles {
    /// Parses kern.toml and checks everything that needs no host access, for every profile.
    fn parse(src: &Source) -> Result<Profiles> {
        let file: File = toml::from_str(src.text).map_err(|e| {
            let msg = e.message().trim_end();
            let msg = if msg.starts_with("unknown field `memory_mb`") {
                MEMORY_MB.to_string()
            } else {
                format!("{msg}; fix it (the format is under `profiles` in index.d.ts)")
            };
            match e.span() {
                Some(span) => src.err(&span, msg),
                None => Error::Invalid(format!("{}: {msg}", src.path.display())),
            }
        })?;
        let mut out = Profiles::default();
        for e in file.vcpu {
            let cpus = match &e.cpus {
                Some(c) if !(c.get_ref().is_finite() && *c.get_ref() > 0.0) => {
                    return Err(src.err(
                        &c.span(),
                        format!(
                            "cpus = {} is not a positive number of cores; use one such as 1.5",
                            c.get_ref()
                        ),
                    ))
                }
                Some(c) => match cpus_out_of_bounds(*c.get_ref()) {
                    Some(why) => return Err(src.err(&c.span(), format!("cpus {why}"))),
                    None => Some(*c.get_ref()),
                },
                None => None,
            };
            let memory_bytes = match &e.memory {
                None => None,
                Some(m) => Some(bytes_of(m.get_ref()).ok_or_else(|| {
                    src.err(
                        &m.span(),
                        format!(
                            "memory = {} is not a size; write one such as \"512M\" or \"2G\", or \
                             a positive integer number of bytes",
                            show(m.get_ref())
                        ),
                    )
                })?),
            };
            if let (Some(m), Some(bytes)) = (&e.memory, memory_bytes) {
                if let Some(why) = memory_out_of_bounds(bytes) {
                    return Err(src.err(
                        &m.span(),
                        format!(
                            "memory = {} {why} (a bare integer is bytes: write \"{}M\" for MiB)",
                            show(m.get_ref()),
                            crate::config::MIN_MEMORY_MB
                        ),
                    ));
                }
            }
            let value = Vcpu { cpus, memory_bytes };
            push_named(src, Kind::Vcpu, &mut out.vcpu, e.name, value)?;
        }
        for e in file.vgpio {
            if e.devices.get_ref().is_empty() {
                return Err(src.err(
                    &e.devices.span(),
                    format!(
                        "[[vgpio]] {:?} lists no devices; list the device nodes it grants, such \
                         as devices = [\"/dev/gpiochip0\"]",
                        e.name.get_ref()
                    ),
                ));
            }
            for d in e.devices.get_ref() {
                if !normalised(d.get_ref()) {
                    return Err(src.err(
                        &d.span(),
                        format!(
                            "device {:?} is not an absolute, normalised host path; write one \
                             such as /dev/gpiochip0",
                            d.get_ref()
                        ),
                    ));
                }
            }
            let value = Vgpio {
                devices: e.devices.into_inner(),
            };
            push_named(src, Kind::Vgpio, &mut out.vgpio, e.name, value)?;
        }
        for e in file.vdisk {
            let size_bytes = bytes_of(e.size.get_ref()).ok_or_else(|| {
                src.err(
                    &e.size.span(),
                    format!(
                        "size = {} is not a size; write one such as \"256M\" or \"1G\", or a \
                         positive integer number of bytes",
                        show(e.size.get_ref())
                    ),
                )
            })?;
            if let Some(why) = tmpfs_out_of_bounds(size_bytes) {
                return Err(src.err(
                    &e.size.span(),
                    format!("size = {} {why}", show(e.size.get_ref())),
                ));
            }
            let (path, path_span) = match e.path {
                Some(p) => (p.get_ref().clone(), p.span()),
                None => (DEFAULT_VDISK_PATH.to_string(), e.name.span()),
            };
            check_disk_path(&path).map_err(|why| src.err(&path_span, why))?;
            let value = Vdisk {
                size_bytes,
                path,
                path_span,
            };
            push_named(src, Kind::Vdisk, &mut out.vdisk, e.name, value)?;
        }
        Ok(out)
    }

    /// The chosen profiles, looked up and checked against the host and the session.
    fn select(&self, src: &Source, tokens: &[Token], taken: &Taken) -> Result<Chosen> {
        let mut chosen = Chosen::default();
        for t in tokens {
            match t.kind {
                Kind::Vcpu => chosen.vcpu = Some(lookup(src, t, &self.vcpu)?.value),
                Kind::Vgpio => {
                    for d in &lookup(src, t, &self.vgpio)?.value.devices {
                        let dev = check_device(d.get_ref()).map_err(|why| {
                            src.err(&d.span(), format!("[[vgpio]] {:?}: {why}", t.name))
                        })?;
                        match chosen.devices.iter().find(|c| c.target == dev.target) {
                            // Two profiles may share a device; the box gets it once.
                            Some(c) if (c.dev, c.ino) == (dev.dev, dev.ino) => {}
                            Some(c) => {
                                return Err(src.err(
                                    &d.span(),
                                    format!(
                                        "[[vgpio]] {:?}: device {:?} would be {} in the box, \
                                         where {} already is; bind each box path once",
                                        t.name,
                                        d.get_ref(),
                                        dev.target,
                                        c.source.display()
                                    ),
                                ))
                            }
                            None => chosen.devices.push(dev),
                        }
                    }
                }
                Kind::Vdisk => {
                    let disk = &lookup(src, t, &self.vdisk)?.value;
                    let clash = |what: &str, at: &str| {
                        Err(src.err(
                            &disk.path_span,
                            format!(
                                "[[vdisk]] {:?} at {} overlaps the {what} at {at}; give the \
                                 vdisk another `path`, or drop one of them",
                                t.name, disk.path
                            ),
                        ))
                    };
                    for at in taken.tmpfs.iter().chain(&chosen.disks).map(|t| &t.target) {
                        if nested(&disk.path, at) || nested(at, &disk.path) {
                            return clash("scratch tmpfs", at);
                        }
                    }
                    for at in taken.mounts {
                        if nested(&disk.path, at) || nested(at, &disk.path) {
                            return clash("mount", at);
                        }
                    }
                    chosen.disks.push(TmpfsSpec {
                        target: disk.path.clone(),
                        size_bytes: disk.size_bytes,
                    });
                }
            }
        }
        Ok(chosen)
    }
}

fn push_named<T>(
    src: &Source,
    kind: Kind,
    list: &mut Vec<Named<T>>,
    name: Spanned<String>,
    value: T,
) -> Result<()> {
    let k = kind.prefix();
    let span = name.span();
    let name = name.into_inner();
    if !valid_name(&name) {
        return Err(src.err(
            &span,
            format!(
                "[[{k}]] name {name:?} must be 1 to {MAX_NAME_LEN} ASCII letters or digits \
                 (a Sandbox names it as \"{k}:<name>\")"
            ),
        ));
    }
    if let Some(first) = list.iter().find(|n| n.name == name) {
        return Err(src.err(
            &span,
            format!(
                "a second [[{k}]] named {name:?} (the first is on line {}); names must be unique \
                 within a kind, so rename or remove one",
                src.line(&first.span)
            ),
        ));
    }
    list.push(Named { name, span, value });
    Ok(())
}

fn lookup<'a, T>(src: &Source, t: &Token, list: &'a [Named<T>]) -> Result<&'a Named<T>> {
    list.iter().find(|n| n.name == t.name).ok_or_else(|| {
        let k = t.kind.prefix();
        let have = if list.is_empty() {
            format!("it has no [[{k}]] sections")
        } else {
            let names: Vec<&str> = list.iter().map(|n| n.name.as_str()).collect();
            format!("its [[{k}]] profiles are: {}", names.join(", "))
        };
        Error::Invalid(format!(
            "option `profiles`: {t} is not in {}: {have}. Add a [[{k}]] section with name = {:?}, \
             or fix the entry",
            src.path.display(),
            t.name
        ))
    })
}

/// Device and inode, widened (narrower types on some 32-bit targets).
#[allow(clippy::unnecessary_cast)]
fn ids(st: &nix::sys::stat::FileStat) -> (u64, u64, u64) {
    (st.st_dev as u64, st.st_ino as u64, st.st_rdev as u64)
}

/// Resolves one `vgpio` device path to the real node and checks it, or says why not.
fn check_device(written: &str) -> std::result::Result<DeviceSpec, String> {
    let canon = std::fs::canonicalize(written).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "device {written:?} does not exist on the host; check the path (is the device \
                 attached and its driver loaded?)"
            )
        } else {
            format!(
                "device {written:?} cannot be resolved ({e}); check the path and its permissions"
            )
        }
    })?;
    let shown = if canon.as_os_str() == written {
        String::new()
    } else {
        format!(" (which resolves to {})", canon.display())
    };
    // Open what canonicalize named, with no symlink allowed: what we record is what we checked.
    let fd = crate::fsx::open_no_symlinks(&canon).map_err(|e| {
        format!("device {written:?}{shown} cannot be opened ({e}); keep it in place and try again")
    })?;
    let st = fstat(&fd).map_err(|e| format!("device {written:?}{shown}: fstat failed ({e})"))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFCHR {
        return Err(format!(
            "device {written:?}{shown} is not a character device; a vgpio profile grants device \
             nodes such as /dev/gpiochip0, /dev/i2c-1 or /dev/spidev0.0"
        ));
    }
    let (dev, ino, rdev) = ids(&st);
    // /dev/mem, /dev/kmem and /dev/port: the host's memory and I/O ports, never hardware access.
    if nix::sys::stat::major(rdev) == 1 && [1, 2, 4].contains(&nix::sys::stat::minor(rdev)) {
        return Err(format!(
            "device {written:?}{shown} is the host's physical memory or I/O ports (1:{}), which \
             no box is given; list the GPIO/I2C/SPI device nodes instead",
            nix::sys::stat::minor(rdev)
        ));
    }
    let target = match written.strip_prefix("/dev/") {
        Some(rel) => format!("/dev/{rel}"),
        None => format!(
            "/dev/{}",
            Path::new(written)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
    };
    let first = target["/dev/".len()..]
        .split('/')
        .next()
        .unwrap_or_default();
    if BOX_DEV.contains(&first) {
        return Err(format!(
            "device {written:?} would be {target} in the box, where the box has its own /dev/{first}; \
             vgpio grants hardware, not the box's standard nodes"
        ));
    }
    Ok(DeviceSpec {
        source: canon,
        target,
        dev,
        ino,
        rdev,
    })
}

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
mod tests {
    use super::*;
    use serde_json::json;

    const MIB: u64 = 1 << 20;

    fn tokens(list: &[&str]) -> Vec<Token> {
        check_tokens(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    /// kern.toml `text` in a temp dir, resolved for `list` with /tmp as the only scratch.
    fn resolve(text: &str, list: &[&str]) -> Result<Chosen> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kern.toml");
        std::fs::write(&path, text).unwrap();
        let tmp = [TmpfsSpec {
            target: "/tmp".into(),
            size_bytes: MIB,
        }];
        let mounts = ["/data".to_string()];
        let taken = Taken {
            tmpfs: &tmp,
            mounts: &mounts,
        };
        load(&path, &tokens(list), &taken)
    }

    fn err(text: &str, list: &[&str]) -> String {
        resolve(text, list).unwrap_err().to_string()
    }

    #[test]
    fn tokens_follow_the_grammar() {
        let t = parse_token("vcpu:heavy").unwrap();
        assert_eq!((t.kind, t.name.as_str()), (Kind::Vcpu, "heavy"));
        assert_eq!(parse_token("vdisk:A9").unwrap().kind, Kind::Vdisk);
        parse_token(&format!("vgpio:{}", "a".repeat(64))).unwrap();
        for bad in [
            "",
            "heavy",
            "vcpu:",
            "vcpu:--privileged",
            "vcpu:a b",
            "vcpu:a:b",
            "vcpu:../x",
            "vcpu:é",
            "VCPU:x",
            "vnet:x",
            " vcpu:x",
            "vcpu:x\n",
            &format!("vgpio:{}", "a".repeat(65)),
        ] {
            let e = parse_token(bad).unwrap_err().to_string();
            assert!(e.contains("option `profiles`"), "{bad:?}: {e}");
        }
        assert!(parse_token("vnet:x")
            .unwrap_err()
            .to_string()
            .contains("unknown kind"));
    }

    #[test]
    fn token_lists() {
        assert!(check_tokens(&[]).unwrap().is_empty());
        let two = ["vcpu:a".to_string(), "vcpu:b".to_string()];
        assert!(check_tokens(&two)
            .unwrap_err()
            .to_string()
            .contains("two vcpu"));
        let dup = ["vdisk:a".to_string(), "vdisk:a".to_string()];
        assert!(check_tokens(&dup)
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }

    #[test]
    fn a_full_file_resolves() {
        let text = "[[vcpu]]\nname = \"heavy\"\ncpus = 1.5\nmemory = \"2G\"\n\n[[vcpu]]\nname = \"int\"\ncpus = 2\nmemory = 67108864\n\n[[vdisk]]\nname = \"scratch\"\nsize = \"256M\"\n\n[[vdisk]]\nname = \"other\"\nsize = 4096\npath = \"/var/cache/x\"\n";
        let c = resolve(text, &["vcpu:heavy", "vdisk:scratch", "vdisk:other"]).unwrap();
        assert_eq!(
            c.vcpu,
            Some(Vcpu {
                cpus: Some(1.5),
                memory_bytes: Some(2 << 30)
            })
        );
        assert_eq!(
            c.disks,
            vec![
                TmpfsSpec {
                    target: "/scratch".into(),
                    size_bytes: 256 * MIB
                },
                TmpfsSpec {
                    target: "/var/cache/x".into(),
                    size_bytes: 4096
                }
            ]
        );
        let c = resolve(text, &["vcpu:int"]).unwrap();
        assert_eq!(
            c.vcpu,
            Some(Vcpu {
                cpus: Some(2.0),
                memory_bytes: Some(64 * MIB)
            })
        );
        // A profile with neither key: no caps of its own.
        let c = resolve("[[vcpu]]\nname = \"bare\"\n", &["vcpu:bare"]).unwrap();
        assert_eq!(c.vcpu, Some(Vcpu::default()));
    }

    #[test]
    fn file_mistakes_name_the_line() {
        let cases: &[(&str, &[&str], &str)] = &[
            (
                "[[vcpu]]\nname = \"a\"\ncpus = \n",
                &["vcpu:a"],
                "kern.toml:3:",
            ),
            (
                "[[vcpu]]\nname = \"a\"\nbogus = 1\n",
                &["vcpu:a"],
                "kern.toml:3:",
            ),
            (
                "[[vcpu]]\nname = \"a\"\nmemory_mb = 2048\n",
                &["vcpu:a"],
                "kern.toml:3: `memory_mb`",
            ),
            (
                "[[vcpu]]\nname = \"a\"\n\n[[vcpu]]\nname = \"a\"\n",
                &["vcpu:a"],
                "kern.toml:5: a second [[vcpu]] named \"a\" (the first is on line 2)",
            ),
            (
                "[[vcpu]]\nname = \"a-b\"\n",
                &["vcpu:x"],
                "kern.toml:2: [[vcpu]] name \"a-b\"",
            ),
            (
                "[[vcpu]]\nname = \"a\"\ncpus = -1\n",
                &["vcpu:a"],
                "kern.toml:3: cpus = -1",
            ),
            (
                "[[vcpu]]\nname = \"a\"\ncpus = \"2\"\n",
                &["vcpu:a"],
                "kern.toml:3:",
            ),
            (
                "[[vcpu]]\nname = \"a\"\nmemory = \"lots\"\n",
                &["vcpu:a"],
                "kern.toml:3: memory = \"lots\"",
            ),
            (
                "[[vcpu]]\nname = \"a\"\nmemory = 0\n",
                &["vcpu:a"],
                "kern.toml:3: memory = 0",
            ),
            (
                "[[vcpu]]\nname = \"a\"\nmemory = 96\n",
                &["vcpu:a"],
                "kern.toml:3: memory = 96 is 96 bytes, below the 32 MiB a box needs",
            ),
            (
                "[[vcpu]]\nname = \"a\"\nmemory = \"1P\"\n",
                &["vcpu:a"],
                "kern.toml:3:",
            ),
            (
                "[[vcpu]]\nname = \"a\"\nmemory = \"100T\"\n",
                &["vcpu:a"],
                "kern.toml:3: memory = \"100T\" is 104857600 MiB, over the",
            ),
            (
                "[[vcpu]]\nname = \"a\"\ncpus = 1e9\n",
                &["vcpu:a"],
                "kern.toml:3: cpus is 1000000000, over the 8192 cores",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1e30g\"\n",
                &["vdisk:d"],
                "kern.toml:3: size = \"1e30g\" is",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = 1\n",
                &["vdisk:d"],
                "kern.toml:3: size = 1 is 1 bytes, below the 4096 bytes",
            ),
            ("[vnet]\nname = \"a\"\n", &["vcpu:a"], "kern.toml:1:"),
            (
                "[[vgpio]]\nname = \"g\"\ndevices = []\n",
                &["vgpio:g"],
                "kern.toml:3: [[vgpio]] \"g\" lists no devices",
            ),
            (
                "[[vgpio]]\nname = \"g\"\ndevices = [\"dev/x\"]\n",
                &["vgpio:g"],
                "kern.toml:3: device \"dev/x\"",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"scratch\"\n",
                &["vdisk:d"],
                "kern.toml:4: path \"scratch\"",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/\"\n",
                &["vdisk:d"],
                "kern.toml:4:",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/proc/x\"\n",
                &["vdisk:d"],
                "kern.toml:4: path \"/proc/x\" is at or under /proc",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/etc\"\n",
                &["vdisk:d"],
                "under /etc",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/tmp\"\n",
                &["vdisk:d"],
                "under /tmp",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/workspace/x\"\n",
                &["vdisk:d"],
                "workspace",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/a/../b\"\n",
                &["vdisk:d"],
                "normalised",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/data/x\"\n",
                &["vdisk:d"],
                "kern.toml:4: [[vdisk]] \"d\" at /data/x overlaps the mount at /data",
            ),
            (
                "[[vdisk]]\nname = \"d\"\nsize = \"big\"\n",
                &["vdisk:d"],
                "kern.toml:3: size = \"big\"",
            ),
            ("[[vdisk]]\nname = \"d\"\n", &["vdisk:d"], "kern.toml:"),
        ];
        for (text, list, want) in cases {
            let e = err(text, list);
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn two_vdisks_at_one_path_clash() {
        let text = "[[vdisk]]\nname = \"a\"\nsize = \"1M\"\n[[vdisk]]\nname = \"b\"\nsize = \"1M\"\npath = \"/scratch/b\"\n";
        let e = err(text, &["vdisk:a", "vdisk:b"]);
        assert!(
            e.contains("kern.toml:7:") && e.contains("overlaps the scratch tmpfs at /scratch"),
            "{e}"
        );
    }

    #[test]
    fn unknown_profiles_and_missing_files() {
        let e = err("[[vcpu]]\nname = \"light\"\n", &["vcpu:heavy"]);
        assert!(
            e.contains("vcpu:heavy is not in") && e.contains("are: light"),
            "{e}"
        );
        let e = err("", &["vdisk:x"]);
        assert!(e.contains("no [[vdisk]] sections"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let taken = Taken {
            tmpfs: &[],
            mounts: &[],
        };
        let e = load(&dir.path().join("kern.toml"), &tokens(&["vcpu:a"]), &taken)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not exist") && e.contains(CONFIG_ENV),
            "{e}"
        );
    }

    #[test]
    fn devices_resolve_to_the_real_node() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("gpiochip9");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let d = check_device(link.to_str().unwrap()).unwrap();
        assert_eq!(d.source, PathBuf::from("/dev/zero"));
        assert_eq!(d.target, "/dev/gpiochip9");
        assert_eq!(
            (nix::sys::stat::major(d.rdev), nix::sys::stat::minor(d.rdev)),
            (1, 5)
        );

        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let e = check_device(file.to_str().unwrap()).unwrap_err();
        assert!(e.contains("not a character device"), "{e}");
        let e = check_device(dir.path().join("none").to_str().unwrap()).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        // The box's own nodes are not for hire.
        let e = check_device("/dev/null").unwrap_err();
        assert!(e.contains("its own /dev/null"), "{e}");
        if Path::new("/dev/mem").exists() {
            assert!(check_device("/dev/mem")
                .unwrap_err()
                .contains("physical memory"));
        }
    }

    #[test]
    fn device_errors_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("gpiochip8");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let text = format!(
            "[[vgpio]]\nname = \"g\"\ndevices = [\n  {:?},\n  \"/nonexistent/gpiochip7\",\n]\n",
            link.to_str().unwrap()
        );
        let e = err(&text, &["vgpio:g"]);
        assert!(
            e.contains(
                "kern.toml:5: [[vgpio]] \"g\": device \"/nonexistent/gpiochip7\" does not exist"
            ),
            "{e}"
        );
        // An unchosen profile's devices are not looked at.
        let text =
            "[[vgpio]]\nname = \"g\"\ndevices = [\"/nonexistent/x\"]\n[[vcpu]]\nname = \"c\"\n";
        resolve(text, &["vcpu:c"]).unwrap();
    }

    #[test]
    fn options_win_over_a_vcpu_profile() {
        let v = Vcpu {
            cpus: Some(1.5),
            memory_bytes: Some(2 << 30),
        };
        let base = Limits {
            memory_bytes: Some(512 * MIB),
            pids: Some(256),
            cpus: None,
            enforce: true,
            require: false,
        };
        // memoryMb absent: the 512 MiB default stands; cpus absent: the profile's.
        let mut l = base.clone();
        with_vcpu(&mut l, &v, None, None);
        assert_eq!((l.memory_bytes, l.cpus), (Some(512 * MIB), Some(1.5)));
        // memoryMb null: the profile's memory; cpus null: the profile's cpus.
        let mut l = Limits {
            memory_bytes: None,
            ..base.clone()
        };
        with_vcpu(&mut l, &v, Some(&Value::Null), Some(&Value::Null));
        assert_eq!((l.memory_bytes, l.cpus), (Some(2 << 30), Some(1.5)));
        // Explicit numbers win.
        let mut l = Limits {
            memory_bytes: Some(100 * MIB),
            cpus: Some(0.5),
            ..base.clone()
        };
        with_vcpu(&mut l, &v, Some(&json!(100)), Some(&json!(0.5)));
        assert_eq!((l.memory_bytes, l.cpus), (Some(100 * MIB), Some(0.5)));
        // memoryMb null and a profile without memory: uncapped.
        let mut l = Limits {
            memory_bytes: None,
            ..base
        };
        with_vcpu(&mut l, &Vcpu::default(), Some(&Value::Null), None);
        assert_eq!((l.memory_bytes, l.cpus), (None, None));
    }

    #[test]
    fn a_session_gets_what_its_profiles_say() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kern.toml");
        std::fs::write(
            &path,
            "[[vcpu]]\nname = \"big\"\ncpus = 2\nmemory = \"1G\"\n[[vdisk]]\nname = \"s\"\nsize = \"8M\"\n",
        )
        .unwrap();
        // The session as options::parse leaves it before `profiles`, then the profiles applied
        // with the same raw options.
        let session = |options: Value| -> Result<Config> {
            let mut o = options.clone();
            let entries = o
                .as_object_mut()
                .and_then(|m| m.remove("profiles"))
                .unwrap_or(json!([]));
            let mut cfg = super::super::options::parse(&o)?;
            let entries: Vec<String> = serde_json::from_value(entries).unwrap();
            apply_from(&mut cfg, &entries, o.get("memoryMb"), o.get("cpus"), || {
                Ok(path.clone())
            })?;
            Ok(cfg)
        };
        let c = session(
            json!({"image": "host", "memoryMb": null, "profiles": ["vcpu:big", "vdisk:s"]}),
        )
        .unwrap();
        assert_eq!(
            (c.limits.memory_bytes, c.limits.cpus),
            (Some(1 << 30), Some(2.0))
        );
        let scratch = TmpfsSpec {
            target: "/scratch".into(),
            size_bytes: 8 * MIB,
        };
        assert!(c.tmpfs.contains(&scratch), "{:?}", c.tmpfs);
        let c = session(json!({"image": "host", "profiles": ["vcpu:big"], "cpus": 0.25})).unwrap();
        assert_eq!(
            (c.limits.memory_bytes, c.limits.cpus),
            (Some(512 * MIB), Some(0.25))
        );
        // A vdisk on the caller's own tmpfs path clashes.
        let e =
            session(json!({"image": "host", "tmpfs": {"/scratch": "1m"}, "profiles": ["vdisk:s"]}))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("kern.toml:6:") && e.contains("overlaps the scratch tmpfs at /scratch"),
            "{e}"
        );
        // An empty list never asks where the file is, let alone reads it.
        let mut cfg = super::super::options::parse(&json!({"image": "host"})).unwrap();
        apply_from(&mut cfg, &[], None, None, || {
            panic!("the file was looked for")
        })
        .unwrap();
        std::fs::write(&path, "not toml [").unwrap();
        let e = session(json!({"image": "host", "profiles": ["vcpu:big"]}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("kern.toml:1:"), "{e}");
    }
}
