//! The shape both kinds of kernel share (`Lifecycle`): one long-lived box whose cells run one
//! at a time in call order; a box that ended (a cell's timeout, the session closing, an outside
//! kill, close()) leaves the kernel dead, and every later call says why; a caller's kernel
//! counts as a writer of the workspace until it is closed, and is held to `workspaceMaxBytes`
//! before each cell. What differs, running a cell, saying why the box ended, saying goodbye, is
//! the kind's (`Kind`): the python driver's (`driver`) or an image's Jupyter kernel's
//! (`jupyter`).

use crate::engine::addon::capture::Keep;
use crate::engine::addon::launch::{ChunkSender, Outcome};
use crate::engine::shared::status::{Fault, FaultKind};
use crate::error::{Error, Result};
use crate::lang::state::KernelState;
use crate::session::longbox::Monitor;
use crate::session::percall;
use crate::session::result::{self, ExecResult};
use crate::session::writers::Active;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{watch, Mutex};

/// Resolves when a kernel's box has ended.
pub(crate) type Ended = tokio::task::JoinHandle<Result<Option<Outcome>>>;

/// Waits for the box's end while reading the output it still writes (each chunk to `keep`):
/// the output queue is bounded (`launch::ChunkSender`), so a box whose queue nobody reads would
/// hold its reader, and its end, for ever.
pub(crate) async fn end_reading(
    ended: &mut Ended,
    chunks: &mut crate::engine::addon::launch::ChunkReceiver,
    mut keep: impl FnMut(crate::engine::addon::launch::Chunk),
) -> std::result::Result<Result<Option<Outcome>>, tokio::task::JoinError> {
    loop {
        tokio::select! {
            o = &mut *ended => return o,
            c = chunks.recv() => match c {
                Some(c) => keep(c),
                None => return (&mut *ended).await,
            },
        }
    }
}

/// How long an interrupted cell has to stop before its kernel is torn down.
pub(crate) const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// A cell's abort (its caller's `signal`): turning true stops the cell as its timeout does.
pub(crate) type Abort = Option<watch::Receiver<bool>>;

/// Why a running cell is being stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// It ran past its deadline.
    Timeout,
    /// Its caller aborted it.
    Aborted,
}

impl Stop {
    /// What happened to the cell, to open a fault's message: "the cell ran past its timeout of
    /// 1.000s" or "the cell was aborted".
    pub(crate) fn what(self, timeout: Duration) -> String {
        match self {
            Stop::Timeout => format!(
                "the cell ran past its timeout of {:.3}s",
                timeout.as_secs_f64()
            ),
            Stop::Aborted => "the cell was aborted".into(),
        }
    }

    /// The fault of a stopped cell whose box kern ended: at once, or once `INTERRUPT_GRACE`
    /// after an interrupt had passed.
    pub(crate) fn killed(self, timeout: Duration, after_interrupt: bool) -> Fault {
        let grace = if after_interrupt {
            format!(
                " and did not stop within {}s of an interrupt",
                INTERRUPT_GRACE.as_secs()
            )
        } else {
            String::new()
        };
        Fault::new(
            self.fault_kind(),
            format!(
                "{}{grace}; kern killed the kernel's box and every process in it",
                self.what(timeout)
            ),
        )
    }

    pub(crate) fn fault_kind(self) -> FaultKind {
        match self {
            Stop::Timeout => FaultKind::Timeout,
            // The caller ended it; no limit was hit.
            Stop::Aborted => FaultKind::Killed,
        }
    }
}

/// Resolves when a running cell must stop: at its clock's deadline, or once `abort` turns true.
pub(crate) async fn cell_stop(clock: &mut CellClock, abort: &mut Abort) -> Stop {
    tokio::select! {
        () = clock.expired() => Stop::Timeout,
        () = percall::abort_requested(abort) => Stop::Aborted,
    }
}

/// Whether a kernel is paused (since when), and how long it has been paused in all.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Paused {
    since: Option<tokio::time::Instant>,
    total: Duration,
}

/// A cell's deadline, which stands still while its kernel is paused: a paused cell does not
/// run, so its time does not count.
pub(crate) struct CellClock {
    base: tokio::time::Instant,
    total_at_start: Duration,
    paused: watch::Receiver<Paused>,
}

impl CellClock {
    /// The clock of a cell that starts now, with `timeout`.
    pub(crate) fn start(timeout: Duration, paused: &watch::Sender<Paused>) -> CellClock {
        let mut paused = paused.subscribe();
        let total_at_start = paused.borrow_and_update().total;
        CellClock {
            base: tokio::time::Instant::now() + timeout,
            total_at_start,
            paused,
        }
    }

    /// The deadline as it stands now; None while the kernel is paused.
    pub(crate) fn deadline(&mut self) -> Option<tokio::time::Instant> {
        let p = *self.paused.borrow_and_update();
        match p.since {
            Some(_) => None,
            None => Some(self.base + p.total.saturating_sub(self.total_at_start)),
        }
    }

    /// Resolves once the kernel is paused or resumed.
    pub(crate) async fn changed(&mut self) {
        if self.paused.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves at the deadline, however it moves meanwhile.
    pub(crate) async fn expired(&mut self) {
        loop {
            match self.deadline() {
                Some(at) => tokio::select! {
                    () = tokio::time::sleep_until(at) => return,
                    () = self.changed() => {}
                },
                None => self.changed().await,
            }
        }
    }
}

/// What one kind of kernel does its own way.
pub(crate) trait Kind: Send + Sync + Sized + 'static {
    /// The kernel's live part (its box and channels), held by the cell that runs.
    type Live: Send;
    /// Whether close() ends the box before it waits for a running cell (the driver kernel: the
    /// cell is lost with the box either way), or waits for the cell first (a Jupyter kernel,
    /// which is then asked to shut down).
    const STOP_BEFORE_CLOSE: bool;

    /// The box's end, in the live part.
    fn ended(live: &mut Self::Live) -> &mut Ended;
    /// The box's output, in the live part (read while waiting for its end: `end_reading`).
    fn chunks(live: &mut Self::Live) -> &mut crate::engine::addon::launch::ChunkReceiver;
    /// The cell's own check, before it waits for the kernel.
    fn check_cell(&self, cell: &CellInput<'_>) -> Result<()>;
    /// The error of a call to a kernel that was torn down for `why`.
    fn torn_down(&self, why: &str) -> Error;
    /// What goes as soon as the kernel is dead (a Jupyter kernel's socket directory).
    fn on_dead(&self) {}
    /// Waits for the box to end and says why it did.
    fn box_end(
        &self,
        k: &Lifecycle<Self>,
        live: &mut Self::Live,
    ) -> impl Future<Output = Fault> + Send;
    /// Why a kernel whose box still runs can't take a cell, ending it then (a Jupyter kernel
    /// that misses its heartbeat); None for a kernel that can.
    fn unwell(
        &self,
        k: &Lifecycle<Self>,
        live: &mut Self::Live,
    ) -> impl Future<Output = Option<String>> + Send;
    /// Runs one cell within `timeout`, stopped as at its timeout if `abort` turns true first;
    /// with the result, why the kernel is dead after it, if it is.
    fn run_cell(
        &self,
        k: &Lifecycle<Self>,
        live: &mut Self::Live,
        cell: &CellInput<'_>,
        timeout: Duration,
        sinks: CellSinks,
        abort: &mut Abort,
    ) -> impl Future<Output = (ExecResult, Option<String>)> + Send;
    /// close()'s word to a kernel whose box still runs, before the box is ended.
    fn goodbye(&self, live: &mut Self::Live) -> impl Future<Output = ()> + Send;
}

/// One cell as its caller gave it: its code, and the variables set for it alone (`runCode`'s
/// `env`, checked), over the kernel's own; or, for a driver kernel, one of its state
/// operations (`op`), which run in turn as cells do.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CellInput<'a> {
    pub(crate) code: &'a str,
    pub(crate) env: &'a [(String, String)],
    pub(crate) op: CellOp<'a>,
}

/// What a cell does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CellOp<'a> {
    /// Runs its code.
    Run,
    /// Saves the kernel's state (kernel.fork(), checkpoint()), sent to `CellSinks::saved`.
    Save,
    /// Loads a saved state into the kernel (a fork, a restore).
    Load(&'a KernelState),
}

impl<'a> CellInput<'a> {
    /// A cell with no variables of its own.
    pub(crate) fn code(code: &'a str) -> CellInput<'a> {
        CellInput {
            code,
            env: &[],
            op: CellOp::Run,
        }
    }

    /// A state operation, not code.
    pub(crate) fn op(op: CellOp<'a>) -> CellInput<'a> {
        CellInput {
            code: "",
            env: &[],
            op,
        }
    }
}

/// Where a cell's output chunks and its results go as they come (the caller's callbacks), and
/// a saved state (`CellOp::Save`).
#[derive(Default)]
pub(crate) struct CellSinks {
    pub(crate) output: Option<ChunkSender>,
    pub(crate) results: Option<crate::lang::driver::ResultSink>,
    pub(crate) saved: Option<tokio::sync::oneshot::Sender<KernelState>>,
}

/// One kernel of kind `K`, from its start to close().
pub(crate) struct Lifecycle<K: Kind> {
    state: Mutex<State<K::Live>>,
    /// The session's closing signal: a closed session's kernel is gone with it.
    session_closing: watch::Receiver<bool>,
    /// Turning true ends the box (kern's lifeline closes).
    pub(crate) stop: watch::Sender<bool>,
    /// The per-cell timeout when a call names none.
    pub(crate) timeout_ms: u64,
    /// What a cell keeps of each stream, and where the rest goes.
    pub(crate) keep: Keep,
    /// A caller's kernel (not a prewarmed box) counts as a box writing to the workspace until it
    /// is closed, so snapshot() refuses meanwhile.
    active: std::sync::Mutex<Option<Active>>,
    /// `workspaceMaxBytes`: the workspace and the cap, checked before each cell.
    quota: Option<(PathBuf, u64)>,
    /// The caps of the volumes the kernel writes (`sizeMb`), checked before each cell too.
    volume_caps: Vec<crate::volume::Cap>,
    /// The host pid of the box's monitor (`kern`): what pause() finds the box by.
    monitor: Monitor,
    /// pause()/resume(): whether the box is frozen, which cells' clocks follow.
    pub(crate) paused: watch::Sender<Paused>,
    /// One pause() or resume() at a time; the box's freezer, once found.
    pausing: Mutex<Option<crate::engine::monitor::freezer::Freezer>>,
    pub(crate) kind: K,
}

enum State<L> {
    Live(Box<L>),
    /// Why the kernel is gone.
    Dead(String),
}

impl<K: Kind> Lifecycle<K> {
    /// A kernel whose box is started (`live`); `stop` ends it.
    pub(crate) fn new(
        kind: K,
        live: K::Live,
        session_closing: watch::Receiver<bool>,
        stop: watch::Sender<bool>,
        timeout_ms: u64,
        keep: Keep,
        monitor: Monitor,
    ) -> Lifecycle<K> {
        Lifecycle {
            state: Mutex::new(State::Live(Box::new(live))),
            session_closing,
            stop,
            timeout_ms,
            keep,
            active: std::sync::Mutex::new(None),
            quota: None,
            volume_caps: Vec::new(),
            monitor,
            paused: watch::channel(Paused::default()).0,
            pausing: Mutex::new(None),
            kind,
        }
    }

    /// Whether the kernel is paused (a kernel whose box was ended is not).
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.borrow().since.is_some() && self.pause_target().is_ok()
    }

    /// Freezes the kernel's box, a running cell too (its clock stands still). Idempotent.
    pub(crate) async fn pause(&self) -> Result<()> {
        let mut one = self.pausing.lock().await;
        if self.is_paused() {
            return Ok(());
        }
        let target = self.pause_target()?;
        let f = match one.as_ref() {
            Some(f) => f.clone(),
            None => crate::session::pause::freezer(target, "the kernel").await?,
        };
        crate::session::pause::set(&f, true, "the kernel").await?;
        *one = Some(f);
        self.paused
            .send_modify(|p| p.since = Some(tokio::time::Instant::now()));
        Ok(())
    }

    /// Thaws the kernel's box; a running cell goes on where it stopped. Idempotent.
    pub(crate) async fn resume(&self) -> Result<()> {
        let one = self.pausing.lock().await;
        if !self.is_paused() {
            return Ok(());
        }
        self.pause_target()?;
        if let Some(f) = one.as_ref() {
            crate::session::pause::set(f, false, "the kernel").await?;
        }
        self.mark_resumed();
        Ok(())
    }

    /// A cell being stopped (aborted) while paused runs again, so it can stop; a box ended
    /// meanwhile is no longer paused either way.
    pub(crate) async fn resume_for_stop(&self) {
        if self.paused.borrow().since.is_some() {
            let _ = self.resume().await;
            self.mark_resumed();
        }
    }

    fn mark_resumed(&self) {
        self.paused.send_modify(|p| {
            if let Some(since) = p.since.take() {
                p.total += since.elapsed();
            }
        });
    }

    fn pause_target(&self) -> Result<crate::session::pause::Target> {
        let gone = *self.stop.borrow() || *self.session_closing.borrow();
        match (self.monitor.get(), gone) {
            (Some(monitor), false) => Ok(crate::session::pause::Target {
                monitor,
                init: None,
            }),
            _ => Err(Error::Closed(
                "the kernel was closed or torn down; there is nothing to pause or resume".into(),
            )),
        }
    }

    /// Makes this a caller's kernel: counted as a writer, and held to the workspace cap.
    pub(crate) fn attach(
        &mut self,
        active: Active,
        quota: Option<(PathBuf, u64)>,
        volume_caps: Vec<crate::volume::Cap>,
    ) {
        self.volume_caps = volume_caps;
        self.active = std::sync::Mutex::new(Some(active));
        self.quota = quota;
    }

    /// Whether this is a caller's kernel of the session whose writers are `writers`.
    pub(crate) fn counts_in(
        &self,
        writers: &std::sync::Arc<crate::session::writers::Writers>,
    ) -> bool {
        self.active
            .lock()
            .map(|a| a.as_ref().is_some_and(|a| a.counts_in(writers)))
            .unwrap_or(false)
    }

    /// Whether no cell (nor state operation) is running now.
    pub(crate) fn is_idle(&self) -> bool {
        self.state.try_lock().is_ok()
    }

    /// The live part, while no cell runs: for a kind's own step before the kernel is handed
    /// out (a node kernel's greeting). None once the kernel is dead.
    pub(crate) async fn live(&self) -> Option<tokio::sync::MappedMutexGuard<'_, K::Live>> {
        tokio::sync::MutexGuard::try_map(self.state.lock().await, |s| match s {
            State::Live(l) => Some(&mut **l),
            State::Dead(_) => None,
        })
        .ok()
    }

    /// Whether the box still runs and no cell is running (for choosing a prewarmed box).
    pub(crate) fn is_alive(&self) -> bool {
        match self.state.try_lock() {
            Ok(mut s) => match &mut *s {
                State::Live(l) => !K::ended(l).is_finished(),
                State::Dead(_) => false,
            },
            // A cell is running in it: alive, but not idle.
            Err(_) => false,
        }
    }

    /// Runs one cell. Cells wait for each other, in order. `abort` turning true stops the cell
    /// as its timeout would (the kind says how) and makes the call fail once it has stopped.
    pub(crate) async fn run_code(
        &self,
        cell: CellInput<'_>,
        timeout_ms: Option<u64>,
        sink: Option<ChunkSender>,
        results: Option<crate::lang::driver::ResultSink>,
        abort: Abort,
    ) -> Result<ExecResult> {
        let sinks = CellSinks {
            output: sink,
            results,
            saved: None,
        };
        self.run_cell_with(cell, timeout_ms, sinks, abort).await
    }

    /// `run_code` with its sinks (a state operation's `saved`).
    pub(crate) async fn run_cell_with(
        &self,
        cell: CellInput<'_>,
        timeout_ms: Option<u64>,
        sinks: CellSinks,
        mut abort: Abort,
    ) -> Result<ExecResult> {
        self.kind.check_cell(&cell)?;
        // Refused at once, not queued behind a paused cell that holds the kernel.
        if self.is_paused() {
            return Err(crate::session::pause::paused_error("the kernel"));
        }
        let mut state = self.state.lock().await;
        // Aborted before its turn: nothing runs.
        if percall::aborted(abort.as_ref()) {
            return Err(Error::Invalid(CELL_ABORTED.into()));
        }
        let live = match &mut *state {
            State::Dead(why) => return Err(self.kind.torn_down(why)),
            State::Live(l) => l,
        };
        // Gone between cells (the session closed, the box ended, the kernel stopped answering):
        // nothing runs, and the caller hears why.
        let gone = if *self.session_closing.borrow() {
            Some("its Sandbox was closed".to_string())
        } else if K::ended(live).is_finished() {
            Some(self.kind.box_end(self, live).await.message)
        } else {
            self.kind.unwell(self, live).await
        };
        if let Some(why) = gone {
            let e = self.kind.torn_down(&why);
            *state = State::Dead(why);
            self.kind.on_dead();
            self.mark_resumed();
            return Err(e);
        }
        if self.is_paused() {
            return Err(crate::session::pause::paused_error("the kernel"));
        }
        if let Some(refused) = over_quota(&self.quota).await {
            return Ok(refused);
        }
        if let Some(fault) = result::volumes_full(&self.volume_caps).await {
            return Ok(ExecResult::refused(fault));
        }
        let timeout = Duration::from_millis(timeout_ms.unwrap_or(self.timeout_ms));
        let (result, dead) = self
            .kind
            .run_cell(self, live, &cell, timeout, sinks, &mut abort)
            .await;
        // Aborted, the cell has stopped (or the kernel is gone): its result, whose fault says
        // so, goes back (the JS layer rejects with the signal's reason instead, unless the
        // cell's `onAbort` is "resolve").
        if let Some(why) = dead {
            *state = State::Dead(why);
            self.kind.on_dead();
            // A box that ended is not paused (its monitor thaws it before the end).
            self.mark_resumed();
        }
        Ok(result)
    }

    /// Ends the box of a cell stopped for `stop` and waits for it; the cell's fault (`killed`).
    pub(crate) async fn end_stopped(
        &self,
        live: &mut K::Live,
        stop: Stop,
        timeout: Duration,
        after_interrupt: bool,
    ) -> Fault {
        self.stop.send_replace(true);
        let _ = self.kind.box_end(self, live).await;
        // Its monitor thawed it before the end.
        self.mark_resumed();
        stop.killed(timeout, after_interrupt)
    }

    /// Ends the box (after the kind's goodbye) and waits for it. Idempotent.
    pub(crate) async fn close(&self) -> Result<()> {
        self.close_outcome().await;
        Ok(())
    }

    /// close(), with kern's outcome of the box when this call saw it end (`isolation()` reads
    /// how the box's caps were applied from it).
    pub(crate) async fn close_outcome(&self) -> Option<Outcome> {
        let mut outcome = None;
        // A paused box is thawed first: its goodbye needs it running, and its monitor thaws it
        // anyway before it ends it.
        self.resume_for_stop().await;
        if K::STOP_BEFORE_CLOSE {
            self.stop.send_replace(true);
        }
        let mut state = self.state.lock().await;
        if let State::Live(live) = &mut *state {
            if !K::ended(live).is_finished() {
                self.kind.goodbye(live).await;
            }
            self.stop.send_replace(true);
            // Not awaited when finished: a kind may have taken its output already. What the box
            // still writes meanwhile is read and dropped (no cell is there to take it).
            if !K::ended(live).is_finished() {
                let mut chunks = std::mem::replace(
                    K::chunks(live),
                    crate::engine::addon::launch::chunk_channel().1,
                );
                if let Ok(Ok(Some(o))) = end_reading(K::ended(live), &mut chunks, drop).await {
                    outcome = Some(o);
                }
            }
        }
        self.stop.send_replace(true);
        *state = State::Dead("it was closed".into());
        self.kind.on_dead();
        if let Ok(mut a) = self.active.lock() {
            a.take();
        }
        outcome
    }
}

/// The error of a cell that was aborted and left its kernel alive. The JS layer rejects with
/// the signal's reason instead; this is what a caller without one sees.
pub(crate) const CELL_ABORTED: &str =
    "the cell was aborted; it stopped, and the kernel kept its state";

/// A cell's refusal when the workspace is over `workspaceMaxBytes` (checked before each cell).
async fn over_quota(quota: &Option<(PathBuf, u64)>) -> Option<ExecResult> {
    let (ws, cap) = quota.clone()?;
    let snap =
        tokio::task::spawn_blocking(move || crate::workspace::track::snapshot(&ws, Some(cap)))
            .await
            .unwrap_or_else(|e| crate::workspace::track::Snapshot::unmeasured(e.to_string()));
    result::over_quota(&snap, cap).map(ExecResult::refused)
}

/// The signal of a cell whose box was ended (its exit code 137 says SIGKILL, the signal kern
/// ends a box with): the kernel's interpreter went with the box.
pub(crate) fn cell_signal(exit_code: i32, fault: Option<&Fault>) -> Option<String> {
    (exit_code == 137 && fault.is_some())
        .then(|| crate::engine::shared::status::signal_name(libc::SIGKILL))
}

/// Why a kernel's box ended, from its outcome: the box's own fault, or the kernel's `process`
/// exiting (`tail`: what it last wrote, if worth saying).
pub(crate) fn end_fault(
    outcome: std::result::Result<Result<Option<Outcome>>, tokio::task::JoinError>,
    process: &str,
    tail: &str,
) -> Fault {
    match outcome {
        Ok(Ok(Some(o))) => o.report.fault.unwrap_or_else(|| {
            Fault::new(
                FaultKind::Killed,
                format!(
                    "the kernel's {process} exited (code {}); the kernel was torn down{tail}",
                    o.report.exit_code
                ),
            )
        }),
        _ => Fault::new(
            FaultKind::Killed,
            "the kernel's box ended unexpectedly; the kernel was torn down",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cells_deadline_has_none_while_paused_and_moves_by_the_pause() {
        let paused = watch::channel(Paused::default()).0;
        // A pause before the cell started does not move its deadline.
        paused.send_modify(|p| p.total = Duration::from_secs(7));
        let mut clock = CellClock::start(Duration::from_secs(60), &paused);
        let first = clock.deadline().expect("running");
        paused.send_modify(|p| p.since = Some(tokio::time::Instant::now()));
        assert_eq!(clock.deadline(), None);
        paused.send_modify(|p| {
            p.since = None;
            p.total += Duration::from_secs(5);
        });
        assert_eq!(clock.deadline(), Some(first + Duration::from_secs(5)));
    }

    #[tokio::test]
    async fn a_cell_stops_at_its_abort_or_its_deadline_and_a_dropped_abort_is_no_stop() {
        let paused = watch::channel(Paused::default()).0;
        let mut far = CellClock::start(Duration::from_secs(3600), &paused);
        let (tx, rx) = watch::channel(false);
        let mut abort = Some(rx);
        tx.send_replace(true);
        assert_eq!(cell_stop(&mut far, &mut abort).await, Stop::Aborted);

        // No abort, or one whose sender is gone (the call's registration ended): the deadline.
        let mut soon = CellClock::start(Duration::from_millis(10), &paused);
        assert_eq!(cell_stop(&mut soon, &mut None).await, Stop::Timeout);
        let (tx, rx) = watch::channel(false);
        drop(tx);
        let mut soon = CellClock::start(Duration::from_millis(10), &paused);
        assert_eq!(cell_stop(&mut soon, &mut Some(rx)).await, Stop::Timeout);

        assert_eq!(
            Stop::Aborted.what(Duration::from_secs(1)),
            "the cell was aborted"
        );
        assert!(Stop::Timeout
            .what(Duration::from_secs(1))
            .contains("timeout of 1.000s"));
    }
}
