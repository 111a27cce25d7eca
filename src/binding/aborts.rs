//! The abort registry of calls with a `signal` (a Sandbox's calls, a kernel's cells).

use super::errors::poisoned;
use std::sync::Arc;

/// The aborts of calls with a `signal`, by the id `begin` gave: registered on the JS thread
/// before the call's future exists, so an abort can never come before its call. A Sandbox's
/// calls have one registry, a kernel's cells another.
#[derive(Clone, Default)]
pub(super) struct Aborts(Arc<std::sync::Mutex<AbortIds>>);

#[derive(Default)]
struct AbortIds {
    next: u32,
    by_id: std::collections::HashMap<u32, tokio::sync::watch::Sender<bool>>,
}

impl Aborts {
    /// Registers the abort of a call about to start, synchronously.
    pub(super) fn begin(&self) -> napi::Result<u32> {
        let mut a = self.0.lock().map_err(|_| poisoned())?;
        a.next = a.next.wrapping_add(1);
        let id = a.next;
        a.by_id.insert(id, tokio::sync::watch::channel(false).0);
        Ok(id)
    }

    /// Aborts the call `begin` gave `id`; a call already over is left alone.
    pub(super) fn abort(&self, id: u32) -> napi::Result<()> {
        let a = self.0.lock().map_err(|_| poisoned())?;
        if let Some(tx) = a.by_id.get(&id) {
            tx.send_replace(true);
        }
        Ok(())
    }

    /// Forgets call `id` (it is over).
    fn end(&self, id: u32) {
        if let Ok(mut a) = self.0.lock() {
            a.by_id.remove(&id);
        }
    }

    /// The abort of call `id` (none without an id), with its registration, which goes when the
    /// guard is dropped whatever happens to the call.
    pub(super) fn of(
        &self,
        id: Option<u32>,
    ) -> napi::Result<(
        Option<Registered>,
        Option<tokio::sync::watch::Receiver<bool>>,
    )> {
        let Some(id) = id else {
            return Ok((None, None));
        };
        let registered = Registered(self.clone(), id);
        let a = self.0.lock().map_err(|_| poisoned())?;
        let abort = a.by_id.get(&id).map(tokio::sync::watch::Sender::subscribe);
        Ok((Some(registered), abort))
    }
}

/// A call's abort registration, removed when the call is over.
pub(super) struct Registered(Aborts, u32);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.end(self.1);
    }
}
