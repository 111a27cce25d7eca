//! One call (`run`, `runCode`): prepared (`prepared`), routed (`route`), run in its box (a
//! prewarmed box, or `in_box`: a zygote fork, the resident box or a fresh box) with the
//! workspace walks around it and the driver's socket for a cell, and the result put together.

use super::opened::Opened;
use super::percall::{self, CallInput, PerCall};
use super::prepared::{self, Prepared, Stdin, Workload};
use super::prewarm;
use super::pyc;
use super::resident;
use super::result::{self, workspace_changes, ExecRequest, ExecResult, RESULTS_GRACE};
use super::route::{self, Ask, BoxRoute, Route};
use super::writers::Active;
use crate::engine::addon::launch::ChunkSender;
use crate::error::{Error, Result};
use crate::lang::driver;
use crate::lang::Language;
use crate::workspace::track;
use std::path::Path;
use std::sync::Arc;

/// Runs one call in the box its route gives (`route::choose`): a prewarmed box, a zygote
/// fork, the resident box of a `persist` session, or a fresh box.
pub(super) async fn exec(
    opened: Arc<Opened>,
    kern_path: &Path,
    req: ExecRequest,
    input: CallInput,
    sink: Option<ChunkSender>,
) -> Result<ExecResult> {
    let cfg = &opened.config;
    let workload = workload(&req)?;
    let timeout_ms = prepared::timeout_ms(req.timeout_s.as_ref(), cfg.timeout_ms)?;
    let place = PerCall::of(&req, &cfg.workspace_target)?;
    if place.user.is_some() && opened.resident.get().is_some() {
        return crate::invalid!("option `user` can't be given to a call of a `persist` Sandbox: its resident box runs every call as the account it started with; open the Sandbox with `user`, or spawn() a process as another account");
    }
    let mut p = prepared::prepare(&opened, workload, timeout_ms, place)?;
    p.set_stdin(input.stdin.map(Stdin::Bytes));
    p.abort = input.abort.clone();
    let attached = opened.resident.get();
    if let Some(a) = attached {
        a.check()?;
        p.spec.resident = Some(crate::engine::shared::spec::Resident::Exec {
            name: a.target.name.clone(),
            pid1: a.target.pid1,
        });
    }

    // Held until the workspace walks after the box are done: close() waits for it.
    let _running = opened.running.read().await;
    let _active = Active::enter(&opened.writers).await;
    // Subscribed before anything slow, and `run` checks the current value first: a close()
    // from here on ends this call's box.
    let cancel = opened.closing.subscribe();
    if *cancel.borrow() {
        return Err(Error::Closed(
            "the Sandbox is closed; open a new Sandbox to run more code".into(),
        ));
    }
    // An abort takes the close() path for this call's box alone. Already aborted: no box.
    p.check_abort()?;
    let (cancel, _joined) = percall::cancel_either(cancel, input.abort);
    let before = match p.before(&opened).await {
        Ok(b) => b,
        Err(fault) => return Ok(ExecResult::refused(fault)),
    };
    let ask = Ask {
        streams: sink.is_some(),
        abortable: p.abort.is_some(),
    };
    let route = route::choose(&opened, kern_path, &p, &ask);
    let route = match route {
        Route::Prewarm(prewarmed) => {
            let code = p.cell.as_deref().unwrap_or_default();
            let r = prewarmed.run(code, p.timeout_ms, input.results).await;
            // The prewarmed spares refill once the caller has the result, on a thread beside:
            // the next box (a kern, its box, python's start) is not on the call's path, nor
            // does it take the CPUs while the result is handed over (2.4 ms of a 5.8 ms call,
            // measured here in the dev build, when it started as the result was whole).
            let refill = || {
                let (me, kern) = (opened.clone(), kern_path.to_path_buf());
                tokio::spawn(async move {
                    if let Some(delivered) = input.delivered {
                        let _ = delivered.await;
                    }
                    let _ = tokio::task::spawn_blocking(move || prewarm::fill(&me, &kern)).await;
                });
            };
            let mut r = match r {
                Ok(r) => r,
                Err(e) => {
                    refill();
                    return Err(e);
                }
            };
            for n in opened.session_notes() {
                r.stderr.push_note(&n);
            }
            r.files =
                workspace_changes(before, &p.workspace, &mut r.stderr, None, &mut r.fault).await;
            refill();
            return Ok(r);
        }
        Route::Box(b) => b,
    };
    p.spec.zygote = matches!(route, BoxRoute::Zygote(_));
    in_box(
        &opened,
        kern_path,
        p,
        InBox {
            route,
            before,
            attached,
            cancel,
            sink,
            results: input.results,
        },
    )
    .await
}

/// What `run` (argv) or `runCode` (code) asks its box to run.
fn workload(req: &ExecRequest) -> Result<Workload> {
    Ok(match (req.argv.clone(), req.code.clone()) {
        (Some(argv), None) => Workload::Argv {
            what: "run()",
            argv,
        },
        (None, Some(code)) => Workload::Code {
            language: req.language.clone(),
            code,
        },
        _ => return Err(Error::Invalid("a call needs either argv or code".into())),
    })
}

/// What a call in a box of its own (not a prewarmed box) brings to `in_box`.
struct InBox<'a> {
    /// Its route: a zygote fork (its kern already holds the box), the resident box, or fresh.
    route: BoxRoute,
    before: Option<track::Before>,
    attached: Option<&'a resident::Attached>,
    cancel: tokio::sync::watch::Receiver<bool>,
    sink: Option<ChunkSender>,
    results: Option<driver::ResultSink>,
}

/// Runs `p` in a box of its route (a zygote fork, the resident box or a fresh box): the driver's
/// socket for a cell, the egress line and stdin, then the box, retried once in a fresh kern
/// when a spare died before it got the spec; then the call's result.
async fn in_box(
    opened: &Arc<Opened>,
    kern_path: &Path,
    mut p: Prepared,
    b: InBox<'_>,
) -> Result<ExecResult> {
    let (lang, attached) = (p.lang, b.attached);
    let (theirs, ours) = p.ends(opened)?;
    // A python or node cell goes to the driver on its own socket, which also brings the
    // results back: read concurrently, so the box never blocks on a full socket.
    let results_rx = match (&p.cell, ours.driver) {
        (Some(code), Some(sock)) => {
            let setup = lang.and_then(Language::setup_frame);
            Some(driver_io_on(sock, setup, code, b.results)?)
        }
        _ => None,
    };
    // Aborted during the walk before: still no box.
    p.check_abort()?;
    let spec = &p.spec;
    // A fresh or resident route's kern is taken only now that the call is sure to run.
    let kern = b.route.kern(opened, kern_path)?;
    let keep = opened.keep()?;
    let first = kern
        .run(spec, &keep, b.sink.clone(), b.cancel.clone(), theirs.lent())
        .await?;
    let mut outcome = match first {
        Some(o) => o,
        // The spare died before it got the spec: nothing ran; use a fresh kern (and a fresh
        // box, if it was the zygote's).
        None => opened
            .spawn_kern(kern_path)?
            .run(
                &crate::engine::shared::spec::BoxSpec {
                    zygote: false,
                    ..spec.clone()
                },
                &keep,
                b.sink,
                b.cancel,
                theirs.lent(),
            )
            .await?
            .ok_or_else(|| {
                Error::Runtime("the kern runtime died before it took the box spec".into())
            })?,
    };
    // Our copies of the box's ends go now: the driver's reader sees EOF once the box's copies
    // are gone, and the egress line's server ends.
    drop(theirs);
    // The box is gone: so is whatever of its stdin it did not read.
    if let Some(feeder) = ours.feeder {
        feeder.abort();
    }
    // kern reported only once the box had ended: the abort is complete and nothing of the box
    // is left. What the call made until then is its result, with the abort as its fault (the
    // JS layer rejects with the signal's reason, or resolves with it under `onAbort`).
    let aborted = percall::aborted(p.abort.as_ref());
    result::refusal(&mut outcome)?;
    if outcome.report.resident_gone.is_some() {
        let name = attached.map(|a| a.target.name.as_str()).unwrap_or("?");
        return Err(resident::gone(name));
    }
    let mut notes = opened.session_notes();
    notes.extend(attached.and_then(resident::Attached::first_call_note));
    let (results, error) = match results_rx {
        Some(rx) => driver_results(rx, lang, outcome.report.fault.is_none(), &mut notes).await,
        None => (Vec::new(), None),
    };
    if lang == Some(Language::Python) {
        if let Some(why) = opened.pyc.as_ref().and_then(pyc::Cache::failure) {
            notes.push(format!("note: pycCache: the image's standard library could not be compiled ({why}); python compiles what it imports at every start"));
        }
    }
    let mut r = result::of_box(outcome, &notes, results, b.before, &p.workspace).await;
    r.error = error;
    if aborted {
        r.fault = Some(crate::engine::shared::status::Fault::new(
            crate::engine::shared::status::FaultKind::Killed,
            percall::ABORTED,
        ));
        r.error = None;
    }
    Ok(r)
}

/// What the driver sent back, once its reader has ended (within `RESULTS_GRACE`): its results
/// and its notes (added to `notes`), and the cell's error. A frame cut off and an error count
/// only when the box itself ended without a fault (`clean`); else the fault says what happened.
async fn driver_results(
    rx: tokio::task::JoinHandle<(driver::Results, bool)>,
    lang: Option<Language>,
    clean: bool,
    notes: &mut Vec<String>,
) -> (Vec<driver::Item>, Option<driver::CellError>) {
    let (mut r, cut) = match tokio::time::timeout(RESULTS_GRACE, rx).await {
        Ok(Ok(r)) => r,
        _ => Default::default(),
    };
    if cut && clean {
        let what = if lang == Some(Language::Python) {
            "python"
        } else {
            "node"
        };
        r.note(format!(
            "note: the {what} driver's last result frame was cut off"
        ));
    }
    let error = r.take_error().filter(|_| clean);
    let (bundles, n) = r.finish();
    notes.extend(n);
    (bundles, error)
}

/// Writes the cell to the driver and reads its frames as they come, until EOF: the results are
/// taken (within their bounds) as they arrive, so nothing beyond what they keep is held; says
/// whether the stream stopped inside a frame.
pub(super) fn driver_io_on(
    sock: tokio::net::UnixStream,
    setup: Option<Vec<u8>>,
    code: &str,
    live: Option<driver::ResultSink>,
) -> Result<tokio::task::JoinHandle<(driver::Results, bool)>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut rx, mut tx) = sock.into_split();
    let mut cell = setup.unwrap_or_default();
    cell.extend(driver::cell_frame(1, code, true, None, false, &[]));
    tokio::spawn(async move {
        // A box that dies before reading the cell closes the socket: nothing to report here,
        // the call's fault says what happened.
        let _ = tx.write_all(&cell).await;
        drop(tx);
    });
    Ok(tokio::spawn(async move {
        let mut reader = driver::FrameReader::default();
        let mut results = driver::Results::default();
        results.live(live);
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    for f in reader.feed(&buf[..n], || results.room()) {
                        results.frame(&f);
                    }
                }
            }
        }
        results.lost(reader.skipped);
        (results, reader.cut())
    }))
}
