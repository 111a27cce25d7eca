//! `pycCache`: the image's Python standard library byte-compiled once per image into the store,
//! then mounted read-only in every box with `PYTHONPYCACHEPREFIX` pointing at it.
//!
//! Why: the box root is read-only, so an image that ships without `.pyc` files (the official
//! `python:*` images delete them) makes every interpreter start recompile each stdlib module it
//! imports, and throw the result away. The cache is built by a box of the image itself (network
//! off, its own python, so the bytecode matches), in the background after the first `open()` of
//! an image: calls made before it is ready start without it, and later ones with it. With the
//! prefix set, python reads bytecode only from the prefix, so the cache holds everything on the
//! image's `sys.path`, not just what lacked a `.pyc`; code in the workspace, whose bytecode can't
//! be written there, is compiled in memory as before (and leaves no `__pycache__` behind).

use crate::engine::launch::Kern;
use crate::engine::spec::{BindSpec, BoxSpec, RootSpec};
use crate::engine::status::FaultKind;
use crate::error::{Error, Result};
use crate::image::store::Store;
use sha2::Digest as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the cache appears in the box.
pub const TARGET: &str = "/.kern-pyc";
/// The builder's wall-clock limit.
const BUILD_TIMEOUT_MS: u64 = 300_000;

/// Fills the prefix for every module of the image's own `sys.path` (not the workspace, not
/// `.deps`): a `.pyc` the image already ships is copied (python still checks it against its
/// source at import), one it lacks is compiled. Test suites are skipped: nobody imports them,
/// and they are half the stdlib.
const BUILD_SCRIPT: &str = r#"
import importlib.util, os, py_compile, re, shutil, sys
prefix = sys.pycache_prefix
skip = re.compile(r'/(test|tests|idle_test|idlelib|tkinter|turtledemo|lib2to3)/')
copied = compiled = failed = 0
seen = set()
for top in sys.path:
    if not top or not os.path.isdir(top) or top.startswith(('/workspace', '/tmp', prefix)):
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
print(f'copied {copied}, compiled {compiled}, failed {failed}')
"#;

/// The cache of one image: where it lives and whether it is built.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// The cache for `image`'s root, or None where there is nothing to cache: the host image
    /// (the host's python already has its compiled stdlib, written by its package manager).
    pub fn for_image(image: &crate::image::Image) -> Result<Option<Cache>> {
        let key = match (&image.digest, &image.root) {
            (Some(d), _) => d.to_string().replace(':', "-"),
            // A plain root directory has no digest: key it by its identity and age, so a
            // rebuilt directory gets a new cache.
            (None, RootSpec::Dir { path }) => {
                let m = std::fs::metadata(path)
                    .map_err(|e| Error::Runtime(format!("stat {}: {e}", path.display())))?;
                let id = format!(
                    "{}\0{}\0{}\0{}",
                    path.display(),
                    m.dev(),
                    m.ino(),
                    m.mtime()
                );
                format!(
                    "dir-{}",
                    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..16])
                )
            }
            (None, RootSpec::Host) => return Ok(None),
        };
        Ok(Some(Cache {
            dir: Store::default_root()?.join("pyc").join(key),
        }))
    }

    fn ready_dir(&self) -> PathBuf {
        self.dir.join("ready")
    }

    /// The read-only bind of a built cache, or None while it is not built (or can't be).
    pub fn bind(&self) -> Option<BindSpec> {
        let ready = self.ready_dir();
        let m = std::fs::symlink_metadata(&ready).ok()?;
        if !m.is_dir() {
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
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::Runtime(format!("create {}: {e}", self.dir.display())))?;
        let lock = std::fs::File::create(self.dir.join("lock"))
            .map_err(|e| Error::Runtime(format!("pyc lock: {e}")))?;
        let lock = tokio::task::spawn_blocking(move || {
            nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|_| ())
        })
        .await
        .map_err(|e| Error::Runtime(format!("pyc lock: {e}")))?
        .map_err(|_| Error::Runtime("cannot lock the pyc cache".into()))?;
        if self.bind().is_some() || self.failure().is_some() {
            return Ok(());
        }
        let work = self.dir.join("tmp");
        if work.exists() {
            crate::workspace::make_deletable(&work);
            let _ = std::fs::remove_dir_all(&work);
        }
        std::fs::create_dir(&work)
            .map_err(|e| Error::Runtime(format!("create {}: {e}", work.display())))?;
        let m = std::fs::metadata(&work)
            .map_err(|e| Error::Runtime(format!("stat {}: {e}", work.display())))?;
        let mut spec = template;
        spec.argv = vec!["python3".into(), "-c".into(), BUILD_SCRIPT.into()];
        spec.timeout_ms = BUILD_TIMEOUT_MS;
        spec.channel = false;
        spec.binds.retain(|b| b.target != TARGET);
        spec.binds.push(BindSpec {
            source: work.clone(),
            target: TARGET.into(),
            writable: true,
            dir: true,
            dev: m.dev(),
            ino: m.ino(),
        });
        spec.env.retain(|(k, _)| k != "PYTHONPYCACHEPREFIX");
        spec.env.push(("PYTHONPYCACHEPREFIX".into(), TARGET.into()));
        let outcome = Kern::spawn(kern, &spec.limits)?
            .run(&spec, 1 << 20, None, cancel.clone(), Default::default())
            .await?;
        // Only what the image itself causes is recorded (no python3, a compile that fails);
        // anything else (a kill, a full disk, a closing session) is tried again next session.
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
        if let Some(why) = why {
            if lasting && !*cancel.borrow() {
                let _ = std::fs::write(self.dir.join("failed"), &why);
            }
            crate::workspace::make_deletable(&work);
            let _ = std::fs::remove_dir_all(&work);
            return Err(Error::Runtime(why));
        }
        std::fs::rename(&work, self.ready_dir())
            .map_err(|e| Error::Runtime(format!("publish the pyc cache: {e}")))?;
        drop(lock);
        Ok(())
    }
}
