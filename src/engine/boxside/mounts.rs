//! Builds the box's mount tree inside its new mount namespace and pivots into it. Runs in the
//! box's PID 1 before anything of the workload exists.
//!
//! Order matters: sources are reached through fds opened before any mount (so mounting the
//! skeleton over the host's `/tmp` can't hide a workspace that lives there), every mount target
//! is a path we created ourselves in our own tmpfs, and the workspace is mounted last of the
//! binds so nothing is ever mounted beneath a directory the box can write.

use super::mountpoint::make_mount_point;
use super::rootfs::{Entry, RootPlan};
use crate::engine::plan::{self, pid1};
use crate::engine::shared::spec::{BindSpec, BoxSpec, DeviceSpec, Resident, TmpfsSpec};
use crate::engine::shared::sys::{
    self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{symlink, DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the skeleton is assembled before the pivot. Any existing directory works: it is only
/// shadowed inside the box's own mount namespace, and sources are reached through fds.
const STAGE: &str = "/tmp";
/// Where an image tree from the monitor is attached while its entries are bound (the host's
/// `/mnt`, shadowed only in the box's namespace).
const IMAGE_STAGE: &str = "/mnt";

const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// A failed setup step, with what was being done.
#[derive(Debug)]
pub struct SetupError(pub String);

trait Ctx<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, SetupError>;
}
impl<T, E: std::fmt::Display> Ctx<T> for Result<T, E> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, SetupError> {
        self.map_err(|e| SetupError(format!("{}: {e}", what())))
    }
}

/// Carries out `pid1`'s steps here (what every box's PID 1 does, written once in `plan`).
fn run(ops: &[plan::Op]) -> Result<(), SetupError> {
    plan::run::run(ops, &mut plan::run::Saved::default()).map_err(|e| SetupError(e.to_string()))
}

/// Detached mount trees the monitor made for the box (as root: idmapped through the box's
/// user namespace). Without them the box binds the paths itself.
#[derive(Debug, Default)]
pub struct Trees {
    pub workspace: Option<OwnedFd>,
    pub image: Option<OwnedFd>,
    /// One per `spec.binds`, in order (as root); empty otherwise.
    pub binds: Vec<OwnedFd>,
}

/// What `kern` prepared before the clone: the root plan and the workspace path.
pub struct Sources {
    pub plan: RootPlan,
    pub workspace: PathBuf,
}

fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

pub(super) fn mkdir(path: &Path, mode: u32) -> Result<(), SetupError> {
    match fs::DirBuilder::new().mode(mode).create(path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            Err(SetupError(format!("mkdir {}: {e}", path.display())))
        }
        _ => Ok(()),
    }
}

pub(super) fn touch(path: &Path) -> Result<(), SetupError> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .map(drop)
        .ctx(|| format!("create {}", path.display()))
}

fn bind(source: &Path, target: &Path, attrs: u64) -> Result<(), SetupError> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .ctx(|| format!("bind {} on {}", source.display(), target.display()))?;
    let t = target.to_str().unwrap_or_default();
    sys::mount_setattr(t, attrs, true).ctx(|| format!("set flags on {}", target.display()))
}

/// Creates the mount point (a directory or an empty file) in our own tmpfs, then binds.
pub(super) fn bind_new(
    source: &Path,
    target: &Path,
    dir: bool,
    attrs: u64,
) -> Result<(), SetupError> {
    if dir {
        mkdir(target, 0o755)?;
    } else {
        touch(target)?;
    }
    bind(source, target, attrs)
}

/// Makes the directory `target` in our own tmpfs and mounts a fresh tmpfs on it.
fn new_tmpfs(target: &Path, size: u64, mode: u32, flags: MsFlags) -> Result<(), SetupError> {
    mkdir(target, mode)?;
    tmpfs(target, size, mode, flags)
}

fn tmpfs(target: &Path, size: u64, mode: u32, flags: MsFlags) -> Result<(), SetupError> {
    let data = format!("size={size},mode={mode:o}");
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        flags,
        Some(data.as_str()),
    )
    .ctx(|| format!("mount tmpfs on {}", target.display()))
}

/// Builds the whole tree and pivots into it; on return the process's root is the box's root
/// and its cwd is the workspace.
pub fn build(spec: &BoxSpec, src: &Sources, trees: &Trees) -> Result<(), SetupError> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    // Nothing we mount may propagate back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .ctx(|| "make / private".into())?;
    // Sources are opened here, in the box's mount namespace (a bind from an fd of another
    // namespace is refused), and before the stage can hide them. The monitor's trees are
    // attached first for the same reason, under a private staging directory.
    let image_fd = match (&trees.image, &src.plan.image) {
        (Some(tree), _) => {
            let at = format!("{IMAGE_STAGE}/image");
            tmpfs(
                Path::new(IMAGE_STAGE),
                4096,
                0o700,
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            )?;
            mkdir(Path::new(&at), 0o755)?;
            sys::move_mount_to(tree.as_fd(), &at).ctx(|| "attach the image".into())?;
            Some(open_dir(Path::new(&at)).ctx(|| "open the image".into())?)
        }
        (None, Some(p)) => Some(open_dir(p).ctx(|| format!("open the image {}", p.display()))?),
        (None, None) => None,
    };
    let workspace_fd = match &trees.workspace {
        Some(_) => None,
        None => Some(
            open_dir(&src.workspace)
                .ctx(|| format!("open the workspace {}", src.workspace.display()))?,
        ),
    };
    let bind_fds = if trees.binds.is_empty() {
        spec.binds
            .iter()
            .map(open_bind_source)
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    // Devices too: a node the caller made under /tmp would be hidden by the stage.
    let device_fds = spec
        .devices
        .iter()
        .map(open_device)
        .collect::<Result<Vec<_>, _>>()?;
    let root = Path::new(STAGE);
    tmpfs(root, 1 << 20, 0o755, nosuid_nodev)?;

    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    let etc = root.join("etc");
    for entry in &src.plan.entries {
        match entry {
            Entry::Bind { name, source, dir } => match &image_fd {
                // Reach the image entry through the image fd (its path may be hidden by now),
                // opened without following it: an entry swapped for a symlink since the plan
                // was made is refused, never followed to a host path.
                Some(image) => {
                    let entry = open_entry(image, name, *dir)?;
                    bind_new(&fd_path(&entry), &root.join(name), *dir, ro)?;
                }
                None => bind_new(source, &root.join(name), *dir, ro)?,
            },
            Entry::Symlink { name, target } => {
                symlink(target, root.join(name)).ctx(|| format!("symlink /{name}"))?;
            }
            Entry::EtcFile { name, contents } => {
                mkdir(&etc, 0o755)?;
                fs::write(etc.join(name), contents).ctx(|| format!("write /etc/{name}"))?;
            }
            Entry::EtcBind { name, source, dir } => {
                mkdir(&etc, 0o755)?;
                bind_new(source, &etc.join(name), *dir, ro)?;
            }
            Entry::EtcImage { name, dir } => {
                mkdir(&etc, 0o755)?;
                let Some(image) = &image_fd else {
                    return Err(SetupError(format!("/etc/{name}: no image to take it from")));
                };
                let entry = open_entry(image, &format!("etc/{name}"), *dir)?;
                bind_new(&fd_path(&entry), &etc.join(name), *dir, ro)?;
            }
            Entry::EtcSymlink { name, target } => {
                mkdir(&etc, 0o755)?;
                symlink(target, etc.join(name)).ctx(|| format!("symlink /etc/{name}"))?;
            }
            Entry::Mask { path, keep } => mask(&root.join(path), keep, ro)?,
        }
    }

    build_dev(root, &spec.devices, &device_fds)?;
    // Whose insides are not the image's: nothing is made in them (`make_mount_point`).
    let others: Vec<&str> = (spec.tmpfs.iter().map(|t| t.target.as_str()))
        .chain(spec.binds.iter().map(|b| b.target.as_str()))
        .collect();
    for t in &spec.tmpfs {
        mount_scratch(root, t, &others)?;
    }

    for (i, b) in spec.binds.iter().enumerate() {
        let target = root.join(b.target.trim_start_matches('/'));
        make_mount_point(root, &target, b.dir, &others)?;
        let attrs = if b.writable {
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
        } else {
            ro
        };
        match (trees.binds.get(i), bind_fds.get(i)) {
            // The monitor's tree already carries its flags (and the idmapping).
            (Some(tree), _) => {
                sys::move_mount_to(tree.as_fd(), target.to_str().unwrap_or_default())
                    .ctx(|| format!("attach {} at {}", b.source.display(), b.target))?
            }
            (None, Some(fd)) => bind(&fd_path(fd), &target, attrs)?,
            (None, None) => {
                return Err(SetupError(format!("no source for the mount {}", b.target)))
            }
        }
    }

    let ws = root.join(spec.workspace_target.trim_start_matches('/'));
    make_mount_point(root, &ws, true, &others)?;
    match (&trees.workspace, &workspace_fd) {
        (Some(tree), _) => sys::move_mount_to(tree.as_fd(), ws.to_str().unwrap_or_default())
            .ctx(|| "attach the workspace".into())?,
        (None, Some(fd)) => bind(&fd_path(fd), &ws, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)?,
        (None, None) => return Err(SetupError("no workspace to mount".into())),
    }
    for rel in &spec.readonly_in_workspace {
        readonly_subdir(&ws, &spec.workspace_target, rel)?;
    }
    if trees.image.is_some() {
        // The binds hold the image now; the staging mount leaves with the old root anyway,
        // but nothing should keep it reachable in between.
        drop(image_fd);
        umount2(IMAGE_STAGE, MntFlags::MNT_DETACH).ctx(|| "detach the image stage".into())?;
    }

    // A resident box's calls share its PID namespace: each sees only the processes it may
    // trace, which, each call being in its own Landlock domain, are its own.
    build_proc(root, matches!(spec.resident, Some(Resident::Start { .. })))?;
    if spec.serves_zygote {
        unmasked_proc_out_of_reach(root)?;
    }

    // The skeleton itself becomes read-only: the box can't add files next to /usr.
    sys::mount_setattr(STAGE, MOUNT_ATTR_RDONLY, false).ctx(|| "make the root read-only".into())?;
    pivot(root)?;
    std::env::set_current_dir(&spec.workspace_target)
        .ctx(|| format!("chdir {}", spec.workspace_target))?;
    // A cwd that escaped the new root would show up as unreachable (CVE-2024-21626).
    let cwd = std::env::current_dir().ctx(|| "getcwd".into())?;
    if cwd != Path::new(&spec.workspace_target) {
        return Err(SetupError(format!(
            "cwd is {} after chdir, not {}",
            cwd.display(),
            spec.workspace_target
        )));
    }
    Ok(())
}

/// An empty tmpfs over `at` (hiding what a bind put there), with only `keep` bound back, made
/// read-only once they are in place.
fn mask(at: &Path, keep: &[Entry], ro: u64) -> Result<(), SetupError> {
    tmpfs(at, 64 << 10, 0o755, MsFlags::MS_NOSUID | MsFlags::MS_NODEV)?;
    for k in keep {
        match k {
            Entry::Bind { name, source, dir } => bind_new(source, &at.join(name), *dir, ro)?,
            Entry::Symlink { name, target } => symlink(target, at.join(name))
                .ctx(|| format!("symlink {name} in {}", at.display()))?,
            _ => {
                return Err(SetupError(format!(
                    "{}: only binds and symlinks are kept",
                    at.display()
                )))
            }
        }
    }
    sys::mount_setattr(at.to_str().unwrap_or_default(), MOUNT_ATTR_RDONLY, false)
        .ctx(|| format!("make {} read-only", at.display()))
}

fn mount_scratch(root: &Path, t: &TmpfsSpec, others: &[&str]) -> Result<(), SetupError> {
    let target = root.join(t.target.trim_start_matches('/'));
    make_mount_point(root, &target, true, others)?;
    run(&[pid1::scratch(&path_str(&target)?, t.size_bytes)])
}

/// A path this module made, as the `str` a plan step takes.
fn path_str(p: &Path) -> Result<String, SetupError> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| SetupError(format!("not UTF-8: {}", p.display())))
}

fn build_dev(root: &Path, devices: &[DeviceSpec], fds: &[OwnedFd]) -> Result<(), SetupError> {
    let dev = root.join("dev");
    new_tmpfs(
        &dev,
        64 << 10,
        0o755,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
    )?;
    for node in DEV_NODES {
        let target = dev.join(node);
        touch(&target)?;
        // Bind the host's node: mknod is impossible in a user namespace, and a node we bind from
        // the host's /dev can't have been swapped for a symlink by the image.
        bind(
            &Path::new("/dev").join(node),
            &target,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
        )?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        symlink(target, dev.join(name)).ctx(|| format!("symlink /dev/{name}"))?;
    }
    let pts = dev.join("pts");
    mkdir(&pts, 0o755)?;
    let shm = dev.join("shm");
    mkdir(&shm, 0o1777)?;
    run(&[pid1::devpts(&path_str(&pts)?), pid1::shm(&path_str(&shm)?)])?;
    for (d, fd) in devices.iter().zip(fds) {
        bind_device(root, d, fd)?;
    }
    sys::mount_setattr(dev.to_str().unwrap_or_default(), MOUNT_ATTR_RDONLY, false)
        .ctx(|| "make /dev read-only".into())
}

/// The box's /proc; `masked`: with Docker's masked and read-only paths (every box but a zygote's).
/// Where a zygote's box keeps a /proc nobody in it can enter (see `unmasked_proc_out_of_reach`).
pub const ZYGOTE_PROC_ANCHOR: &str = ".kern-proc";

/// A zygote's box: its /proc is masked as any box's, but the kernel mounts a call's own /proc
/// (its PID namespace's) only where a /proc of the mount namespace is fully visible, with
/// nothing locked over a file or a non-empty directory of it. So one more /proc, unmasked, is
/// mounted under a directory of mode 000 on the read-only root: the zygote and a call's
/// workload (no capabilities; the root can't be made writable again to chmod it) can't enter
/// it; only a call's C and P, which run our plans only, hold the capability that could.
fn unmasked_proc_out_of_reach(root: &Path) -> Result<(), SetupError> {
    use std::os::unix::fs::PermissionsExt;
    let anchor = root.join(ZYGOTE_PROC_ANCHOR);
    mkdir(&anchor, 0o700)?;
    let at = anchor.join("p");
    mkdir(&at, 0o555)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), &at, Some("proc"), flags, None::<&str>)
        .ctx(|| "mount the zygote's unmasked /proc".into())?;
    fs::set_permissions(&anchor, fs::Permissions::from_mode(0o000))
        .map_err(|e| SetupError(format!("chmod {}: {e}", anchor.display())))
}

fn build_proc(root: &Path, hide_others: bool) -> Result<(), SetupError> {
    let proc_dir = root.join("proc");
    mkdir(&proc_dir, 0o555)?;
    let dir = path_str(&proc_dir)?;
    run(&[pid1::proc(&dir, hide_others)])?;
    // What this box's new /proc has (the masks cover only what is there).
    let null = path_str(&root.join("dev/null"))?;
    run(&pid1::proc_masks(&dir, &null, |name| {
        pid1::proc_kind_at(&dir, name)
    }))
}

/// `pivot_root(".", ".")` then detach the old root: the host's tree is unreachable afterwards.
fn pivot(root: &Path) -> Result<(), SetupError> {
    std::env::set_current_dir(root).ctx(|| "chdir to the new root".into())?;
    nix::unistd::pivot_root(".", ".").ctx(|| "pivot_root".into())?;
    umount2(".", MntFlags::MNT_DETACH).ctx(|| "detach the old root".into())?;
    std::env::set_current_dir("/").ctx(|| "chdir /".into())
}

/// Opens `name` in the image as O_PATH without following it, and checks it is still the kind
/// of entry (directory or regular file) the plan saw.
fn open_entry(image: &OwnedFd, name: &str, dir: bool) -> Result<OwnedFd, SetupError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    let fd = openat(
        image,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ctx(|| format!("open /{name} in the image"))?;
    let kind = SFlag::from_bits_truncate(
        fstat(&fd)
            .ctx(|| format!("stat /{name} in the image"))?
            .st_mode,
    ) & SFlag::S_IFMT;
    let want = if dir { SFlag::S_IFDIR } else { SFlag::S_IFREG };
    if kind != want {
        return Err(SetupError(format!(
            "/{name} in the image changed while the box was being built"
        )));
    }
    Ok(fd)
}

/// Opens a bind's source again, without following symlinks, and checks it is the inode the
/// caller checked: a source swapped since (for a symlink to something the caller would have
/// refused) is never mounted.
fn open_bind_source(b: &BindSpec) -> Result<OwnedFd, SetupError> {
    let what = || format!("open the mount source {}", b.source.display());
    let fd = open_no_follow(&b.source).ctx(what)?;
    let st = nix::sys::stat::fstat(&fd).ctx(what)?;
    if st.st_dev != b.dev || st.st_ino != b.ino {
        return Err(SetupError(format!(
            "the mount source {} changed after it was checked; refusing to mount it",
            b.source.display()
        )));
    }
    Ok(fd)
}

/// Opens `source` as O_PATH from `/` with no symlink (or magic link) anywhere in it.
fn open_no_follow(source: &Path) -> io::Result<OwnedFd> {
    crate::fsx::open_no_symlinks(source).map_err(|e| io::Error::from(e.errno()))
}

/// Opens a `vgpio` device node again, without following symlinks, and checks it is still the
/// character device the caller checked (same inode, same device number).
fn open_device(d: &DeviceSpec) -> Result<OwnedFd, SetupError> {
    use nix::sys::stat::SFlag;
    let what = || format!("open the device {}", d.source.display());
    let fd = open_no_follow(&d.source).ctx(what)?;
    let st = nix::sys::stat::fstat(&fd).ctx(what)?;
    let chr = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    if !chr || st.st_dev != d.dev || st.st_ino != d.ino || st.st_rdev != d.rdev {
        return Err(SetupError(format!(
            "the device {} changed after it was checked; refusing to bind it",
            d.source.display()
        )));
    }
    Ok(fd)
}

/// Binds one checked device node at its place under the box's `/dev` (our own tmpfs). No
/// `nodev` on it: the node is the point. The target must be new, so a device can never shadow
/// one of the box's own nodes.
fn bind_device(root: &Path, d: &DeviceSpec, fd: &OwnedFd) -> Result<(), SetupError> {
    let rel = d.target.strip_prefix("/dev/").unwrap_or_default();
    if rel.is_empty()
        || rel
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(SetupError(format!(
            "device target {:?} is not a normalised path under /dev",
            d.target
        )));
    }
    let parts: Vec<&str> = rel.split('/').collect();
    let Some((name, dirs)) = parts.split_last() else {
        return Err(SetupError(format!("device target {:?} is empty", d.target)));
    };
    let mut target = root.join("dev");
    // Parent directories are made here, one by one, and never reached through one of /dev's
    // symlinks (`fd` points into /proc).
    for dir in dirs {
        target.push(dir);
        mkdir(&target, 0o755)?;
        if !fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
            return Err(SetupError(format!(
                "device target {}: {} is not a directory of the box's /dev",
                d.target,
                target.display()
            )));
        }
    }
    target.push(name);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&target)
        .map(drop)
        .ctx(|| format!("create the mount point for the device {}", d.target))?;
    bind(&fd_path(fd), &target, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC)
}

/// Mounts `ws/rel` read-only over itself, reached through an fd opened without following
/// symlinks, so a box that swapped the directory for a symlink can't redirect the mount.
/// `shown`: where the box sees `ws`, for messages.
fn readonly_subdir(ws: &Path, shown: &str, rel: &str) -> Result<(), SetupError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let ws_fd = open_dir(ws).ctx(|| "open the workspace".into())?;
    let fd = match openat(
        &ws_fd,
        rel,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => return Ok(()),
        Err(e) => {
            return Err(SetupError(format!(
                "{shown}/{rel} is not a real directory ({e}); it is mounted read-only, so replace it with the directory `setup` made or turn depsReadonly off"
            )))
        }
    };
    let tree = sys::open_tree_clone_fd(fd.as_fd(), true).ctx(|| format!("clone {shown}/{rel}"))?;
    sys::mount_setattr_fd(
        tree.as_fd(),
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        None,
    )
    .ctx(|| format!("make {shown}/{rel} read-only"))?;
    sys::move_mount_to_fd(tree.as_fd(), fd.as_fd()).ctx(|| format!("mount {shown}/{rel} read-only"))
}

/// Opens a directory as an O_PATH fd for `Sources`.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path)?;
    Ok(f.into())
}
