//! `kern run`'s filesystem flags: where the box sees the workspace (`--workspace-mount`) and
//! its scratch (`--tmpfs`), checked by the same rules as a Sandbox's `workspaceMount` and
//! `tmpfs`, before any box starts.

use kern_sandbox::config::{
    self, at_or_under, check_target, check_workspace_mount, parse_size, DEFAULT_TMPFS_MB,
};
use kern_sandbox::engine::shared::spec::{TmpfsSpec, DEFAULT_WORKSPACE_TARGET};

/// The workspace's box path (`--workspace-mount`, else `/workspace`) and the scratch tmpfs
/// (`--tmpfs`, each PATH[:SIZE]; none given: /tmp, 64 MiB; "none": no scratch).
pub fn workspace_and_tmpfs(
    mount: Option<&str>,
    flags: &[String],
) -> Result<(String, Vec<TmpfsSpec>), String> {
    let ws = match mount {
        Some(m) => check_workspace_mount("--workspace-mount", m).map_err(|e| e.to_string())?,
        None => DEFAULT_WORKSPACE_TARGET.to_string(),
    };
    let mut tmpfs = Vec::new();
    if flags.is_empty() {
        tmpfs.push(TmpfsSpec {
            target: "/tmp".into(),
            size_bytes: DEFAULT_TMPFS_MB << 20,
        });
    }
    for t in flags.iter().filter(|t| t.as_str() != "none") {
        let (target, size) = t.split_once(':').unwrap_or((t, "64m"));
        let size_bytes =
            parse_size(size).ok_or_else(|| format!("--tmpfs {t}: bad size {size:?}"))?;
        if let Some(why) = config::tmpfs_out_of_bounds(size_bytes) {
            return Err(format!("--tmpfs {t}: the size {why}"));
        }
        let target = check_target("--tmpfs", target, &ws).map_err(|e| e.to_string())?;
        tmpfs.push(TmpfsSpec { target, size_bytes });
    }
    // The default /tmp is scratch too: a workspace mount in it would be hidden.
    if let Some(t) = tmpfs.iter().find(|t| at_or_under(&ws, &t.target)) {
        return Err(format!(
            "--workspace-mount {ws}: it is inside the scratch tmpfs at {}; pick a path outside it, or give --tmpfs without it",
            t.target
        ));
    }
    Ok((ws, tmpfs))
}
