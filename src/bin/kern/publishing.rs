//! `kern run -p PORT`: the box's `127.0.0.1:PORT` on a URL of this host with a token, as a
//! Sandbox's `publish()` (`session::publish`), served from a thread of its own while the box
//! runs. The box gets a connector (`engine::boxside::connector`); nothing else of the host opens
//! to it.

use kern_sandbox::engine::boxside::connector;
use kern_sandbox::engine::shared::handoff::BoxFds;
use kern_sandbox::engine::shared::spec::BoxSpec;
use kern_sandbox::session::publish::{publish_box, Dialer, PublishRequest};

/// The published ports of a box: made ready before the box, listening once its workload starts
/// (`start`), closed when this is dropped after the box has ended.
pub struct Publishing {
    ports: Vec<u16>,
    dialer: Dialer,
    ended: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Publishing {
    fn drop(&mut self) {
        self.ended.send_replace(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Gives the box a connector for `ports`; None without ports. No thread starts here: the box is
/// cloned from this process, which must have only one thread then (a clone's setresgid waits
/// for every thread glibc knows of).
pub fn prepare(
    ports: &[u16],
    spec: &mut BoxSpec,
    fds: &mut BoxFds,
) -> Result<Option<Publishing>, String> {
    if ports.is_empty() {
        return Ok(None);
    }
    let (ours, theirs) =
        connector::pair().map_err(|e| format!("-p: a socket for the box's connector: {e}"))?;
    spec.connector = true;
    fds.connect = Some(theirs);
    let (ended, ended_rx) = tokio::sync::watch::channel(false);
    Ok(Some(Publishing {
        ports: ports.to_vec(),
        dialer: Dialer::new(connector::Line::new(ours), ended_rx),
        ended,
        thread: None,
    }))
}

impl Publishing {
    /// Once the workload starts (the box is cloned): listens for each port on a thread of its
    /// own and says each URL on stderr. A port that can't be published is said, and the box
    /// runs on.
    pub fn start(&mut self) {
        let (ports, dialer, until) = (
            self.ports.clone(),
            self.dialer.clone(),
            self.ended.subscribe(),
        );
        let spawned = std::thread::Builder::new()
            .name("kern-publish".into())
            .spawn(move || serve(&ports, dialer, until));
        match spawned {
            Ok(t) => self.thread = Some(t),
            Err(e) => eprintln!("kern: -p: {e}"),
        }
    }
}

/// Publishes `ports` and serves them until `until` turns true.
fn serve(ports: &[u16], dialer: Dialer, mut until: tokio::sync::watch::Receiver<bool>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return eprintln!("kern: -p: {e}"),
    };
    rt.block_on(async {
        let mut published = Vec::new();
        for port in ports {
            let req = PublishRequest {
                port: Some((*port).into()),
                ..Default::default()
            };
            match publish_box(dialer.clone(), until.clone(), &req, "kern run -p").await {
                Ok(p) => {
                    eprintln!("kern: the box's 127.0.0.1:{port} is published at {}", p.url);
                    published.push(p);
                }
                Err(e) => eprintln!("kern: {e}"),
            }
        }
        let _ = until.wait_for(|e| *e).await;
    });
}
