//! open() of a `persist` session: meet the live resident box of its name, or run `setup` and
//! start one, with the posture that decides whether a box may be met.

use super::{state_dir, Attached};
use crate::engine::handoff::CallTarget;
use crate::engine::resident as res;
use crate::engine::spec::{BoxSpec, Resident};
use crate::error::{Error, Result};
use crate::session::opened::Opened;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// How long a resident box may take to build (its mounts, not any workload).
const START_TIMEOUT_MS: u64 = 30_000;

/// The options that define a box, by option name, from the box's own spec: what a second
/// Sandbox of the same name must agree on.
fn posture(
    spec: &BoxSpec,
    image_digest: Option<String>,
    setup: Option<&str>,
) -> BTreeMap<String, String> {
    let l = &spec.limits;
    let num = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    let mut p = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        p.insert(k.to_string(), v);
    };
    put("image", image_digest.unwrap_or_else(|| json(&spec.root)));
    put("workspace", spec.workspace.display().to_string());
    put(
        "memoryMb",
        num(l
            .memory_bytes
            .map(|b| (b as f64 / (1u64 << 20) as f64).to_string())),
    );
    put("pids", num(l.pids.map(|n| n.to_string())));
    put("cpus", num(l.cpus.map(|c| c.to_string())));
    put("enforceLimits", l.enforce.to_string());
    put("requireLimits", l.require.to_string());
    put(
        "network",
        if spec.host_network { "true" } else { "false" }.into(),
    );
    put("mounts", json(&spec.binds));
    put("tmpfs", json(&spec.tmpfs));
    put("user", json(&spec.user));
    put("capDrop", json(&spec.keep_caps));
    put(
        "securityProfile",
        if spec.seccomp.is_some() {
            "untrusted"
        } else {
            "standard"
        }
        .into(),
    );
    put("apparmor", json(&spec.apparmor));
    put("depsReadonly", json(&spec.readonly_in_workspace));
    put("setup", json(&setup));
    p
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// open() of a `persist` session: under the name's lock, attach to the live box of that name
/// (refused when its posture differs), or run `setup` and start one.
pub(crate) async fn attach_or_start(
    opened: &Opened,
    kern: &Path,
    sink: Option<tokio::sync::mpsc::UnboundedSender<crate::engine::launch::Chunk>>,
) -> Result<Attached> {
    let cfg = &opened.config;
    let Some(r) = cfg.resident.clone() else {
        return Err(Error::Runtime(
            "internal error: not a resident session".into(),
        ));
    };
    let workspace = opened.workspace_path()?;
    let mut spec = opened.spec(Vec::new(), &[], START_TIMEOUT_MS, false, &workspace);
    let digest = opened.image.digest.as_ref().map(|d| d.to_string());
    let posture = posture(&spec, digest, cfg.setup.as_deref());
    let dir = tokio::task::spawn_blocking(state_dir)
        .await
        .map_err(|e| Error::Runtime(format!("state task: {e}")))??;
    let (d, n) = (dir.clone(), r.name.clone());
    let (lock, live) = tokio::task::spawn_blocking(move || {
        let lock = res::lock(&d, &n)?;
        let live = res::find(&d, &n)?;
        Ok::<_, Error>((lock, live))
    })
    .await
    .map_err(|e| Error::Runtime(format!("state task: {e}")))??;
    if let Some(live) = live {
        let s = &live.state;
        if s.posture_hash != res::posture_hash(&posture) {
            let diff = res::posture_diff(&s.posture, &posture);
            return crate::invalid!(
                "a resident box named {} already runs with another posture: {}; open it with the same options, use another name, or destroy() it first",
                r.name,
                diff.join("; ")
            );
        }
        drop(lock);
        return Ok(Attached {
            target: CallTarget {
                name: r.name,
                pid1: s.pid1,
            },
            noted: AtomicBool::new(false),
        });
    }
    // `setup` runs only when the box is created (its .deps are then in the box's mounts).
    if let Some(cmd) = cfg.setup.clone() {
        crate::session::setup::run(opened, kern, &cmd, sink).await?;
    }
    spec.resident = Some(Resident::Start {
        name: r.name.clone(),
        ttl_ms: r.ttl_ms,
        posture,
    });
    let outcome = opened.run_own(kern, &spec).await?;
    if let Some(why) = outcome.report.limits_refused {
        return Err(Error::Invalid(why));
    }
    let Some(pid1) = outcome.report.started else {
        let why = outcome
            .report
            .fault
            .map(|f| f.message)
            .unwrap_or_else(|| "no report".into());
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        return Err(Error::Runtime(format!(
            "the resident box {} could not start: {why}{}",
            r.name,
            if stderr.trim().is_empty() {
                String::new()
            } else {
                format!(" ({})", stderr.trim())
            }
        )));
    };
    drop(lock);
    Ok(Attached {
        target: CallTarget { name: r.name, pid1 },
        noted: AtomicBool::new(false),
    })
}
