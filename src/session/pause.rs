//! `pause()` / `resume()` of a live box, a kernel's or a `persist` Sandbox's resident box:
//! the cgroup freezer (`engine::monitor::freezer`) stops every process of the box at once, its
//! memory kept and no CPU used, until it is thawed. Here: from the caller's side, off the async
//! threads (the freezer reads `/proc` and waits for the kernel to stop every task).

use crate::engine::monitor::freezer::{Freezer, FreezerError};
use crate::error::{Error, Result};

/// The box a pause acts on: the `kern` that watches it and, when known, its init (a resident
/// box's state says; a kernel's is found from its monitor).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub(crate) monitor: u32,
    pub(crate) init: Option<i32>,
}

/// The box's freezer, found once (the box's init from its monitor reads `/proc`).
pub(crate) async fn freezer(target: Target, what: &'static str) -> Result<Freezer> {
    tokio::task::spawn_blocking(move || {
        let init = target
            .init
            .or_else(|| super::kernel::signal::box_init(target.monitor))
            .ok_or_else(|| {
                Error::Closed(format!(
                    "{what}'s box has ended; there is nothing to pause or resume"
                ))
            })?;
        Freezer::for_box(target.monitor as libc::pid_t, init).map_err(|e| error(e, what))
    })
    .await
    .map_err(|e| Error::Runtime(format!("pause: {e}")))?
}

/// Freezes (`frozen`) or thaws the box; `what` names it in errors ("the kernel").
pub(crate) async fn set(f: &Freezer, frozen: bool, what: &'static str) -> Result<()> {
    let f = f.clone();
    tokio::task::spawn_blocking(move || {
        let done = if frozen { f.freeze() } else { f.thaw() };
        done.map_err(|e| error(e, what))
    })
    .await
    .map_err(|e| Error::Runtime(format!("pause: {e}")))?
}

fn error(e: FreezerError, what: &str) -> Error {
    match e {
        FreezerError::Unsupported(why) => {
            Error::HostUnsupported(format!("{what} can't be paused here: {why}"))
        }
        other => Error::Runtime(format!("pausing or resuming {what}: {other}")),
    }
}

/// The refusal of a call to a paused box.
pub(crate) fn paused_error(what: &str) -> Error {
    Error::Invalid(format!(
        "{what} is paused: call resume() first (a paused box runs nothing until then)"
    ))
}
