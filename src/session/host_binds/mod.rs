//! The host-side policy for the host directories a box gets: `mounts`, the extra host paths a
//! caller binds into the box, and the workspace (`check_workspace`), which the box and kern
//! itself write. Every request is parsed and checked here, before any box exists:
//!
//! - the source is resolved fully, then opened again from `/` with `openat2` and no symlinks
//!   allowed, so what we check is what `canonicalize` named, and its device/inode is recorded;
//! - sources that are, sit inside, or contain host secrets and control points (system
//!   directories, home directories, credential files, engine and D-Bus sockets) are refused by
//!   path and by device/inode identity, so a bind mount or hardlink alias is caught too;
//! - what the box may write (the workspace, `"rw"` mounts) must also keep clear of the host's
//!   software and system state (`/usr`, `/var/lib`...) and of a shared temporary directory as a
//!   whole: kern writes `.deps` in a workspace and clears every set-id bit it finds there and in
//!   `"rw"` mounts, which on `/usr` would strip the host's own `passwd` and `su`;
//! - directories are scanned shallowly for engine and bus sockets;
//! - targets must be normalised absolute box paths away from what the box mounts itself.
//!
//! `kern` opens the source again before it mounts it (no symlinks, the recorded inode or
//! nothing), so a source swapped after `parse` is refused instead of mounted. (The box's own
//! mount tree, these binds among it, is `engine::boxside::mounts`.)

use crate::error::{Error, Result};
use crate::fsx::walk;
use nix::errno::Errno;
use nix::sys::stat::{fstat, stat, FileStat, SFlag};
use nix::unistd::{geteuid, User};
use serde_json::Value;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The longest target accepted, in bytes (Linux's PATH_MAX).
pub const MAX_TARGET_BYTES: usize = 4096;
/// How deep below a source directory the socket scan looks (1 = its direct entries).
pub const SCAN_DEPTH: usize = 3;
/// How many entries the socket scan examines at most. A larger tree is scanned only this far
/// and not refused for its size: the scan is a guard against the common mistake (a directory
/// that holds a live engine socket), the deny list is the real boundary.
pub const SCAN_MAX_ENTRIES: usize = 10_000;

/// System directories refused when a source is, is inside, or contains one.
const SYSTEM: &[(&str, &str)] = &[
    ("/etc", "host configuration and credentials"),
    ("/proc", "kernel and process state"),
    ("/sys", "kernel state"),
    ("/dev", "host devices"),
    ("/boot", "the kernel and boot loader"),
    ("/root", "root's home directory"),
    ("/var/run", "runtime state and service sockets"),
    ("/run", "runtime state and service sockets"),
];

/// Trees the host's own software runs from or trusts: refused for what a box may write (the
/// workspace, `"rw"` mounts) when it is, is inside or contains one. Read-only they may be
/// mounted (a host tool for the box).
const SYSTEM_WRITABLE: &[(&str, &str)] = &[
    ("/usr", "the host's installed software"),
    ("/bin", "the host's programs"),
    ("/sbin", "the host's system programs"),
    ("/lib", "the host's libraries"),
    ("/lib32", "the host's libraries"),
    ("/lib64", "the host's libraries"),
    ("/libx32", "the host's libraries"),
    (
        "/var/lib",
        "system and service state, the package database among it",
    ),
    ("/var/spool", "cron, mail and print queues"),
    ("/snap", "installed snaps"),
];

/// Shared temporary directories: every user's and process's scratch files and sockets (an
/// ssh-agent's, an X server's). Refused as a whole and when contained; a directory inside one is
/// fine (temporary workspaces live there).
const SHARED_TEMP: &[&str] = &["/tmp", "/var/tmp"];

/// Entries of a home directory that hold credentials.
const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".config",
    ".docker",
    ".kube",
    ".npmrc",
    ".netrc",
    ".pgpass",
    ".git-credentials",
];

/// Directory names refused anywhere in a source, so other users' credentials (whose homes
/// `Context` may not list) are caught too.
const SECRET_COMPONENTS: &[&str] = &[".ssh", ".gnupg", ".aws", ".docker", ".kube"];

/// Sockets whose holder controls the host: container engines and the system bus.
const ENGINE_SOCKETS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/run/dbus/system_bus_socket",
    "/var/run/dbus/system_bus_socket",
];

/// The same, under `$XDG_RUNTIME_DIR` (rootless engines and the session bus).
const RUNTIME_SOCKETS: &[&str] = &["bus", "docker.sock", "podman/podman.sock"];

/// Box paths the box mounts itself.
const BOX_RESERVED: &[&str] = &["/proc", "/sys", "/dev"];

/// One checked host bind: the engine's bind, with the source's device and inode as checked.
pub use crate::engine::shared::spec::BindSpec as Mount;

/// What the policy needs to know about the host and the box.
#[derive(Debug, Clone)]
pub struct Context {
    /// Where the box sees its workspace (`workspaceMount`): nothing is mounted over or inside it.
    pub workspace_target: String,
    /// Home directories: each one and its ancestors are refused (a project inside is fine), and
    /// the credential entries inside each are refused outright.
    pub homes: Vec<PathBuf>,
    /// `$XDG_RUNTIME_DIR`: session sockets and secrets, refused with everything in it.
    pub runtime_dir: Option<PathBuf>,
    /// kern's own store (`home::root`: images, the compiled stdlib, the package cache): refused
    /// read-write with everything in it and its ancestors, as what other boxes run comes from it.
    pub kern_home: Option<PathBuf>,
}

impl Context {
    /// The host's view: homes are `$HOME`, the effective user's passwd home, and every home in
    /// `/etc/passwd` of uid 0 or uid >= 1000; the runtime dir is `$XDG_RUNTIME_DIR`. Relative or
    /// empty values are ignored (they name nothing we could compare with).
    pub fn from_host(workspace_target: &str) -> Context {
        let mut homes: Vec<PathBuf> = Vec::new();
        fn add(homes: &mut Vec<PathBuf>, p: PathBuf) {
            if p.is_absolute() && !homes.contains(&p) {
                homes.push(p);
            }
        }
        if let Some(h) = std::env::var_os("HOME") {
            add(&mut homes, PathBuf::from(h));
        }
        if let Ok(Some(u)) = User::from_uid(geteuid()) {
            add(&mut homes, u.dir);
        }
        // Read as bytes: a home need not be UTF-8, and one odd line must not hide the rest.
        if let Ok(passwd) = std::fs::read("/etc/passwd") {
            for line in passwd.split(|b| *b == b'\n') {
                // name:password:uid:gid:gecos:home:shell
                let fields: Vec<&[u8]> = line.split(|b| *b == b':').collect();
                if fields.len() < 6 {
                    continue;
                }
                let uid = std::str::from_utf8(fields[2])
                    .ok()
                    .and_then(|s| s.parse::<u32>().ok());
                if matches!(uid, Some(u) if u == 0 || u >= 1000) {
                    add(&mut homes, PathBuf::from(OsStr::from_bytes(fields[5])));
                }
            }
        }
        let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        Context {
            workspace_target: workspace_target.to_string(),
            homes,
            runtime_dir,
            kern_home: crate::home::root().ok(),
        }
    }
}

/// Parses the `mounts` option value (serde_json::Value: an object) and checks every entry.
///
/// Each key is an absolute host path; each value is a box path (read-only) or
/// `[boxPath, "ro" | "rw"]`. A wrong JSON shape, a bad mode string or two mounts on one target
/// are `Error::Invalid`; everything the policy refuses is `Error::MountRefused`. Mounts come back
/// in the order given, with canonical sources and normalised targets.
pub fn parse(value: &Value, ctx: &Context) -> Result<Vec<Mount>> {
    let map = value.as_object().ok_or_else(|| {
        Error::Invalid(format!(
            "option `mounts` must be an object {{ \"/host/path\": \"/box/path\" }}, got {}",
            crate::config::describe(value)
        ))
    })?;
    if map.is_empty() {
        return Ok(Vec::new());
    }
    // Built once per call: it stats every denied path and its ancestors.
    let deny = deny_list(ctx);
    let mut out: Vec<Mount> = Vec::new();
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (src, spec) in map {
        let (target, writable) = entry_spec(src, spec)?;
        let target = check_target(&format!("mounts: {src:?}"), target, &ctx.workspace_target)?;
        if let Some((_, first)) = seen.iter().find(|(t, _)| *t == target) {
            return Err(Error::Invalid(format!(
                "option `mounts`: {first:?} and {src:?} both target {target:?}; give each mount its own box path"
            )));
        }
        seen.push((target.clone(), src.as_str()));
        let (source, st) = check_source(src, &deny, Use::Mount { writable })?;
        let (dev, ino) = id_of(&st);
        out.push(Mount {
            source,
            target,
            writable,
            dir: kind(&st) == SFlag::S_IFDIR,
            dev,
            ino,
        });
    }
    Ok(out)
}

type Id = (u64, u64);

/// Device and inode. `as`: both are u64 on 64-bit Linux, narrower unsigned types on some 32-bit
/// targets, so this only ever widens.
#[allow(clippy::unnecessary_cast)]
fn id_of(st: &FileStat) -> Id {
    (st.st_dev as u64, st.st_ino as u64)
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

fn stat_id(p: &Path) -> Option<Id> {
    stat(p).ok().map(|st| id_of(&st))
}

/// The box path a `mounts` entry names, as written, if it has the right shape (`parse` says
/// what is wrong with one that has not).
pub fn target_of<'a>(src: &str, spec: &'a Value) -> Option<&'a str> {
    entry_spec(src, spec).ok().map(|(t, _)| t)
}

/// The box path and writability of one entry's value.
fn entry_spec<'a>(src: &str, spec: &'a Value) -> Result<(&'a str, bool)> {
    let shape = || {
        Error::Invalid(format!(
            "option `mounts`: the value for {src:?} must be a box path such as \"/data\" or \
             [\"/data\", \"ro\" | \"rw\"], got {}",
            crate::config::describe(spec)
        ))
    };
    match spec {
        Value::String(t) => Ok((t.as_str(), false)),
        Value::Array(a) if a.len() == 2 => {
            let t = a[0].as_str().ok_or_else(shape)?;
            match a[1].as_str().ok_or_else(shape)? {
                "ro" => Ok((t, false)),
                "rw" => Ok((t, true)),
                m => Err(Error::Invalid(format!(
                    "option `mounts`: the mode for {src:?} is {m:?}; use \"ro\" (read-only) or \"rw\" (read-write)"
                ))),
            }
        }
        _ => Err(shape()),
    }
}

/// `t` checked as a box path; returned as given, which is already normalised (anything else is
/// refused rather than rewritten, so the caller sees exactly where the mount lands). `what`
/// names the entry in messages (`mounts: "/src"`, `volumes: "name"`).
pub fn check_target(what: &str, t: &str, workspace: &str) -> Result<String> {
    let refuse = |why: String| Err(Error::MountRefused(format!("{what}: {why}")));
    let shown: String = t.chars().take(200).collect();
    if t.len() > MAX_TARGET_BYTES {
        return refuse(format!(
            "target {shown:?}... is longer than {MAX_TARGET_BYTES} bytes; use a shorter box path"
        ));
    }
    if t.contains('\0') {
        return refuse(format!(
            "target {shown:?} contains a NUL byte; use a plain box path such as /data"
        ));
    }
    if t == "/" {
        return refuse(
            "target \"/\" is the box's root (the image); mount at a path below it such as /data"
                .into(),
        );
    }
    let normal = t.starts_with('/')
        && t[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if !normal {
        return refuse(format!(
            "target {shown:?} is relative or escapes; give an absolute, normalised box path such \
             as /data (no '.', '..', '//' or trailing '/')"
        ));
    }
    let target = Path::new(t);
    for r in BOX_RESERVED {
        if target.starts_with(r) {
            return refuse(format!(
                "target {t:?} is at or under {r}, which the box mounts itself; pick another \
                 path such as /data"
            ));
        }
    }
    let ws = workspace.trim_end_matches('/');
    let ws = Path::new(if ws.is_empty() { "/" } else { ws });
    // Inside, a host file would shadow what the box wrote; over an ancestor, the mount would
    // hide the workspace itself.
    if target.starts_with(ws) || ws.starts_with(target) {
        return refuse(format!(
            "target {t:?} would be over or inside the workspace {}, which the box can write to; \
             mount it elsewhere (such as /data), or copy the files into the workspace",
            ws.display()
        ));
    }
    Ok(t.to_string())
}

/// One refused host path.
struct Denied {
    /// For messages: what lives there (the path itself is shown beside it).
    what: String,
    /// The path as listed, and resolved through the symlinks that exist (`/var/run/x` ->
    /// `/run/x`) when that differs.
    forms: Vec<PathBuf>,
    /// Device/inode of the path, when it exists: an alias of it is the same thing.
    id: Option<Id>,
    /// Device/inode of every existing proper ancestor of either form.
    ancestor_ids: Vec<Id>,
    /// Refuse sources inside it.
    inside: bool,
    /// Refuse sources that contain it.
    ancestor: bool,
    /// Only what a box may write is refused (`SYSTEM_WRITABLE`).
    writable_only: bool,
}

impl Denied {
    fn new(path: &Path, what: String, inside: bool, ancestor: bool) -> Denied {
        let mut forms = vec![path.to_path_buf()];
        let resolved = resolve_existing(path);
        if resolved != path {
            forms.push(resolved);
        }
        let mut ancestor_ids = Vec::new();
        if ancestor {
            for a in forms.iter().flat_map(|f| f.ancestors().skip(1)) {
                if let Some(id) = stat_id(a) {
                    if !ancestor_ids.contains(&id) {
                        ancestor_ids.push(id);
                    }
                }
            }
        }
        Denied {
            what,
            id: stat_id(path),
            forms,
            ancestor_ids,
            inside,
            ancestor,
            writable_only: false,
        }
    }

    fn writable_only(mut self) -> Denied {
        self.writable_only = true;
        self
    }

    /// Whether this entry refuses a source the box may (or may not) write.
    fn applies(&self, writable: bool) -> bool {
        writable || !self.writable_only
    }
}

/// `p` with its deepest existing ancestor canonicalised and the rest appended, so a denied path
/// that does not exist (yet) is still compared in its resolved spelling.
fn resolve_existing(p: &Path) -> PathBuf {
    let mut base = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(mut c) = std::fs::canonicalize(&base) {
            c.extend(rest.iter().rev());
            return c;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

fn deny_list(ctx: &Context) -> Vec<Denied> {
    let mut list = vec![Denied::new(
        Path::new("/"),
        "the host's root directory".into(),
        // Every path is inside `/`; only `/` itself is refused by this entry.
        false,
        false,
    )];
    for (p, why) in SYSTEM {
        list.push(Denied::new(Path::new(p), why.to_string(), true, true));
    }
    for (p, why) in SYSTEM_WRITABLE {
        list.push(Denied::new(Path::new(p), why.to_string(), true, true).writable_only());
    }
    let tmp = std::env::temp_dir();
    for t in SHARED_TEMP.iter().map(PathBuf::from).chain([tmp]) {
        if t.is_absolute() && !list.iter().any(|d| d.forms[0] == t) {
            let what = "a temporary directory shared by every user and process on the host";
            list.push(Denied::new(&t, what.into(), false, true));
        }
    }
    for home in &ctx.homes {
        // A project inside a home is what mounts are for; the home itself is not.
        list.push(Denied::new(home, "a home directory".into(), false, true));
        for s in HOME_SECRETS {
            list.push(Denied::new(&home.join(s), "credentials".into(), true, true));
        }
    }
    if let Some(store) = &ctx.kern_home {
        let what = "kern's own store ($KERN_HOME: images, the compiled stdlib, the package cache), from which other boxes run";
        list.push(Denied::new(store, what.into(), true, true).writable_only());
    }
    if let Some(run) = &ctx.runtime_dir {
        let what = "the session runtime directory, $XDG_RUNTIME_DIR: session sockets and keys";
        list.push(Denied::new(run, what.into(), true, true));
    }
    let runtime_sockets = ctx
        .runtime_dir
        .iter()
        .flat_map(|r| RUNTIME_SOCKETS.iter().map(move |s| r.join(s)));
    for sock in ENGINE_SOCKETS
        .iter()
        .map(PathBuf::from)
        .chain(runtime_sockets)
    {
        let what = "a container-engine or D-Bus socket: whoever can talk to it controls the host";
        list.push(Denied::new(&sock, what.into(), false, true));
    }
    list
}

/// What a checked host directory is for: the messages name it, and what the box may write
/// meets more of the deny list.
#[derive(Clone, Copy)]
enum Use {
    /// A `mounts` entry, `"rw"` or not.
    Mount { writable: bool },
    /// The workspace: the box and kern write it.
    Workspace,
}

impl Use {
    fn writable(self) -> bool {
        match self {
            Use::Mount { writable } => writable,
            Use::Workspace => true,
        }
    }

    /// The start of a message about `src`.
    fn subject(self, src: &str) -> String {
        match self {
            Use::Mount { .. } => format!("mounts: source {src:?}"),
            Use::Workspace => format!("option `workspace` {src:?}"),
        }
    }

    /// A refusal by the deny list: `it {how} {path} ({what})`.
    fn denied(self, src: &str, shown: &str, how: &str, path: &Path, d: &Denied) -> Error {
        let what = &d.what;
        let path = path.display();
        match self {
            Use::Mount { .. } if d.writable_only => Error::MountRefused(format!(
                "mounts: refused source {src:?}{shown} as \"rw\": it {how} {path} ({what}), \
                 which a box must not write; mount it read-only (\"ro\"), or mount a directory \
                 that holds only what the box needs, such as a project directory"
            )),
            Use::Mount { .. } => Error::MountRefused(format!(
                "mounts: refused source {src:?}{shown}: it {how} {path} ({what}), which must not \
                 be exposed to the box; mount a directory that holds only what the box needs, \
                 such as a project directory, instead"
            )),
            Use::Workspace => Error::MountRefused(format!(
                "option `workspace` {src:?}{shown} is refused: it {how} {path} ({what}), which \
                 the box would read and write (and kern clears every set-id bit in it); pass a \
                 directory of its own, such as a project directory or a new one, or leave \
                 `workspace` out for a temporary one"
            )),
        }
    }
}

/// The first deny-list entry `canon` (a canonical path) is, is inside or contains, by path,
/// with how.
fn denied_by_path<'a>(
    canon: &Path,
    deny: &'a [Denied],
    writable: bool,
) -> Option<(&'static str, &'a Path, &'a Denied)> {
    for d in deny.iter().filter(|d| d.applies(writable)) {
        for f in &d.forms {
            if canon == f.as_path() {
                return Some(("is", f, d));
            }
            if d.inside && canon.starts_with(f) {
                return Some(("is inside", f, d));
            }
            if d.ancestor && f.starts_with(canon) {
                return Some(("contains", f, d));
            }
        }
    }
    None
}

/// The same by identity: a bind mount or hardlink of a denied path has another spelling but the
/// same device and inode. `id` is the source's (None: it does not exist yet), `ancestor_ids`
/// those of the directories above it.
fn denied_by_id<'a>(
    id: Option<Id>,
    ancestor_ids: &[Id],
    deny: &'a [Denied],
    writable: bool,
) -> Option<(&'static str, &'a Path, &'a Denied)> {
    for d in deny.iter().filter(|d| d.applies(writable)) {
        // The path as listed: an alias has no spelling of its own to show.
        let path = d.forms[0].as_path();
        if id.is_some() && d.id == id {
            return Some(("is (by device and inode)", path, d));
        }
        if d.inside && d.id.is_some_and(|i| ancestor_ids.contains(&i)) {
            return Some(("is inside another path to", path, d));
        }
        if d.ancestor && id.is_some_and(|i| d.ancestor_ids.contains(&i)) {
            return Some(("is another path to a directory that contains", path, d));
        }
    }
    None
}

/// The canonical path and stat of a permitted source.
fn check_source(src: &str, deny: &[Denied], use_: Use) -> Result<(PathBuf, FileStat)> {
    let subject = use_.subject(src);
    let refuse = |why: String| Err(Error::MountRefused(format!("{subject} {why}")));
    if src.contains('\0') {
        return refuse("contains a NUL byte; pass a plain absolute host path".into());
    }
    if !src.starts_with('/') {
        return refuse("is relative; pass an absolute path (such as /home/me/project/data)".into());
    }
    let canon = match std::fs::canonicalize(src) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return refuse("does not exist on the host; create it first or fix the path".into())
        }
        Err(e) => {
            return refuse(format!(
                "cannot be resolved ({e}); check the path and its permissions"
            ))
        }
    };
    let shown = if canon.as_os_str() == src {
        String::new()
    } else {
        format!(" (which resolves to {})", canon.display())
    };
    let writable = use_.writable();
    secret_component(src, &shown, &canon, use_)?;
    if let Some((how, path, d)) = denied_by_path(&canon, deny, writable) {
        return Err(use_.denied(src, &shown, how, path, d));
    }

    let fd = crate::fsx::open_no_symlinks(&canon).map_err(|e| match e.errno() {
        Errno::ELOOP => Error::MountRefused(format!(
            "{subject}{shown} changed while it was checked (a symlink appeared in its path); \
             keep it in place and try again"
        )),
        e => Error::MountRefused(format!(
            "{subject}{shown} cannot be opened ({e}); check that it still exists"
        )),
    })?;
    let st = fstat(&fd)
        .map_err(|e| Error::MountRefused(format!("{subject}{shown}: fstat failed ({e})")))?;
    let k = kind(&st);
    if k != SFlag::S_IFDIR && k != SFlag::S_IFREG {
        let name = match k {
            SFlag::S_IFSOCK => "a socket",
            SFlag::S_IFIFO => "a fifo",
            SFlag::S_IFCHR => "a character device",
            SFlag::S_IFBLK => "a block device",
            _ => "a special file",
        };
        return Err(Error::MountRefused(format!(
            "{subject}{shown} is {name}; only directories and regular files can be mounted"
        )));
    }

    let id = id_of(&st);
    let ancestor_ids: Vec<Id> = canon.ancestors().skip(1).filter_map(stat_id).collect();
    if let Some((how, path, d)) = denied_by_id(Some(id), &ancestor_ids, deny, writable) {
        return Err(use_.denied(src, &shown, how, path, d));
    }

    if k == SFlag::S_IFDIR {
        if let Some(sock) = find_socket(&fd, &canon, id) {
            let refused = match use_ {
                Use::Mount { .. } => format!("mounts: refused source {src:?}"),
                Use::Workspace => format!("option `workspace` {src:?} is refused"),
            };
            return Err(Error::MountRefused(format!(
                "{refused}{shown}: it contains the socket {}, which may be a container-engine or \
                 D-Bus socket (whoever can talk to it controls the host); use a directory \
                 without it, or move the socket elsewhere",
                canon.join(sock).display()
            )));
        }
    }
    Ok((canon, st))
}

/// Refuses a path through a directory named like a credential store, whoever's home it is in.
fn secret_component(src: &str, shown: &str, canon: &Path, use_: Use) -> Result<()> {
    let Some(c) = canon.components().find_map(|c| match c {
        Component::Normal(n) => SECRET_COMPONENTS.iter().find(|s| OsStr::new(s) == n),
        _ => None,
    }) else {
        return Ok(());
    };
    // Named, not a place: nothing to stat.
    let d = Denied {
        what: "credentials, whoever's home it is in".into(),
        forms: vec![PathBuf::from(c)],
        id: None,
        ancestor_ids: Vec::new(),
        inside: false,
        ancestor: false,
        writable_only: false,
    };
    Err(use_.denied(
        src,
        shown,
        "goes through a directory named",
        Path::new(c),
        &d,
    ))
}

/// Checks a `workspace` before anything is made: a directory of its own, clear of what the
/// policy denies to a writable bind (see the module doc). One that does not exist yet is
/// checked where it would be created (its deepest existing ancestor, resolved, and the rest);
/// what is there and is not a directory is `workspace::look_at`'s to refuse. The host's homes
/// and runtime directory are read here (`Context::from_host`).
pub fn check_workspace(path: &Path) -> Result<()> {
    check_workspace_in(path, &Context::from_host(""))
}

/// `check_workspace` against a given host (the workspace's box path plays no part).
fn check_workspace_in(path: &Path, ctx: &Context) -> Result<()> {
    let src = path.to_string_lossy();
    let deny = deny_list(ctx);
    match crate::workspace::look_at(path)? {
        crate::workspace::Found::Dir => check_source(&src, &deny, Use::Workspace).map(|_| ()),
        crate::workspace::Found::Missing => {
            let canon = resolve_existing(path);
            let shown = if canon == path {
                String::new()
            } else {
                format!(" (which resolves to {})", canon.display())
            };
            secret_component(&src, &shown, &canon, Use::Workspace)?;
            if let Some((how, p, d)) = denied_by_path(&canon, &deny, true) {
                return Err(Use::Workspace.denied(&src, &shown, how, p, d));
            }
            // It would be made inside its deepest existing ancestor: that one, and the
            // directories above it, are its ancestors.
            let ancestor_ids: Vec<Id> = canon.ancestors().skip(1).filter_map(stat_id).collect();
            if let Some((how, p, d)) = denied_by_id(None, &ancestor_ids, &deny, true) {
                return Err(Use::Workspace.denied(&src, &shown, how, p, d));
            }
            Ok(())
        }
    }
}

/// A socket with an engine or bus name: `bus`, `system_bus_socket`, or `*.sock` (which covers
/// `docker.sock`, `podman.sock`, `containerd.sock`, `crio.sock` and `*-docker.sock`).
fn engine_socket_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    b == b"bus" || b == b"system_bus_socket" || b.ends_with(b".sock")
}

/// The first engine-named socket within `SCAN_DEPTH` levels of the directory `fd`, relative to
/// it. Never follows symlinks (see `walk`); stops after `SCAN_MAX_ENTRIES` entries without
/// refusing; directories it cannot open are skipped.
fn find_socket(fd: &OwnedFd, canon: &Path, id: Id) -> Option<PathBuf> {
    // Through our fd's /proc link the scan reads the very directory that was checked; the path
    // is the fallback when /proc is not mounted.
    let via_fd = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let root = if stat_id(&via_fd) == Some(id) {
        via_fd
    } else {
        canon.to_path_buf()
    };
    let mut found = None;
    walk::walk(&root, SCAN_MAX_ENTRIES, |e| {
        if found.is_some() {
            return false;
        }
        let is_sock = SFlag::from_bits_truncate(e.stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFSOCK;
        if is_sock && e.rel.file_name().is_some_and(engine_socket_name) {
            found = Some(e.rel.to_path_buf());
            return false;
        }
        e.rel.components().count() < SCAN_DEPTH
    });
    found
}

/// Checks a mount target against the image it will be mounted in: below the top level (where
/// kern makes the mount point itself), every component the image has must be a real directory,
/// and the last one the kind of the source, none of them a symlink: the image's symlinks are
/// never followed to find a target. What the image lacks is made in the box, never in the image
/// (a read-only tmpfs masks the deepest directory it has, with its entries bound back).
pub fn check_target_in_image(image: &Path, target: &str, dir: bool) -> Result<()> {
    target_in_image(image, target, dir).map_err(|why| {
        Error::MountRefused(format!(
            "mount target {target}: {why}. Mount at the path it points to, or at a new directory such as /data"
        ))
    })
}

/// What is wrong with `target` in the image (see `check_target_in_image`), if anything.
pub fn target_in_image(image: &Path, target: &str, dir: bool) -> std::result::Result<(), String> {
    let parts: Vec<&str> = target.trim_start_matches('/').split('/').collect();
    if parts.len() <= 1 {
        return Ok(());
    }
    let mut cur = image.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        cur.push(part);
        let shown = parts[..=i].join("/");
        let want_dir = i + 1 < parts.len() || dir;
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "/{shown} is a symlink in the image; targets are never reached through the image's symlinks"
                ))
            }
            Ok(m) if (want_dir && m.is_dir()) || (!want_dir && m.is_file()) => {}
            Ok(_) => {
                let kind = if want_dir { "directory" } else { "regular file" };
                return Err(format!("/{shown} is not a {kind} in the image"));
            }
            // Missing from here down: made in the box, under a mask of the parent's entries.
            Err(_) => {
                let max = crate::engine::boxside::mountpoint::MAX_MASKED_ENTRIES;
                let parent = cur.parent().unwrap_or(image);
                let many = std::fs::read_dir(parent).map_or(0, |d| d.take(max + 1).count());
                if i > 0 && many > max {
                    return Err(format!(
                        "/{} has more than {max} entries in the image, each of which would be a mount in every box to make /{shown} beside them; pick a path under a smaller directory, or make it in the image",
                        parts[..i].join("/")
                    ));
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
