//! `pycCache`: the image's Python library byte-compiled once per image into the store, then
//! mounted read-only in every box, where a small import hook makes python read the image's own
//! modules' bytecode from it.
//!
//! Why: the box root is read-only, so an image that ships without `.pyc` files (the official
//! `python:*` images delete them) makes every interpreter start recompile each stdlib module it
//! imports, and throw the result away. The cache is built in the background after the first
//! `open()` of an image: calls made before it is ready start without it, and later ones with it.
//!
//! The cache is shared by every later Sandbox of the image (across users, with a shared
//! `KERN_HOME`), so it is built from the image alone: a box of the image with an empty private
//! workspace of its own, as box root with no capabilities, no mounts, no network, running
//! `python3 -I` (no environment variables, no user site, no cwd on the import path), so that
//! nothing any box wrote can run in it. It writes into a private temporary directory that is
//! checked (directories and regular files only), sealed (files 0444, directories 0555) and
//! published by an atomic rename only when complete; boxes get it mounted read-only.
//!
//! In a box, `PYTHONPATH` leads to the hook (`pyc_hook.py`, run as `sitecustomize`, which then
//! runs the image's own): it maps `<dir>/__pycache__/<name>` of the image's directories to the
//! cache, and nothing else. `sys.pycache_prefix` stays unset, so the bytecode of any other code
//! (the workspace, `/tmp`, `py_compile`, `compileall`) is written where python writes it
//! without the cache.

use crate::engine::addon::capture::Keep;
use crate::engine::addon::launch::Kern;
use crate::engine::shared::spec::{BindSpec, BoxSpec, DEFAULT_WORKSPACE_TARGET};
use crate::engine::shared::status::FaultKind;
use crate::error::{Error, Result};
use crate::image::store::Store;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Where the cache appears in the box.
pub const TARGET: &str = "/.kern-pyc";
/// The hook's directory in the box, put first on `PYTHONPATH`.
pub const HOOK_DIR: &str = "/.kern-pyc/hook";
/// The hook, installed as `hook/sitecustomize.py` in the cache.
const HOOK: &str = include_str!("pyc_hook.py");
/// The published cache under the image's key. Earlier versions published `ready`, built with
/// the opening Sandbox's workspace as cwd (poisonable): it is never used, and removed when this
/// one is published. (`sealed-2`, never released, lacked the hook's own bytecode.)
const PUBLISHED: &str = "sealed-3";
/// The builder's wall-clock limit.
const BUILD_TIMEOUT_MS: u64 = 300_000;

/// Fills `<prefix>/<dir>/<name>.<tag>.pyc` for every module of the image's own `sys.path` (under
/// `-I`: no workspace, no `.deps`, no PYTHONPATH): a `.pyc` the image already ships is copied
/// (python still checks it against its source at import), one it lacks is compiled. Test
/// suites are skipped: nobody imports them, and they are half the stdlib.
const BUILD_SCRIPT: &str = r#"
import importlib.util, os, py_compile, re, shutil, sys
prefix = sys.pycache_prefix
skip = re.compile(r'/(test|tests|idle_test|idlelib|tkinter|turtledemo|lib2to3)/')
copied = compiled = failed = 0
seen = set()
for top in sys.path:
    if not top or not os.path.isdir(top) or top.startswith(('/workspace', '/tmp', '/.kern-pyc')):
        continue
    for dirpath, dirnames, filenames in os.walk(top):
        if skip.search(dirpath + '/') or dirpath in seen:
            dirnames[:] = []
            continue
        seen.add(dirpath)
        dirnames[:] = [d for d in dirnames if d != '__pycache__']
        for f in filenames:
            if not f.endswith('.py'):
                continue
            src = os.path.join(dirpath, f)
            sys.pycache_prefix = None
            shipped = importlib.util.cache_from_source(src)
            sys.pycache_prefix = prefix
            dest = importlib.util.cache_from_source(src)
            try:
                if os.path.isfile(shipped):
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    shutil.copyfile(shipped, dest)
                    copied += 1
                else:
                    py_compile.compile(src, cfile=dest, doraise=True)
                    compiled += 1
            except Exception:
                failed += 1
# kern's hook (written by the host before this box), beside itself as python would put it.
hook = '/.kern-pyc/hook/sitecustomize.py'
sys.pycache_prefix = None
py_compile.compile(hook, cfile=importlib.util.cache_from_source(hook), doraise=True)
print(f'copied {copied}, compiled {compiled}, failed {failed}')
"#;
/// Compiles the python driver (`driver.py`, written by the host beside it) with the image's
/// python, as `python3 -c` would compile it, to `driver.code`: its magic number and marshalled
/// code, what `sources::PY_LOADER` reads.
const DRIVER_SCRIPT: &str = r#"
import importlib.util, marshal
with open('/.kern-pyc/driver.py', encoding='utf-8') as f:
    code = compile(f.read(), '<string>', 'exec', dont_inherit=True)
with open('/.kern-pyc/driver.code', 'wb') as f:
    f.write(importlib.util.MAGIC_NUMBER + marshal.dumps(code))
"#;
/// The largest compiled driver read back (it is 78 KB).
const MAX_DRIVER_CODE: u64 = 4 << 20;

/// The cache of one image: where it lives and whether it is built.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    /// What a python driver's channel carries first, with the driver compiled by this image's
    /// python, once that is built (read once).
    start: Arc<OnceLock<Arc<Vec<u8>>>>,
}

impl Cache {
    /// The cache for `image`'s root, or None where there is nothing to cache: the host image
    /// (the host's python already has its compiled stdlib, written by its package manager).
    pub fn for_image(image: &crate::image::Image) -> Result<Option<Cache>> {
        let Some(key) = image
            .identity()
            .map_err(|e| Error::Runtime(format!("stat the image's root: {e}")))?
        else {
            return Ok(None);
        };
        Ok(Some(Cache {
            dir: Store::default_root()?.join("pyc").join(key),
            start: Default::default(),
        }))
    }

    fn ready_dir(&self) -> PathBuf {
        self.dir.join(PUBLISHED)
    }

    /// The read-only bind of a built cache, or None while it is not built (or can't be).
    pub fn bind(&self) -> Option<BindSpec> {
        let ready = self.ready_dir();
        let m = std::fs::symlink_metadata(&ready).ok()?;
        // Published caches are sealed; one that is writable was not made by us.
        if !m.is_dir() || m.mode() & 0o222 != 0 {
            return None;
        }
        Some(BindSpec {
            source: ready,
            target: TARGET.into(),
            writable: false,
            dir: true,
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Why an earlier build failed, if it did (recorded so it isn't retried by every session).
    pub fn failure(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("failed")).ok()
    }

    /// The compiled driver of this build (`sources::driver_id`), once built.
    fn driver_path(&self) -> PathBuf {
        self.dir
            .join(format!("driver-{}.code", crate::lang::sources::driver_id()))
    }

    /// Why the driver's compile failed, for a reason of the image's (so it isn't retried).
    fn driver_failure(&self) -> PathBuf {
        self.dir.join(format!(
            "driver-{}.failed",
            crate::lang::sources::driver_id()
        ))
    }

    /// Whether `build_driver` has something to do.
    pub fn needs_driver(&self) -> bool {
        self.failure().is_none() && !self.driver_path().exists() && !self.driver_failure().exists()
    }

    /// What a python driver's channel carries first (`sources::python_start`) with the driver
    /// as this image's python compiled it; None until that is built. Read once: a regular
    /// file of ours that nobody can write, as `build_driver` leaves it.
    pub fn python_start(&self) -> Option<Arc<Vec<u8>>> {
        if let Some(s) = self.start.get() {
            return Some(s.clone());
        }
        let code = read_sealed(&self.driver_path(), MAX_DRIVER_CODE)?;
        Some(
            self.start
                .get_or_init(|| Arc::new(crate::lang::sources::python_start(Some(&code))))
                .clone(),
        )
    }

    /// The lock two sessions building the same image's cache take in turn.
    async fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::Runtime(format!("create {}: {e}", self.dir.display())))?;
        let lock = std::fs::File::create(self.dir.join("lock"))
            .map_err(|e| Error::Runtime(format!("pyc lock: {e}")))?;
        tokio::task::spawn_blocking(move || {
            nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|_| ())
        })
        .await
        .map_err(|e| Error::Runtime(format!("pyc lock: {e}")))?
        .map_err(|_| Error::Runtime("cannot lock the pyc cache".into()))
    }

    /// Builds the cache unless it is built or failed before. Two sessions never build the same
    /// cache at once (a lock file); the result appears by an atomic rename.
    /// `cancel` turning true (the session closing) ends the build without recording a failure.
    pub async fn build(
        &self,
        kern: &Path,
        template: BoxSpec,
        cancel: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        if self.bind().is_some() || self.failure().is_some() {
            return Ok(());
        }
        let lock = self.lock().await?;
        if self.bind().is_some() || self.failure().is_some() {
            return Ok(());
        }
        let argv = [
            "-X".to_string(),
            format!("pycache_prefix={TARGET}/lib"),
            "-c".into(),
            BUILD_SCRIPT.into(),
        ];
        // The hook goes in first, so the builder compiles it too: compiling it at every python
        // start (its directory is read-only in boxes) cost 2 ms.
        let run = Builder {
            kern,
            template,
            argv: &argv,
            failed: self.dir.join("failed"),
            cancel,
        };
        let out = self.run_builder(run, install_hook).await?;
        let published = seal(out.path()).and_then(|()| {
            std::fs::rename(out.path(), self.ready_dir())
                .map_err(|e| Error::Runtime(format!("publish the pyc cache: {e}")))
        });
        discard(out);
        published?;
        // The unsealed cache of earlier versions goes.
        let old = self.dir.join("ready");
        if std::fs::symlink_metadata(&old).is_ok_and(|m| m.is_dir()) {
            crate::workspace::make_deletable(&old);
            let _ = std::fs::remove_dir_all(&old);
        }
        drop(lock);
        Ok(())
    }

    /// Compiles this build's python driver with the image's python (`DRIVER_SCRIPT`), unless
    /// done or failed before; published as a 0444 file by an atomic rename. As `build`, in a
    /// builder box that sees nothing any box wrote.
    pub async fn build_driver(
        &self,
        kern: &Path,
        template: BoxSpec,
        cancel: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        if !self.needs_driver() {
            return Ok(());
        }
        let lock = self.lock().await?;
        if !self.needs_driver() {
            return Ok(());
        }
        let argv = ["-c".to_string(), DRIVER_SCRIPT.into()];
        let run = Builder {
            kern,
            template,
            argv: &argv,
            failed: self.driver_failure(),
            cancel,
        };
        let out = self
            .run_builder(run, |out| {
                std::fs::write(out.join("driver.py"), crate::lang::sources::DRIVER)
                    .map_err(|e| Error::Runtime(format!("write the driver to compile: {e}")))
            })
            .await?;
        let code = read_bounded(&out.path().join("driver.code"), MAX_DRIVER_CODE);
        discard(out);
        let code = code
            .filter(|c| c.len() > 4)
            .ok_or_else(|| Error::Runtime("the driver's compile left no code behind".into()))?;
        let mut tmp = tempfile::Builder::new()
            .prefix("tmp-driver-")
            .tempfile_in(&self.dir)
            .map_err(|e| Error::Runtime(format!("store the compiled driver: {e}")))?;
        use std::io::Write as _;
        tmp.write_all(&code)
            .and_then(|()| {
                tmp.as_file()
                    .set_permissions(std::fs::Permissions::from_mode(0o444))
            })
            .map_err(|e| Error::Runtime(format!("store the compiled driver: {e}")))?;
        tmp.persist(self.driver_path())
            .map_err(|e| Error::Runtime(format!("publish the compiled driver: {}", e.error)))?;
        self.prune_drivers();
        drop(lock);
        Ok(())
    }

    /// Removes the compiled drivers (and recorded failures) of other builds of kern-sandbox
    /// older than `STALE_DRIVER`: each upgrade leaves one behind. A build still in use that
    /// finds its own gone only reads the driver's source until its next `open()` rebuilds it
    /// (a 50 ms box, off the call's path), at most once a `STALE_DRIVER`.
    fn prune_drivers(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let id = crate::lang::sources::driver_id();
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let Some(rest) = name.strip_prefix("driver-") else {
                continue;
            };
            let other = rest
                .strip_suffix(".code")
                .or_else(|| rest.strip_suffix(".failed"))
                .is_some_and(|other| other != id);
            let stale = e
                .metadata()
                .ok()
                .filter(std::fs::Metadata::is_file)
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= STALE_DRIVER);
            if other && stale {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Runs `b.argv` with the image's python (`python3 -I ...`) in a builder box whose only
    /// mount, at `TARGET`, is a fresh private directory that `fill` puts the host's inputs in
    /// first; returns that directory once the box succeeded. A failure the image causes (no
    /// python3, a compile that fails) is recorded at `b.failed`; anything else (a kill, a full
    /// disk, a closing session) is tried again next session.
    async fn run_builder(
        &self,
        b: Builder<'_>,
        fill: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<tempfile::TempDir> {
        // Private to this build (0700, fresh names): nothing else writes into them, and a half
        // built or failed tree is never where a box looks. The output sits next to where it
        // is published: a rename within one directory needs no write access to the (by then
        // sealed) tree itself.
        let scratch = |prefix: &str| {
            tempfile::Builder::new()
                .prefix(prefix)
                .permissions(std::fs::Permissions::from_mode(0o700))
                .tempdir_in(&self.dir)
                .map_err(|e| Error::Runtime(format!("create a pyc build dir: {e}")))
        };
        let (out, workspace) = (scratch("build-")?, scratch("ws-")?);
        if let Err(e) = fill(out.path()) {
            discard(out);
            discard(workspace);
            return Err(e);
        }
        let spec = builder_spec(b.template, b.argv, workspace.path(), out.path())?;
        let outcome = Kern::spawn(b.kern, &spec.limits)?
            .run(
                &spec,
                &Keep::new(1 << 20, None),
                None,
                b.cancel.clone(),
                Default::default(),
            )
            .await?;
        let (why, lasting) = match &outcome {
            None => (
                Some("the kern runtime exited before it read the spec".to_string()),
                false,
            ),
            Some(o) => match &o.report.fault {
                Some(f) => (
                    Some(format!("the compiling box failed: {}", f.message)),
                    f.kind == FaultKind::ExecFailed,
                ),
                None if o.report.exit_code != 0 => (
                    Some(format!(
                        "compiling with the image's python3 ended with exit code {}: {}",
                        o.report.exit_code,
                        String::from_utf8_lossy(&o.stderr)
                            .lines()
                            .last()
                            .unwrap_or("")
                    )),
                    true,
                ),
                None => (None, false),
            },
        };
        discard(workspace);
        if let Some(why) = why {
            if lasting && !*b.cancel.borrow() {
                let _ = std::fs::write(&b.failed, &why);
            }
            discard(out);
            return Err(Error::Runtime(why));
        }
        Ok(out)
    }
}

/// One run of the builder box (`Cache::run_builder`).
struct Builder<'a> {
    kern: &'a Path,
    /// The session's box, whose image and limits the builder keeps.
    template: BoxSpec,
    /// python3's arguments after `-I`.
    argv: &'a [String],
    /// Where a failure of the image's is recorded.
    failed: PathBuf,
    cancel: tokio::sync::watch::Receiver<bool>,
}

/// A file of at most `max` bytes, read whole; None if it is anything else.
fn read_bounded(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let f = std::fs::File::open(path).ok()?;
    let mut data = Vec::new();
    f.take(max + 1).read_to_end(&mut data).ok()?;
    (data.len() as u64 <= max).then_some(data)
}

/// As `read_bounded`, for a file published here: a regular file (not a link to one) of ours
/// that nobody can write.
/// How long another build's compiled driver is kept unrebuilt (`Cache::prune_drivers`).
const STALE_DRIVER: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

fn read_sealed(path: &Path, max: u64) -> Option<Vec<u8>> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let ours = m.uid() == nix::unistd::geteuid().as_raw();
    if !m.is_file() || m.mode() & 0o222 != 0 || !ours {
        return None;
    }
    read_bounded(path, max)
}

/// The builder box: of the session's posture it keeps only the image, the limits, the scratch
/// tmpfs, AppArmor and seccomp. Everything that could carry what a box wrote is replaced: its
/// workspace is `workspace` (empty, private), its only mount the output, its account box root
/// (reads all of the image), no capabilities, no devices, no network, the image's environment
/// without `PYTHON*`, and python runs `-I`.
fn builder_spec(
    template: BoxSpec,
    args: &[String],
    workspace: &Path,
    out: &Path,
) -> Result<BoxSpec> {
    let m = std::fs::metadata(out)
        .map_err(|e| Error::Runtime(format!("stat {}: {e}", out.display())))?;
    let mut spec = template;
    spec.workspace = workspace.to_path_buf();
    // The cache is every Sandbox's of the image: built the same whatever this one's mount.
    spec.workspace_target = DEFAULT_WORKSPACE_TARGET.into();
    spec.argv = ["python3".to_string(), "-I".into()]
        .into_iter()
        .chain(args.iter().cloned())
        .collect();
    spec.timeout_ms = BUILD_TIMEOUT_MS;
    spec.channel = false;
    spec.user = None;
    spec.keep_caps.clear();
    spec.devices.clear();
    spec.readonly_in_workspace.clear();
    spec.host_network = false;
    spec.egress = None;
    spec.etc.clear();
    spec.resident = None;
    spec.env.retain(|(k, _)| !k.starts_with("PYTHON"));
    spec.binds = vec![BindSpec {
        source: out.to_path_buf(),
        target: TARGET.into(),
        writable: true,
        dir: true,
        dev: m.dev(),
        ino: m.ino(),
    }];
    Ok(spec)
}

/// Puts the hook at `hook/sitecustomize.py` (kern's own file, written by the host).
fn install_hook(out: &Path) -> Result<()> {
    let dir = out.join("hook");
    std::fs::create_dir(&dir)
        .and_then(|()| std::fs::write(dir.join("sitecustomize.py"), HOOK))
        .map_err(|e| Error::Runtime(format!("install the pyc hook: {e}")))
}

/// Makes the built tree read-only for good: directories 0555, files 0444. Anything but a
/// directory or a regular file (a symlink, say) means the tree is not what the builder makes,
/// and it is not published.
fn seal(dir: &Path) -> Result<()> {
    use crate::fsx::walk::{walk_all, Closed, Visit};
    let mut failed = None;
    let walked = walk_all(dir, Closed::Fail, |e| {
        let path = dir.join(e.rel);
        let mode = if e.is_dir() {
            0o555
        } else if e.is_file() {
            0o444
        } else {
            failed = Some(Error::Runtime(format!(
                "the pyc build left {}, which is neither a file nor a directory; not published",
                path.display()
            )));
            return Visit::Stop;
        };
        // A directory is still entered at 0555 (r-x), and its files are ours to chmod.
        match e.chmod(mode) {
            Ok(()) => Visit::Enter,
            Err(errno) => {
                failed = Some(Error::Runtime(format!("seal {}: {errno}", path.display())));
                Visit::Stop
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    walked.map_err(|e| Error::Runtime(format!("seal {}: {e}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555))
        .map_err(|e| Error::Runtime(format!("seal {}: {e}", dir.display())))
}

/// Removes a build's scratch directory (sealed or not; gone already once published).
fn discard(scratch: tempfile::TempDir) {
    let path = scratch.keep();
    if path.exists() {
        crate::workspace::make_deletable(&path);
        let _ = std::fs::remove_dir_all(&path);
    }
}
