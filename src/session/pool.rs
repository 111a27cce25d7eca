//! The prewarm pool (`prewarm`): driver boxes started before they have a cell, each used as a
//! kernel for exactly one cell (`Slot`), topped up after the call that took one.

use super::kernel::driver::Slot;
use super::longbox;
use super::opened::Opened;
use crate::error::Result;
use std::path::Path;
use std::sync::Arc;

/// Takes a live prewarmed box, and starts one in its place.
pub(super) fn take(opened: &Opened) -> Option<Slot> {
    if opened.config.prewarm == 0 {
        return None;
    }
    let mut pool = opened.pool.lock().ok()?;
    let mut taken = None;
    while let Some(s) = pool.pop_front() {
        if s.is_alive() {
            taken = Some(s);
            break;
        }
    }
    taken
}

/// Tops the pool up to `prewarm` slots.
pub(super) fn fill(opened: &Arc<Opened>, kern: &Path) {
    if *opened.closing.borrow() {
        return;
    }
    let Ok(mut pool) = opened.pool.lock() else {
        return;
    };
    pool.retain(Slot::is_alive);
    while pool.len() < opened.config.prewarm {
        match start(opened.clone(), kern) {
            Ok(s) => pool.push_back(s),
            Err(_) => break,
        }
    }
}

/// Starts a slot: a driver kernel that will run one cell under the session's timeout and
/// output cap.
pub(super) fn start(opened: Arc<Opened>, kern: &Path) -> Result<Slot> {
    let (timeout_ms, max_output) = (opened.config.timeout_ms, opened.config.max_output);
    let d = super::kernel::driver::Driver {
        single: true,
        lang: crate::lang::Language::Python,
    };
    let place = super::percall::PerCall::default();
    Ok(Slot::new(longbox::start_driver(
        opened, kern, timeout_ms, max_output, d, &place,
    )?))
}
