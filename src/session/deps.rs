//! The workspace's `.deps`, where `setup` installs: the directory, made from the host at
//! open() before any box runs, and the environment every box of a session with dependencies
//! gets so it finds what is installed there.

use crate::error::{Error, Result};
use std::path::Path;

/// Where `setup` installs, relative to the workspace.
pub const DEPS_DIR: &str = ".deps";

/// A path under `.deps` as the box sees it, the workspace being at `ws`.
pub(super) fn deps(ws: &str, sub: &str) -> String {
    format!("{ws}/{DEPS_DIR}/{sub}")
}

/// Sets `k` to `v`, or puts `v` in front of an existing `:`-list.
pub(super) fn prepend(env: &mut Vec<(String, String)>, k: &str, v: &str) {
    match env.iter_mut().find(|(ek, _)| ek == k) {
        Some((_, old)) if !old.is_empty() => *old = format!("{v}:{old}"),
        Some((_, old)) => *old = v.to_string(),
        None => env.push((k.to_string(), v.to_string())),
    }
}

/// What every box of a session with dependencies gets, so `import x`, `require('x')` and the
/// installed commands just work: pip's `--target` tree on PYTHONPATH, pip's `--user` base,
/// npm's global prefix, and their `bin` directories on PATH. `ws`: the workspace in the box.
pub fn deps_env(env: &mut Vec<(String, String)>, ws: &str) {
    let deps = |sub: &str| deps(ws, sub);
    prepend(env, "PYTHONPATH", &deps("python"));
    prepend(env, "NODE_PATH", &deps("node/lib/node_modules"));
    prepend(
        env,
        "PATH",
        &format!(
            "{}:{}:{}",
            deps("python/bin"),
            deps("pyuser/bin"),
            deps("node/bin")
        ),
    );
    // Kernelspecs that `pip install ipykernel` put in .deps, for `kernel({ jupyter })` and for
    // jupyter's own tools in the box.
    prepend(
        env,
        "JUPYTER_PATH",
        &format!(
            "{}:{}",
            deps("python/share/jupyter"),
            deps("pyuser/share/jupyter")
        ),
    );
    for (k, v) in [
        ("PYTHONUSERBASE", deps("pyuser")),
        ("npm_config_prefix", deps("node")),
    ] {
        env.retain(|(ek, _)| ek != k);
        env.push((k.into(), v));
    }
}

/// `.deps` as a real directory owned like the workspace, made from the host at open(), before any
/// box runs, so no box ever makes it (every box then sees it read-only, with `depsReadonly`);
/// a symlink planted there is refused, never followed.
pub(super) fn make_deps_dir(workspace: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let p = workspace.join(DEPS_DIR);
    match std::fs::symlink_metadata(&p) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return crate::invalid!(
                "{} exists and is not a directory; setup installs there: remove it",
                p.display()
            )
        }
        Err(_) => {}
    }
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&p)
        .map_err(|e| Error::Runtime(format!("cannot create {}: {e}", p.display())))?;
    if nix::unistd::geteuid().is_root() {
        let owner = std::fs::metadata(workspace)
            .map_err(|e| Error::Runtime(format!("stat {}: {e}", workspace.display())))?;
        std::os::unix::fs::lchown(&p, Some(owner.uid()), Some(owner.gid()))
            .map_err(|e| Error::Runtime(format!("chown {}: {e}", p.display())))?;
    }
    Ok(())
}

/// Whether the session's boxes get the deps environment: with `setup`, or when a kept workspace's
/// `.deps` already holds something (an earlier session's setup).
pub fn has_deps(setup: bool, workspace: &Path) -> bool {
    setup || std::fs::read_dir(workspace.join(DEPS_DIR)).is_ok_and(|mut d| d.next().is_some())
}
