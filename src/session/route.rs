//! Which kind of box serves a call, chosen here: `choose` for `run`/`runCode`, `steered` for
//! `spawn`/`terminal`, `plain` for a probe; and the kern that starts, forks or joins it
//! (`BoxRoute::kern`). `isolation().routes` measures each by its name.

use super::kernel::driver::Prewarmed;
use super::opened::Opened;
use super::prepared::Prepared;
use super::prewarm;
use crate::engine::addon::launch::Kern;
use crate::error::Result;
use crate::lang::Language;
use std::path::Path;
use std::sync::Arc;

/// The box a call runs in.
pub(super) enum Route {
    /// A prewarmed python box that has run nothing: the cell is its one cell.
    Prewarm(Prewarmed),
    /// A box a kern starts, forks or joins for this call.
    Box(BoxRoute),
}

/// A box a kern brings up for the call (every route but a prewarmed box, which is its own).
pub(super) enum BoxRoute {
    /// A box forked from the session's zygote, set up by this spare kern before the call.
    Zygote(Kern),
    /// The resident box of a `persist` session, joined by a spare kern made for it.
    Resident,
    /// A fresh box, by a spare kern (or a new one).
    Fresh,
}

/// What about a call decides its route, beside its prepared spec.
pub(super) struct Ask {
    /// Its output streams to the caller as it comes (a prewarmed box's is split per cell, after).
    pub(super) streams: bool,
    /// It may be aborted (a prewarmed box's cell ends only by its timeout or close()).
    pub(super) abortable: bool,
}

impl BoxRoute {
    /// The name `isolation().routes` gives it.
    pub(super) fn name(&self) -> &'static str {
        match self {
            BoxRoute::Zygote(_) => "zygote",
            BoxRoute::Resident => "resident",
            BoxRoute::Fresh => "fresh",
        }
    }

    /// The kern for the box. A fresh box in a resident session gets a new kern: that
    /// session's spares are made for calls into its box.
    pub(super) fn kern(self, opened: &Arc<Opened>, path: &Path) -> Result<Kern> {
        match self {
            BoxRoute::Zygote(k) => Ok(k),
            BoxRoute::Fresh if opened.resident.get().is_some() => {
                Kern::spawn(path, &opened.config.limits)
            }
            BoxRoute::Resident | BoxRoute::Fresh => opened.kern(path),
        }
    }
}

/// The route of a process steered while it runs (`spawn`, `terminal`): always a fresh box,
/// in a resident session too (its box is the process's own).
pub(super) fn steered() -> BoxRoute {
    BoxRoute::Fresh
}

/// The route of the session's calls into a box (not a python cell): the resident box of a
/// `persist` session, else a fresh box.
pub(super) fn plain(opened: &Opened) -> BoxRoute {
    if opened.resident.get().is_some() {
        BoxRoute::Resident
    } else {
        BoxRoute::Fresh
    }
}

/// The route for `p`. A python cell that doesn't stream takes a prewarmed box when there is a
/// spare; else a python cell the zygote may take is forked from it. Neither takes a call with
/// its own env or cwd (their interpreter started before those were known, under the session's,
/// and a cell can't change them for the interpreter's own start-up: PYTHON* variables,
/// sys.path[0]), nor one with stdin (their fd 0 is /dev/null). A resident session's calls join
/// its box; everything else runs in a fresh box.
pub(super) fn choose(opened: &Arc<Opened>, kern: &Path, p: &Prepared, ask: &Ask) -> Route {
    let python_cell = p.cell.is_some() && p.lang == Some(Language::Python);
    if opened.resident.get().is_none() && python_cell && p.place.is_plain() && !p.spec.stdin {
        if !ask.streams && !ask.abortable {
            if let Some(prewarmed) = prewarm::take(opened) {
                return Route::Prewarm(prewarmed);
            }
        }
        if let Some(k) = zygote_fork(opened, kern) {
            return Route::Box(BoxRoute::Zygote(k));
        }
    }
    Route::Box(plain(opened))
}

/// A kern whose box, forked from the zygote, is set up and waits for this call; None when the
/// session has no zygote, it has ended, or no spare is left (the call then runs in a fresh
/// box). The spares are topped up beside the call.
pub(super) fn zygote_fork(opened: &Arc<Opened>, kern: &Path) -> Option<Kern> {
    let z = opened.zygote.get().filter(|z| z.alive())?;
    let taken = z.take();
    let (me, path) = (opened.clone(), kern.to_path_buf());
    tokio::task::spawn_blocking(move || {
        if let Some(z) = me.zygote.get() {
            z.top_up(&me.closing, &path, &me.config.limits);
        }
    });
    taken
}
