//! A session's side of `persist`: meet the resident box of its name (or start it), and the
//! checks each call makes that the box is still the one this Sandbox opened. Meeting or
//! starting the box at open() is `start`.

pub(super) mod start;

use crate::engine::handoff::CallTarget;
use crate::engine::resident as res;
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long destroy() waits for the box's monitor to clean up.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// The resident box a session runs its calls in.
pub(crate) struct Attached {
    pub target: CallTarget,
    /// The first call says what a resident box is not (a fresh one).
    pub(super) noted: AtomicBool,
}

impl Attached {
    /// `Err` with the clear message when the box is gone (destroyed, or past its TTL).
    pub fn check(&self) -> Result<()> {
        if self.target.pid1.alive() {
            Ok(())
        } else {
            Err(gone(&self.target.name))
        }
    }

    /// The runtime note of the first call only.
    pub fn first_call_note(&self) -> Option<String> {
        (!self.noted.swap(true, Ordering::SeqCst)).then(|| {
            format!(
                "note: this call ran in the resident box {} (persist): it is not a fresh box; /tmp and the other scratch filesystems keep what earlier calls left (and count against memoryMb), and processes a call leaves running stay until the box ends (each call sees, traces and reads only its own: the others are hidden from it, but may still signal it by pid)",
                self.target.name
            )
        })
    }
}

pub(super) fn gone(name: &str) -> Error {
    Error::Invalid(format!(
        "the resident box {name} was destroyed (destroy(), `kern stop`, or its persistTtlS ran out) after this Sandbox opened it; open a new Sandbox to start a new one"
    ))
}

/// destroy(): stops the box of this name, whoever started it. Idempotent.
pub(super) async fn destroy(name: String) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        let dir = state_dir()?;
        res::stop(&dir, &name, None, STOP_WAIT).map(drop)
    })
    .await
    .map_err(|e| Error::Runtime(format!("destroy task: {e}")))?
}

fn state_dir() -> Result<PathBuf> {
    res::state_dir()
}
