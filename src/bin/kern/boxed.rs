//! `kern box`: the addon's side of the protocol (steps 1 to 4 of the control socket, in this
//! crate's top comment): the first line's ask, the spec, the report.

use kern_sandbox::engine::monitor::parent::{self, run_box};
use kern_sandbox::engine::monitor::prepare::prepare;
use kern_sandbox::engine::monitor::resident::call;
use kern_sandbox::engine::shared::handoff::{BoxFds, CallTarget, Caller};
use kern_sandbox::engine::shared::protocol::{self, Ask, Said};
use kern_sandbox::engine::shared::spec::{BoxSpec, Limits};
use kern_sandbox::engine::shared::status::{self, BoxReport};
use kern_sandbox::engine::shared::sys;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::process::ExitCode;

/// The control socket (fd 0), read line by line with `recvmsg`: a descriptor the addon sends
/// with the spec line (the box's channel) arrives with it, where a buffered `read` would drop it.
struct Control {
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Control {
    /// One `\n`-terminated line; `None` at EOF (or an error) before its end.
    fn line(&mut self) -> Option<Vec<u8>> {
        let mut chunk = vec![0u8; 64 * 1024];
        // Only what arrived since the last look is searched: a long line is read in linear
        // time, where searching the whole buffer per chunk took minutes for a 64 MiB spec.
        let mut from = 0;
        loop {
            if let Some(i) = self.buf[from..].iter().position(|b| *b == b'\n') {
                let i = from + i;
                let rest = self.buf.split_off(i + 1);
                let mut line = std::mem::replace(&mut self.buf, rest);
                line.pop();
                return Some(line);
            }
            match sys::recv_with_fds(0, &mut chunk) {
                Ok((0, _)) | Err(_) => return None,
                Ok((n, fds)) => {
                    from = self.buf.len();
                    self.buf.extend_from_slice(&chunk[..n]);
                    self.fds.extend(fds);
                }
            }
        }
    }
}

/// The addon's protocol on stdin, a socketpair: line 1 is the caps (kern prepares the cgroup
/// and moves into it at once), line 2 the box spec, which may come much later (a spare kern
/// waits for the next call); the report goes back on the same socket. EOF instead of line 2
/// means "not needed": clean up and leave. Exits 0, or 125 on its own error: never 1, which
/// the addon reads as systemd-run's failure to start a scope (`launch::scope_refused`).
pub fn boxed() -> ExitCode {
    // Whatever else the caller's process leaked to us stays out of the box's reach.
    sys::close_others(&[]);
    let mut control = Control {
        buf: Vec::new(),
        fds: Vec::new(),
    };
    let Some(first) = control.line() else {
        return ExitCode::SUCCESS;
    };
    let limits = match Ask::decode(&first) {
        Ok(Ask::Box { limits }) => limits,
        // A call into a resident box: its caps are the box's, already in force.
        Ok(Ask::Call { target }) => return resident_call(&target, &mut control),
        // A spare for the Sandbox's zygote (`Kern::spawn_zygote`): the socket to the zygote's
        // fork came with the line.
        Ok(Ask::Zygote { limits, inputs }) => return zygote_call(&limits, &inputs, &mut control),
        Err(e) => {
            eprintln!("kern box: {e}");
            return ExitCode::from(125);
        }
    };
    let prepared = prepare(&limits);
    send_prepared();
    let Some((spec, passed)) = read_spec(&mut control) else {
        prepared.release();
        return ExitCode::SUCCESS;
    };
    run_box(
        &spec,
        prepared,
        from_addon(passed, &mut |r| send_report(r, &spec), &mut send_started),
    );
    ExitCode::SUCCESS
}

/// `Ask::Call`: one call into the resident box `target`.
fn resident_call(target: &CallTarget, control: &mut Control) -> ExitCode {
    let prepared = call::prepare(target);
    send_prepared();
    let Some((spec, passed)) = read_spec(control) else {
        prepared.release();
        return ExitCode::SUCCESS;
    };
    call::run_call(
        &spec,
        prepared,
        from_addon(passed, &mut |r| send_report(r, &spec), &mut send_started),
    );
    ExitCode::SUCCESS
}

/// `Ask::Zygote`: the call's box is arranged now, before the call.
fn zygote_call(
    limits: &Limits,
    inputs: &kern_sandbox::engine::plan::Inputs,
    control: &mut Control,
) -> ExitCode {
    let prepared = prepare(limits);
    send_prepared();
    let arranged = match control.fds.pop() {
        Some(sock) => parent::arrange_zygote(&prepared, inputs, sock),
        None => Err("internal error: a zygote spare came without its socket".into()),
    };
    let Some((spec, passed)) = read_spec(control) else {
        if let Ok(a) = arranged {
            a.discard();
        }
        prepared.release();
        return ExitCode::SUCCESS;
    };
    parent::run_zygote_call(
        &spec,
        prepared,
        arranged,
        inputs,
        from_addon(passed, &mut |r| send_report(r, &spec), &mut send_started),
    );
    ExitCode::SUCCESS
}

/// The addon as the caller: the control socket is the lifeline and carries the report.
fn from_addon<'a>(
    fds: BoxFds,
    on_report: &'a mut dyn FnMut(&BoxReport),
    on_started: &'a mut dyn FnMut(i32),
) -> Caller<'a> {
    Caller {
        lifeline: Some(control_fd()),
        fds,
        on_report,
        on_started: Some(on_started),
    }
}

fn control_fd() -> BorrowedFd<'static> {
    // SAFETY: fd 0 is the control socket for the whole life of this process; `detach_stdio`
    // only ever replaces it with /dev/null, so the number stays a valid descriptor.
    unsafe { BorrowedFd::borrow_raw(0) }
}

/// One line to the addon; one that can't be written is said on stderr (the addon then reports
/// kern's silence).
fn say(said: &Said) -> Vec<u8> {
    said.encode().unwrap_or_else(|e| {
        status::note("warning", &e.to_string());
        Vec::new()
    })
}

/// The notes written while preparing, which open the box's stderr.
fn send_prepared() {
    let out = say(&Said::Prepared {
        notes: status::notes(),
    });
    // A few hundred bytes into a socket the caller has not read yet: never blocks for long.
    let _ = nix::unistd::write(control_fd(), &out);
}

/// The workload is about to exec: its pid in the box.
fn send_started(pid: i32) {
    let _ = nix::unistd::write(control_fd(), &say(&Said::Started { pid }));
}

/// The report, then (a `setid_watched` box) the caller's word that it swept the workspace, or
/// kern's own sweep; then the socket closes.
fn send_report(report: &BoxReport, spec: &BoxSpec) {
    let report = BoxReport {
        notes: status::notes(),
        ..report.clone()
    };
    let out = say(&Said::Report {
        report: Box::new(report),
    });
    // The box is dead: its output is all in the pipes, and closing our ends of them first
    // means the caller, once it has the report, meets their EOF at once instead of waiting
    // for this process to be scheduled again (on a loaded host that took seconds).
    let _ = sys::detach_fds(&[1, 2]);
    let _ = nix::unistd::write(control_fd(), &out);
    kern_sandbox::engine::monitor::faults::sweep_unless_swept(spec, control_fd());
    // The caller is done once this closes too: the cgroup teardown that follows is ours.
    let _ = sys::detach_fds(&[0]);
}

/// Line 2: the spec, with the descriptors it announces. None: EOF ("not needed") or a bad
/// spec (said on stderr).
fn read_spec(control: &mut Control) -> Option<(BoxSpec, BoxFds)> {
    let spec: BoxSpec = match protocol::decode_spec(&control.line()?) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kern box: {e}");
            return None;
        }
    };
    let fds = BoxFds::received(&spec, std::mem::take(&mut control.fds));
    // Before anything is done with it: without this line the addon knows nothing ran.
    let _ = nix::unistd::write(control_fd(), &say(&Said::Took));
    Some((spec, fds))
}
