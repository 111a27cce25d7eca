//! Starting a Jupyter kernel of the session's image, around the box `session::longbox` starts
//! for it: before, its kernelspec found (in the image, or under the workspace) and a private
//! socket directory with the connection file bound into the box (`prepare`); after, the kernel
//! connected and answering before the caller gets it (`connect_started`).

use super::sockets::{connect, runtime, Readers, Sockets, START_TIMEOUT};
use super::{keep_tail, Jupyter, Live};
use crate::engine::addon::capture::Keep;
use crate::engine::addon::launch::ChunkReceiver;
use crate::engine::shared::spec::{BindSpec, BoxSpec};
use crate::error::{Error, Result};
use crate::lang::jupyter::kernelspec::{self, KernelSpec};
use crate::lang::jupyter::wire::Session;
use crate::session::kernel::lifecycle::{Ended, Lifecycle};
use crate::session::longbox::Monitor;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

fn random_key() -> String {
    // Two v4 UUIDs: 244 random bits from the OS generator, as hex.
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// A kernel ready to start: its kernelspec, the socket directory bound into its box, and the
/// key its messages are signed with.
pub(crate) struct Prepared {
    name: String,
    ks: KernelSpec,
    dir: tempfile::TempDir,
    key: String,
}

/// The started box of a kernel, as `longbox` hands it over.
pub(crate) struct Started {
    pub stop: watch::Sender<bool>,
    pub ended: Ended,
    /// The host pid of the box's monitor, to signal the kernel's process group by.
    pub monitor: Monitor,
    /// The kernel process's own output.
    pub chunks: ChunkReceiver,
    /// The session's closing signal.
    pub session_closing: watch::Receiver<bool>,
}

/// Finds kernelspec `name` (in the image under `root`, or in the host's `workspace`) and fits
/// the box `spec` to run it: its argv and env (the caller's `env` on top), and the socket
/// directory with the connection file bound at `kernelspec::SOCKET_DIR`.
/// The chart formatter's file in the socket directory (`sources::JUPYTER_CHARTS`).
const CHARTS_FILE: &str = "kern_charts.py";

pub(crate) async fn prepare(
    spec: &mut BoxSpec,
    root: PathBuf,
    workspace: PathBuf,
    caller_env: &[(String, String)],
    name: &str,
) -> Result<Prepared> {
    let var = |k: &str| {
        spec.env
            .iter()
            .find(|(ek, _)| ek == k)
            .map(|(_, v)| v.clone())
    };
    let home = var("HOME").unwrap_or_else(|| "/root".into());
    // Box root's own home too, where `pip install --user` in the image put kernelspecs.
    let mut homes = vec![home.as_str()];
    if spec.user.is_none() {
        homes.push("/root");
    }
    let dirs = kernelspec::search_dirs(var("JUPYTER_PATH").as_deref(), &homes);
    let path = var("PATH").unwrap_or_default();
    let ks = {
        let name = name.to_string();
        let ws = workspace.clone();
        let target = spec.workspace_target.clone();
        tokio::task::spawn_blocking(move || {
            // A kernelspec in the workspace (JUPYTER_PATH there, or one `setup` installed
            // under .deps) is read from the host's workspace; any other from the image.
            let locate = move |d: &str| match d.strip_prefix(target.as_str()) {
                Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                    (ws.clone(), rest.trim_start_matches('/').to_string())
                }
                _ => (root.clone(), d.trim_start_matches('/').to_string()),
            };
            let mut ks = kernelspec::find(&dirs, &locate, &name)?;
            // A kernelspec that pip installed names its interpreter "python", meaning the
            // python that installed it; jupyter_client runs its own interpreter there. Ours
            // is the box's: an image with only `python3` (Debian's) gets that one.
            if ks.argv[0] == "python"
                && !on_path(&locate, &path, "python")
                && on_path(&locate, &path, "python3")
            {
                ks.argv[0] = "python3".into();
            }
            Ok::<_, Error>(ks)
        })
        .await
        .map_err(|e| runtime("kernelspec lookup", e))??
    };

    // The socket directory: ours alone (0700). Its host path may be long: the kernel binds
    // at /.kern-jupyter, and we connect through descriptors (see `connect`).
    let dir = tempfile::Builder::new()
        .prefix("kern-jk-")
        .tempdir()
        .map_err(|e| runtime("create the socket directory", e))?;
    let key = random_key();
    let conn = kernelspec::connection_file(&key, name).to_string();
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.path().join("connection.json"))
            .map_err(|e| runtime("write the connection file", e))?;
        f.write_all(conn.as_bytes())
            .map_err(|e| runtime("write the connection file", e))?;
    }
    let meta = std::fs::metadata(dir.path()).map_err(|e| runtime("socket directory", e))?;
    spec.binds.push(BindSpec {
        source: dir.path().to_path_buf(),
        target: kernelspec::SOCKET_DIR.into(),
        writable: true,
        dir: true,
        dev: meta.dev(),
        ino: meta.ino(),
    });
    spec.argv = ks.argv.clone();
    // The kernelspec's env, then the caller's `env` on top (as for any call).
    for (k, v) in ks.env.iter().chain(caller_env) {
        spec.env.retain(|(ek, _)| ek != k);
        spec.env.push((k.clone(), v.clone()));
    }
    // An IPython kernel shows each figure's chart data too, as the driver does: a display
    // formatter added by the kernel's PYTHONSTARTUP, unless the caller or the image set one of
    // their own (theirs runs, without charts).
    let ipython = ks.argv.iter().any(|a| a.contains("ipykernel"));
    if ipython && !spec.env.iter().any(|(k, _)| k == "PYTHONSTARTUP") {
        let file = dir.path().join(CHARTS_FILE);
        std::fs::write(&file, crate::lang::sources::JUPYTER_CHARTS)
            .map_err(|e| runtime("write the kernel's chart formatter", e))?;
        spec.env.push((
            "PYTHONSTARTUP".into(),
            format!("{}/{CHARTS_FILE}", kernelspec::SOCKET_DIR),
        ));
    }
    Ok(Prepared {
        name: name.to_string(),
        ks,
        dir,
        key,
    })
}

/// Connects to the kernel in its `started` box and waits until it answers (or its box ends, or
/// `START_TIMEOUT` passes, which ends the box).
pub(crate) async fn connect_started(
    prepared: Prepared,
    started: Started,
    timeout_ms: u64,
    keep: Keep,
    interrupt: bool,
) -> Result<Lifecycle<Jupyter>> {
    let Prepared { name, ks, dir, key } = prepared;
    let Started {
        stop,
        mut ended,
        monitor,
        mut chunks,
        session_closing,
    } = started;
    let readers = Arc::new(Readers::default());
    let session = Session::new(key.as_bytes());
    let mut log = Vec::new();
    let connect = connect(dir.path().to_path_buf(), session.clone(), readers.clone());
    tokio::pin!(connect);
    let deadline = tokio::time::sleep(START_TIMEOUT);
    tokio::pin!(deadline);
    // Connected and answering, or why not (the box's end, or the deadline).
    let outcome: std::result::Result<Sockets, String> = loop {
        tokio::select! {
            r = &mut connect => break r.map_err(|e| format!("it did not answer on its sockets ({e})")),
            c = chunks.recv() => if let Some(c) = c { keep_tail(&mut log, &c.data) },
            r = &mut ended => {
                while let Ok(c) = chunks.try_recv() {
                    keep_tail(&mut log, &c.data);
                }
                let why = match r {
                    Ok(Ok(Some(o))) => match o.report.fault {
                        Some(f) => f.message,
                        None => format!("its process exited with code {}", o.report.exit_code),
                    },
                    Ok(Ok(None)) => "its box was not started (the Sandbox is closing)".into(),
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                };
                break Err(why);
            }
            _ = &mut deadline => break Err(format!("it did not answer within {}s", START_TIMEOUT.as_secs())),
        }
    };
    let socks = match outcome {
        Ok(s) => s,
        Err(why) => {
            stop.send_replace(true);
            if !ended.is_finished() {
                let _ = ended.await;
            }
            let log = String::from_utf8_lossy(&log);
            let log = log.trim();
            return Err(Error::Invalid(format!(
                "the Jupyter kernel \"{name}\" ({}) did not start: {why}{}",
                ks.argv.join(" "),
                if log.is_empty() {
                    String::new()
                } else {
                    format!("; its output:\n{log}")
                }
            )));
        }
    };
    // Its box ending on a stop (close(), the Sandbox closing, a timeout) removes it too,
    // even if this kernel object lives on in the caller's hands.
    let dir = Arc::new(std::sync::Mutex::new(Some(dir)));
    let on_stop = dir.clone();
    let mut stopped = stop.subscribe();
    tokio::spawn(async move {
        let _ = stopped.wait_for(|s| *s).await;
        if let Ok(mut d) = on_stop.lock() {
            drop(d.take());
        }
    });
    let live = Live {
        session,
        socks,
        chunks,
        log,
        ended,
        monitor: monitor.clone(),
    };
    let pause_by = monitor;
    let kind = Jupyter {
        spec: ks,
        readers,
        dir,
        interrupt,
    };
    Ok(Lifecycle::new(
        kind,
        live,
        session_closing,
        stop,
        timeout_ms,
        keep,
        pause_by,
    ))
}

/// Whether `name` is a file in a directory of the box's `path`, found through `locate`.
fn on_path(locate: &dyn Fn(&str) -> (std::path::PathBuf, String), path: &str, name: &str) -> bool {
    use crate::fsx::{open_beneath, Resolve};
    path.split(':').filter(|d| d.starts_with('/')).any(|d| {
        let (root, rel) = locate(d);
        std::fs::File::open(&root).is_ok_and(|r| {
            let file = format!("{rel}/{name}");
            open_beneath(
                &r,
                file.as_str(),
                nix::fcntl::OFlag::O_PATH,
                Resolve::InRoot,
            )
            .is_ok()
        })
    })
}
