//! ADDITION (issue 35): `sb.watch()`'s running side. Each watch is a task that reads its inotify
//! instance as events come (`workspace::events`), so the kernel's queue seldom overflows, into
//! a queue of its own the caller takes batches from. The queue is bounded (`MAX_PENDING`): past
//! it, events are counted, not kept, and the caller gets an `overflow` event with the count in
//! their place. A watch ends at `close()`, when it is dropped, or with the Sandbox.

use super::opened::Opened;
use crate::error::{Error, Result};
use crate::workspace::events::{Event, Filter, Kind, Watcher};
use crate::workspace::files;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::sync::{watch, Notify};

/// Events a watch holds for a caller that does not take them.
pub const MAX_PENDING: usize = 65_536;
/// Events one `next()` hands over at most.
pub const MAX_BATCH: usize = 4_096;

/// What `watch(path, opts)` asks for.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchRequest {
    pub recursive: Option<bool>,
    pub include: Option<Vec<String>>,
    pub exclude: Option<Vec<String>>,
}

/// One open watch (`WorkspaceWatch` in JS).
pub struct Watch {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    notify: Notify,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Event>,
    /// Dropped since the last `overflow` the caller was given.
    dropped: u64,
    ended: bool,
    /// Why the watch ended, when it failed; said once.
    error: Option<String>,
}

impl Queue {
    fn push(&mut self, e: Event) {
        // A write is many MODIFY events: one until the caller takes it.
        if e.kind == Kind::Modify && self.events.back() == Some(&e) {
            return;
        }
        if self.events.len() >= MAX_PENDING {
            self.dropped += 1;
            return;
        }
        self.said_dropped();
        self.events.push_back(e);
    }

    /// The count of what was dropped goes where the dropped events would have been.
    fn said_dropped(&mut self) {
        if self.dropped > 0 {
            let n = std::mem::take(&mut self.dropped);
            self.events.push_back(Event::overflow(Some(n)));
        }
    }
}

/// Starts watching `path` (workspace-relative; `"."` or `""` the workspace itself).
pub(super) async fn start(opened: Arc<Opened>, path: String, req: WatchRequest) -> Result<Watch> {
    let ws = opened.workspace_path()?;
    // `parse_rel` reads "." as the workspace, and refuses "" (a file API's missing path).
    let comps = match path.as_str() {
        "" => Vec::new(),
        p => files::parse_rel(p)?,
    };
    let filter = Filter::new(
        req.include.as_deref().unwrap_or_default(),
        req.exclude.as_deref().unwrap_or_default(),
    )?;
    let recursive = req.recursive.unwrap_or(true);
    let watcher =
        tokio::task::spawn_blocking(move || Watcher::start(&ws, &comps, recursive, filter))
            .await
            .map_err(|e| Error::Runtime(format!("watch(): {e}")))??;
    // SAFETY: the Watcher owns its inotify descriptor for its whole life and `as_raw_fd` always
    // names that one; the AsyncFd owns the Watcher, so the descriptor outlives the registration.
    let afd = unsafe { AsyncFd::register(watcher) }
        .map_err(|e| Error::Runtime(format!("watch(): {}", e.into_parts().1)))?;
    let shared = Arc::new(Shared::default());
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(run(
        afd,
        shared.clone(),
        stop_rx,
        opened.closing.subscribe(),
    ));
    Ok(Watch { shared, stop })
}

async fn run(
    mut afd: AsyncFd<Watcher>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    mut closing: watch::Receiver<bool>,
) {
    let mut batch = Vec::new();
    let error = loop {
        tokio::select! {
            // Closed, or dropped.
            r = stop.wait_for(|s| *s) => { let _ = r; break None; }
            r = closing.wait_for(|c| *c) => { let _ = r; break None; }
            ready = afd.readable_mut() => {
                let mut guard = match ready {
                    Ok(g) => g,
                    Err(e) => break Some(e.to_string()),
                };
                match guard.try_io(|w| w.get_mut().read(&mut batch)) {
                    Ok(Ok(())) | Err(_) => {}
                    Ok(Err(e)) => break Some(e.to_string()),
                }
            }
        }
        if !batch.is_empty() {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            for e in batch.drain(..) {
                q.push(e);
            }
            drop(q);
            shared.notify.notify_waiters();
        }
    };
    let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
    q.ended = true;
    q.error = error;
    drop(q);
    shared.notify.notify_waiters();
}

impl Watch {
    /// The next events, waiting for one; empty once the watch has ended.
    pub async fn next(&self) -> Result<Vec<Event>> {
        loop {
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
                q.said_dropped();
                if !q.events.is_empty() {
                    let n = q.events.len().min(MAX_BATCH);
                    return Ok(q.events.drain(..n).collect());
                }
                if q.ended {
                    return match q.error.take() {
                        Some(why) => {
                            Err(Error::Runtime(format!("watch(): the watch failed: {why}")))
                        }
                        None => Ok(Vec::new()),
                    };
                }
            }
            notified.await;
        }
    }

    /// Ends the watch: its inotify instance is let go, and `next()` ends once what is queued is
    /// taken.
    pub fn close(&self) {
        self.stop.send_replace(true);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: Kind, path: &str) -> Event {
        Event {
            kind,
            path: path.into(),
            old_path: None,
            is_dir: false,
            dropped: None,
        }
    }

    #[test]
    fn a_full_queue_counts_what_it_drops_and_says_so_in_place() {
        let mut q = Queue::default();
        for i in 0..MAX_PENDING + 5 {
            q.push(ev(Kind::Create, &i.to_string()));
        }
        assert_eq!((q.events.len(), q.dropped), (MAX_PENDING, 5));
        q.events.clear();
        q.push(ev(Kind::Delete, "x"));
        assert_eq!(q.events[0], Event::overflow(Some(5)));
        assert_eq!(q.events[1], ev(Kind::Delete, "x"));
    }

    #[test]
    fn repeated_modifies_are_one_until_taken() {
        let mut q = Queue::default();
        q.push(ev(Kind::Modify, "a"));
        q.push(ev(Kind::Modify, "a"));
        q.push(ev(Kind::Modify, "b"));
        q.push(ev(Kind::Modify, "a"));
        assert_eq!(q.events.len(), 3);
    }
}
