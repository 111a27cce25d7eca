//! Who may be writing to a session's workspace: every call in flight and every open kernel
//! counts as a writer (`Active`) for as long as its box lives, and snapshot()/restore() hold
//! the workspace still (`Exclusive`) only while the count is zero; calls made meanwhile wait.

use crate::error::Result;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The count of a session's writers, and whether a snapshot()/restore() holds the workspace.
#[derive(Default)]
pub(crate) struct Writers {
    /// Calls in flight plus open kernels: the boxes that may be writing to the workspace.
    /// snapshot()/restore() need it at zero, and set `exclusive` while they work.
    active: AtomicUsize,
    exclusive: AtomicBool,
}

/// Counts one box that may write to the workspace, for as long as it lives.
pub(crate) struct Active(Arc<Writers>);

impl Active {
    /// Waits while a snapshot()/restore() works on the workspace, then counts this box. The
    /// order (count, then look) pairs with `Exclusive::take` (flag, then look at the count).
    pub(crate) async fn enter(writers: &Arc<Writers>) -> Active {
        loop {
            writers.active.fetch_add(1, Ordering::SeqCst);
            if !writers.exclusive.load(Ordering::SeqCst) {
                return Active(writers.clone());
            }
            writers.active.fetch_sub(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Whether this box counts among `writers`' (a kernel of that session).
    pub(crate) fn counts_in(&self, writers: &Arc<Writers>) -> bool {
        Arc::ptr_eq(&self.0, writers)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The workspace held still for snapshot()/restore(): no call running, no kernel open, and new
/// calls wait until it is dropped.
pub(crate) struct Exclusive<'a>(&'a Writers);

impl<'a> Exclusive<'a> {
    pub(crate) fn take(writers: &'a Writers, what: &str) -> Result<Exclusive<'a>> {
        Exclusive::take_beside(writers, what, 0)
    }

    /// `take`, with `frozen` writers left counted: kernels of the session the caller holds
    /// still (paused, or between cells: a kernel's fork or checkpoint).
    pub(crate) fn take_beside(
        writers: &'a Writers,
        what: &str,
        frozen: usize,
    ) -> Result<Exclusive<'a>> {
        if writers.exclusive.swap(true, Ordering::SeqCst) {
            return crate::invalid!("{what} can't run while another snapshot() or restore() does");
        }
        let n = writers.active.load(Ordering::SeqCst).saturating_sub(frozen);
        if n > 0 {
            writers.exclusive.store(false, Ordering::SeqCst);
            return crate::invalid!(
                "{what} needs the workspace to hold still, and {n} call(s) or kernel(s) of this Sandbox may be writing to it; await the running calls and close() open kernels first"
            );
        }
        Ok(Exclusive(writers))
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.0.exclusive.store(false, Ordering::SeqCst);
    }
}
