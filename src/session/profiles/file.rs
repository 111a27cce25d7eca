//! kern.toml read: its sections parsed with their spans (every mistake names its line), each
//! profile checked, and the entries a Sandbox names looked up against the session so far.

use super::device::check_device;
use super::token::{valid_name, Kind, Token, MAX_NAME_LEN};
use crate::config::{cpus_out_of_bounds, memory_out_of_bounds, parse_size, tmpfs_out_of_bounds};
use crate::engine::shared::spec::{DeviceSpec, TmpfsSpec, DEFAULT_WORKSPACE_TARGET};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

/// Where a `vdisk` goes when it names no `path`.
pub const DEFAULT_VDISK_PATH: &str = "/scratch";
/// Box paths a `vdisk` may not be at or under: the box provides them itself.
const DISK_RESERVED: &[&str] = &["/proc", "/dev", "/sys", "/etc", "/tmp"];

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
pub(super) struct Source<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
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
pub(super) struct Profiles {
    vcpu: Vec<Named<Vcpu>>,
    vgpio: Vec<Named<Vgpio>>,
    vdisk: Vec<Named<Vdisk>>,
}

/// What the chosen profiles add to a session.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Chosen {
    pub(super) vcpu: Option<Vcpu>,
    pub(super) devices: Vec<DeviceSpec>,
    pub(super) disks: Vec<TmpfsSpec>,
}

/// Box paths the session already uses, which a `vdisk` must keep clear of.
pub(super) struct Taken<'a> {
    pub(super) tmpfs: &'a [TmpfsSpec],
    pub(super) mounts: &'a [String],
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
    pub(super) fn parse(src: &Source) -> Result<Profiles> {
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
    pub(super) fn select(&self, src: &Source, tokens: &[Token], taken: &Taken) -> Result<Chosen> {
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
