//! `setup`: one box at open(), with network, that installs dependencies into the workspace's
//! `.deps` (`deps`: the directory, and the environment every later box gets to find them).
//!
//! The setup box is the session's box in every other respect (image, account, limits, mounts,
//! no host variables), but it runs nothing a box could have written: it starts in an empty
//! scratch directory, with the image's environment and none of `.deps` or the workspace on a
//! search path or config path. Its network is every public host through the egress proxy
//! (`setupNetwork: "public"`, the default: the host's loopback and private ranges stay out, so a
//! package's install script can't reach the host's own services), or the host's network as it is
//! (`"host"`, for a private index or a proxy). Either way it trusts the host's CA store:
//! networks that intercept TLS (corporate proxies, and this project's CI machine) present their
//! own CA, and without it every `pip install` fails certificate verification.

mod record;

use super::deps::deps;
use super::opened::Opened;
use super::percall::PerCall;
use super::prepared::{prepare, Workload};
use super::stderr::push_line;
use crate::config::at_or_under;
use crate::config::{Network, SetupNetwork};
use crate::engine::addon::capture::Keep;
use crate::engine::addon::launch::{ChunkSender, Kern};
use crate::engine::shared::spec::{BoxSpec, TmpfsSpec};
use crate::error::{Error, Result};
use crate::proxy::{Policy, Proxy};
use std::path::Path;

/// The setup box's wall-clock limit when `KERN_SETUP_TIMEOUT_S` is unset: installs of large
/// packages take minutes, and `timeoutS` is a per-call limit for code, not for installs.
pub const DEFAULT_SETUP_TIMEOUT_S: u64 = 900;
/// How many trailing stderr lines a failed setup's error carries.
const TAIL_LINES: usize = 20;
/// Where the setup box starts: an empty scratch directory of its own, never the workspace.
pub const SETUP_CWD: &str = "/.kern-setup";

/// The setup box's environment: the image's own (PATH, HOME...) with nothing of the workspace on
/// any search path. `.deps` holds what earlier boxes may have written (with `depsReadonly:
/// false`, or before kern made it), so neither its programs (PATH), its modules (PYTHONPATH,
/// the user site and its `.pth` files) nor a config file in the workspace (pip's and npm's, by
/// way of HOME) may reach the installer; python does not put its cwd on the import path
/// (`PYTHONSAFEPATH`, and the cwd is empty anyway). The install targets are set as before.
/// `ws` is the workspace in the box: an image that names it in a variable (an E2B template's
/// `HOME=/home/user`, a `PATH` through `/home/user/.local/bin`) loses those entries here.
fn setup_env(base: &[(String, String)], ws: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = base.to_vec();
    let in_workspace = |v: &str| at_or_under(v, ws);
    if env.iter().any(|(k, v)| k == "HOME" && in_workspace(v)) {
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".into(), SETUP_CWD.into()));
    }
    // Any other variable's `:`-list entries in the workspace go; a variable left empty goes.
    env.retain_mut(|(_, v)| {
        if !v.split(':').any(in_workspace) {
            return true;
        }
        *v = v
            .split(':')
            .filter(|e| !in_workspace(e))
            .collect::<Vec<_>>()
            .join(":");
        !v.is_empty()
    });
    let deps = |sub: &str| deps(ws, sub);
    let add = vec![
        ("PIP_TARGET".to_string(), deps("python")),
        ("PIP_NO_CACHE_DIR".into(), "1".into()),
        ("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into()),
        ("npm_config_prefix".into(), deps("node")),
        ("npm_config_update_notifier".into(), "false".into()),
        ("PYTHONNOUSERSITE".into(), "1".into()),
        ("PYTHONSAFEPATH".into(), "1".into()),
    ];
    for (k, v) in add {
        env.retain(|(ek, _)| *ek != k);
        env.push((k, v));
    }
    env
}

fn setup_timeout_ms() -> Result<u64> {
    match std::env::var("KERN_SETUP_TIMEOUT_S") {
        Err(_) => Ok(DEFAULT_SETUP_TIMEOUT_S * 1000),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Ok((s * 1000.0).ceil() as u64),
            _ => crate::invalid!("KERN_SETUP_TIMEOUT_S={v:?} is not a positive number of seconds"),
        },
    }
}

/// The setup box: the session's posture (image, account, limits, mounts), started in an empty
/// scratch directory with the image's environment only (`setup_env`), and the network
/// `setupNetwork` says: by default every public host through the egress proxy, never the host's
/// loopback or private ranges.
fn spec(opened: &Opened, cmd: &str, bundle: Option<&str>) -> Result<BoxSpec> {
    let argv = vec!["/bin/sh".into(), "-c".into(), cmd.into()];
    let setup = Workload::Argv {
        what: "setup",
        argv,
    };
    let mut spec = prepare(opened, setup, setup_timeout_ms()?, PerCall::default())?.spec;
    spec.env = setup_env(&opened.base_env, &opened.config.workspace_target);
    spec.tmpfs.push(TmpfsSpec {
        target: SETUP_CWD.into(),
        size_bytes: 1 << 20,
    });
    spec.cwd = Some(SETUP_CWD.into());
    match opened.config.setup_network {
        SetupNetwork::Public => {
            super::network::egress(&mut spec, opened.ca.as_deref(), &listed(opened));
            // The package cache's CA, with the host's.
            if let Some(pem) = bundle {
                super::network::trust_bundle(&mut spec, pem);
            }
        }
        SetupNetwork::Host => super::network::host(&mut spec, opened.ca.as_deref()),
    }
    // The user's own `env` still wins (a private index URL, a corporate proxy).
    for (k, v) in &opened.config.env {
        spec.env.retain(|(ek, _)| ek != k);
        spec.env.push((k.clone(), v.clone()));
    }
    // Dependencies are being written: never read-only here.
    spec.readonly_in_workspace.clear();
    Ok(spec)
}

/// The setup box's proxy: every public name, and the literals `egressAllow` lists; with the
/// package cache, and the CA bundle the box then trusts.
fn proxy(opened: &Opened) -> Result<Option<(std::sync::Arc<Proxy>, Option<String>)>> {
    if opened.config.setup_network != SetupNetwork::Public {
        return Ok(None);
    }
    let policy = Policy::public_names(&listed(opened));
    match &opened.package_cache {
        Some(cache) => {
            let made = super::network::intercepting(
                policy,
                &[],
                Some(cache.clone()),
                opened.ca.as_deref(),
            )?;
            Ok(Some((made.proxy, Some(made.bundle))))
        }
        None => Ok(Some((super::network::proxy(policy)?, None))),
    }
}

/// What `egressAllow` lists (the setup box may reach those literals too).
fn listed(opened: &Opened) -> Policy {
    match &opened.config.network {
        Network::Egress(p) => p.clone(),
        _ => Policy::default(),
    }
}

/// Runs `setup` once; its output streams to `sink`. A setup that fails (or is ended by the
/// sandbox) is an error carrying its exit code and last stderr lines. In a kept workspace whose
/// `.deps` still holds what the same setup installed (`record`), it is skipped, and a note on
/// `sink` and on the first call's runtime notes says so.
pub(super) async fn run(
    opened: &Opened,
    kern_path: &Path,
    cmd: &str,
    sink: Option<ChunkSender>,
) -> Result<()> {
    let proxy = proxy(opened)?;
    let spec = spec(opened, cmd, proxy.as_ref().and_then(|(_, b)| b.as_deref()))?;
    let proxy = proxy.map(|(p, _)| p);
    // Its walks of `.deps` and reads of named files are off the async threads.
    let record = match record::Record::of(opened, cmd) {
        Some(r) => tokio::task::spawn_blocking(move || {
            let done = r.done_at();
            (r, done)
        })
        .await
        .ok(),
        None => None,
    };
    if let Some((r, done)) = &record {
        if let Some(at) = done {
            let note = format!(
                "note: setup skipped: .deps holds what the same command installed at {} (same image, options and named files, and .deps unchanged since); remove {}/.deps, or change the command, to run it again",
                humantime::format_rfc3339_seconds(*at),
                opened.config.workspace_target
            );
            say(opened, sink.as_ref(), note).await;
            return Ok(());
        }
        r.forget();
    }
    let line = proxy.as_ref().map(super::network::Line::open).transpose()?;
    let cancel = opened.closing.subscribe();
    let outcome = Kern::spawn(kern_path, &spec.limits)?
        .run(
            &spec,
            &Keep::new(opened.config.max_output, None),
            sink.clone(),
            cancel,
            super::network::fds(None, line.as_ref()),
        )
        .await?
        .ok_or_else(|| {
            Error::Runtime("the kern runtime exited before it read the setup box's spec".into())
        })?;
    let report = outcome.report;
    if let Some(note) = proxy.as_deref().and_then(super::network::cache_note) {
        say(
            opened,
            sink.as_ref(),
            note.replacen("note: ", "note: setup: ", 1),
        )
        .await;
    }
    if report.exit_code == 0 && report.fault.is_none() {
        let saved = match record {
            Some((r, _)) => tokio::task::spawn_blocking(move || r.save())
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e))),
            None => Ok(()),
        };
        if let Err(e) = saved {
            let note = format!("note: setup: its result could not be recorded, so the next open() of this workspace runs it again: {e}");
            say(opened, sink.as_ref(), note).await;
        }
        return Ok(());
    }
    // The command's own lines: kern's notes (a cap it could only apply as an rlimit) are not
    // the setup's, and a `warning:` the command printed is.
    let stderr =
        super::stderr::Stderr::of_box(outcome.stderr, &outcome.prepared_notes, &report.notes);
    let lines: Vec<&str> = stderr.code().lines().collect();
    let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    let why = match &report.fault {
        Some(f) => format!("the sandbox ended it ({}: {})", f.kind.as_str(), f.message),
        None => format!("it exited with code {}", report.exit_code),
    };
    let mut message = format!("setup failed: {why}. The command was {cmd:?}.");
    let refused: Vec<String> = proxy
        .map(|p| super::network::notes(&p))
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !n.starts_with("note: egress allowed"))
        .collect();
    if !refused.is_empty() {
        push_line(
            &mut message,
            "The setup box reaches public hosts only (setupNetwork: \"public\"); a private package index or proxy needs setupNetwork: \"host\", or its address in egressAllow. Refused:",
        );
        message.push_str(&refused.join("\n"));
    }
    if !tail.is_empty() {
        push_line(&mut message, "Its last stderr lines:");
        message.push_str(&tail);
    }
    Err(Error::SetupFailed {
        message,
        exit_code: report.exit_code,
        stderr_tail: tail,
    })
}

/// A note about setup: on `sink` (open()'s onStderr, where setup's own output goes) and with
/// the session's first call.
async fn say(opened: &Opened, sink: Option<&ChunkSender>, note: String) {
    if let Some(s) = sink {
        let data = format!("{note}\n").into_bytes();
        let _ = s
            .send(crate::engine::addon::launch::Chunk {
                stream: crate::engine::addon::launch::Stream::Stderr,
                data,
            })
            .await;
    }
    if let Ok(mut notes) = opened.option_notes.lock() {
        notes.push(note);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nothing_of_the_workspace_reaches_the_installer() {
        let base = kv(&[
            ("HOME", "/home/user"),
            ("PATH", "/home/user/.local/bin:/usr/bin:/bin"),
            ("PYTHONPATH", "/home/user/lib"),
            ("LANG", "C.UTF-8"),
            ("OTHER", "/home/username:/opt"),
        ]);
        let env = setup_env(&base, "/home/user");
        let get = |k: &str| env.iter().find(|(ek, _)| ek == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HOME"), Some(SETUP_CWD));
        assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
        // Emptied, then dropped; set again only where setup sets it.
        assert_eq!(get("PYTHONPATH"), None);
        assert_eq!(get("LANG"), Some("C.UTF-8"));
        assert_eq!(get("OTHER"), Some("/home/username:/opt"));
        assert_eq!(get("PIP_TARGET"), Some("/home/user/.deps/python"));
        assert_eq!(get("npm_config_prefix"), Some("/home/user/.deps/node"));
        // The default mount keeps the default's paths.
        let env = setup_env(&kv(&[("HOME", "/workspace")]), "/workspace");
        assert!(env.contains(&("HOME".into(), SETUP_CWD.into())));
        assert!(env.contains(&("PIP_TARGET".into(), "/workspace/.deps/python".into())));
    }
}
