//! One call (`run`, `runCode`) in a fresh box of the session: its spec, the workspace walks
//! around it, the driver's socket for a python cell, and the result put together.

use super::network;
use super::opened::Opened;
use super::percall::{self, CallInput, PerCall};
use super::persist;
use super::prewarm;
use super::pyc;
use super::result::{self, over_quota, workspace_changes, ExecRequest, ExecResult, RESULTS_GRACE};
use super::writers::Active;
use crate::engine::launch::ChunkSender;
use crate::engine::spec::DEFAULT_WORKSPACE_TARGET;
use crate::error::{Error, Result};
use crate::lang::driver;
use crate::lang::Language;
use crate::workspace::track;
use std::path::Path;
use std::sync::Arc;

/// Runs one call in a fresh box (or the resident box of a `persist` session).
pub(super) async fn exec(
    opened: Arc<Opened>,
    kern_path: &Path,
    req: ExecRequest,
    input: CallInput,
    sink: Option<ChunkSender>,
) -> Result<ExecResult> {
    let cfg = &opened.config;
    let (argv, lang_env, cell, lang) = match (&req.argv, &req.code) {
        (Some(argv), None) => {
            if argv.is_empty() || argv[0].is_empty() {
                return Err(Error::Invalid(
                    "run() needs a non-empty argv array, e.g. run([\"ls\", \"-la\"])".into(),
                ));
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return Err(Error::Invalid("an argv element contains a NUL byte".into()));
            }
            (argv.clone(), Vec::new(), None, None)
        }
        (None, Some(code)) => {
            let lang = Language::parse(req.language.as_deref().unwrap_or("python"))?;
            let l = lang.launch(code)?;
            (l.argv, l.env, l.cell, Some(lang))
        }
        _ => return Err(Error::Invalid("a call needs either argv or code".into())),
    };
    let timeout_ms = match &req.timeout_s {
        None | Some(serde_json::Value::Null) => cfg.timeout_ms,
        Some(v) => super::options::timeout_ms("timeoutS", v)?,
    };
    let per_call = PerCall::of(&req, DEFAULT_WORKSPACE_TARGET)?;
    let workspace = opened.workspace_path()?;
    let mut spec = opened.call_spec(
        argv,
        &lang_env,
        &per_call.env,
        timeout_ms,
        cell.is_some(),
        &workspace,
    );
    spec.cwd = per_call.cwd.clone();
    spec.stdin = input.stdin.is_some();
    // What the kernel would refuse with E2BIG is the caller's mistake, said before a box.
    crate::config::check_exec_size(&spec.argv, &spec.env)?;
    let attached = opened.resident.get();
    if let Some(a) = attached {
        a.check()?;
        spec.resident = Some(crate::engine::spec::Resident::Exec {
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
    if percall::aborted(input.abort.as_ref()) {
        return Err(Error::Invalid(percall::ABORTED.into()));
    }
    let abort = input.abort.clone();
    let (cancel, _joined) = percall::cancel_either(cancel, input.abort);
    let track = cfg.track_files;
    let quota = cfg.workspace_max_bytes;
    let before = if track || quota.is_some() {
        let ws = workspace.clone();
        Some(
            tokio::task::spawn_blocking(move || track::snapshot(&ws, quota))
                .await
                .unwrap_or_else(|e| track::Snapshot::unmeasured(e.to_string())),
        )
    } else {
        None
    };
    if let (Some(cap), Some(b)) = (quota, &before) {
        if let Some(fault) = over_quota(b, cap) {
            return Ok(ExecResult::refused(fault));
        }
    }
    let before = if track { before } else { None };
    // A python cell that doesn't stream takes a prewarmed box when there is a spare. Not a
    // call with its own env or cwd: a prewarmed interpreter started before they were known,
    // under the session's, and a cell can't change them for the interpreter's own start-up
    // (PYTHON* variables, sys.path[0]). Nor a call with stdin: its fd 0 is /dev/null. Nor
    // one that may be aborted: a slot's cell ends only by its timeout or close().
    let slot = match (&cell, &sink) {
        (Some(_), None)
            if lang == Some(Language::Python)
                && per_call.is_plain()
                && !spec.stdin
                && abort.is_none() =>
        {
            prewarm::take(&opened)
        }
        _ => None,
    };
    if let (Some(slot), Some(code)) = (slot, &cell) {
        let r = slot.run(code, timeout_ms, input.results).await;
        // The prewarmed spares refill after the call, so starting the next box doesn't compete with
        // this one for the CPU.
        prewarm::fill(&opened, kern_path);
        let mut r = r?;
        for n in opened.session_notes() {
            r.stderr.push_note(&n);
        }
        r.files = workspace_changes(before, &workspace, &mut r.stderr).await;
        return Ok(r);
    }
    // A python or node cell goes to the driver on its own socket, which also brings the
    // results back: read concurrently, so the box never blocks on a full socket.
    let (channel, results_rx) = match &cell {
        Some(code) => {
            let (ours, theirs) = network::box_socketpair("driver")?;
            let setup = lang.and_then(Language::setup_frame);
            (
                Some(theirs),
                Some(driver_io_on(ours, setup, code, input.results)?),
            )
        }
        None => (None, None),
    };
    // ADDITION (issue 21): a python cell the zygote may take runs in a box forked from it.
    let zygote_kern = match (&cell, lang) {
        (Some(_), Some(Language::Python)) if per_call.is_plain() && !spec.stdin => {
            super::zygote::take(&opened, kern_path)
        }
        _ => None,
    };
    spec.zygote = zygote_kern.is_some();
    let line = opened.egress_line(&spec)?;
    let mut fds = network::fds(channel.as_ref(), line.as_ref());
    // Fed from now on: what the pipe holds waits for the box; the rest for the workload.
    let stdin = input.stdin.map(percall::stdin_pipe).transpose()?;
    fds.stdin = stdin.as_ref().map(|(read, _)| read);
    // Aborted during the walk before: still no box.
    if percall::aborted(abort.as_ref()) {
        return Err(Error::Invalid(percall::ABORTED.into()));
    }
    let kern = match zygote_kern {
        Some(k) => k,
        None => opened.kern(kern_path)?,
    };
    let first = kern
        .run(&spec, cfg.max_output, sink.clone(), cancel.clone(), fds)
        .await?;
    let mut outcome = match first {
        Some(o) => o,
        // The spare died before it got the spec: nothing ran; use a fresh kern (and a fresh
        // box, if it was the zygote's).
        None => opened
            .spawn_kern(kern_path)?
            .run(
                &crate::engine::spec::BoxSpec {
                    zygote: false,
                    ..spec.clone()
                },
                cfg.max_output,
                sink,
                cancel,
                fds,
            )
            .await?
            .ok_or_else(|| {
                Error::Runtime("the kern runtime exited before it read the box spec".into())
            })?,
    };
    // Our copy of the box's end goes now: the reader sees EOF once the box's
    // copies are gone.
    drop(channel);
    // The box is gone: so is whatever of its stdin it did not read.
    if let Some((read, feeder)) = stdin {
        drop(read);
        feeder.abort();
    }
    // kern reported only once the box had ended: the abort is complete, nothing of the box
    // is left, and the call's result is moot (no workspace walk to wait for).
    if percall::aborted(abort.as_ref()) {
        return Err(Error::Invalid(percall::ABORTED.into()));
    }
    result::refusal(&mut outcome)?;
    if outcome.report.resident_gone.is_some() {
        let name = attached.map(|a| a.target.name.as_str()).unwrap_or("?");
        return Err(persist::gone(name));
    }
    drop(line);
    let mut notes = opened.session_notes();
    notes.extend(attached.and_then(persist::Attached::first_call_note));
    let mut error = None;
    let results = match results_rx {
        Some(rx) => {
            let (mut r, cut) = match tokio::time::timeout(RESULTS_GRACE, rx).await {
                Ok(Ok(r)) => r,
                _ => Default::default(),
            };
            if cut && outcome.report.fault.is_none() {
                let what = if lang == Some(Language::Python) {
                    "python"
                } else {
                    "node"
                };
                r.note(format!(
                    "note: the {what} driver's last result frame was cut off"
                ));
            }
            error = r.take_error().filter(|_| outcome.report.fault.is_none());
            let (bundles, n) = r.finish();
            notes.extend(n);
            bundles
        }
        None => Vec::new(),
    };
    if lang == Some(Language::Python) {
        if let Some(why) = opened.pyc.as_ref().and_then(pyc::Cache::failure) {
            notes.push(format!("note: pycCache: the image's standard library could not be compiled ({why}); python compiles what it imports at every start"));
        }
    }
    let mut r = result::of_box(outcome, &notes, results, before, &workspace).await;
    r.error = error;
    Ok(r)
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
    cell.extend(driver::cell_frame(1, code, true, None, false));
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
