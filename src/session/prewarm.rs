//! `prewarm`: python driver boxes started before they have a cell, kept as the session's
//! spares (`Opened::prewarmed`), each used as a kernel for exactly one cell (`Prewarmed`) and
//! replaced after the call that took one.

use super::kernel::driver::Prewarmed;
use super::longbox;
use super::opened::Opened;
use crate::error::Result;
use std::path::Path;
use std::sync::Arc;

/// Takes a live prewarmed box; `fill` starts one in its place.
pub(super) fn take(opened: &Opened) -> Option<Prewarmed> {
    opened.prewarmed.take()
}

/// Tops the spares up to `prewarm` boxes, unless the session is closing (checked under the lock
/// `shut_down` retires them under: a fill beside a call's end never outlives close()).
pub(super) fn fill(opened: &Arc<Opened>, kern: &Path) {
    opened.prewarmed.top_up(
        || !*opened.closing.borrow(),
        || start(opened.clone(), kern).ok(),
    );
}

/// Starts a prewarmed box: a driver kernel that will run one cell under the session's timeout and
/// output cap.
pub(super) fn start(opened: Arc<Opened>, kern: &Path) -> Result<Prewarmed> {
    let (timeout_ms, keep) = (opened.config.timeout_ms, opened.keep()?);
    let d = super::kernel::driver::Driver {
        single: true,
        lang: crate::lang::Language::Python,
        interrupt: false,
    };
    let place = super::percall::PerCall::default();
    Ok(Prewarmed::new(longbox::start_driver(
        opened, kern, timeout_ms, keep, d, &place,
    )?))
}
