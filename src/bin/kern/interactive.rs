//! `kern run -i`/`-t`, `kern exec -i`/`-t` and `kern attach`: a box's stdin and terminal at
//! this one, as `docker run -it` and ssh give them.
//!
//! With `-t` the workload gets a terminal of its box's own devpts (`spec.tty`, `engine::boxside::pty`),
//! sized like this one; its master comes back on a socketpair (`BoxFds::tty`), and a thread
//! relays the master's output to the host's stdout, another (with `-i`) the host's stdin to the
//! master. With `-it` the host terminal is raw meanwhile, so keys like ^C reach the box's
//! terminal, whose line discipline makes them signals there. It is put back when the box ends,
//! when kern panics, and on SIGTERM, SIGHUP, SIGINT or SIGQUIT, which end the box through its
//! lifeline (a second one ends kern at once). SIGWINCH resizes the box's terminal.
//!
//! `-t` alone types nothing and leaves the host terminal as it is (^C there ends the box), so
//! its stdin may be anything. `-it` needs a terminal on stdin, as docker's does: a pipe's EOF
//! has no faithful form on a terminal (a ^D typed before the program set its modes can be lost,
//! and the box would wait for input forever).
//!
//! Nothing of the host's terminal reaches the box, in any mode (`stdio`): kern's fds 0, 1 and 2
//! are set aside before the box is cloned. With `-t`, what kern and the init say meanwhile goes
//! to the host's stderr once the box has ended, after the terminal is restored; without, the
//! box's stdout and stderr are pipes a thread relays to the host's as they come.
//!
//! With `-i` alone the workload's stdin is a pipe (`spec.stdin`) a thread fills from the host's
//! stdin, closed at its EOF; without `-i` it is /dev/null.
//!
//! The threads start only when the workload is about to exec (`Caller::on_started`): the
//! monitor clones the box, and a call's kern its init, with a plain `clone` that is only sound
//! while kern is single-threaded (`sys::clone_fork`), and neither clones anything after that.

use super::stdio::{
    dup_std, readable, relay_streams, write_all, HostStdio, Streams, DRAIN_MAX, HOST_STDERR,
};
use kern_sandbox::engine::boxside::pty;
use kern_sandbox::engine::shared::handoff::BoxFds;
use kern_sandbox::engine::shared::spec::TtySize;
use kern_sandbox::engine::shared::sys;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

/// `-i` and `-t`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mode {
    pub interactive: bool,
    pub tty: bool,
}

/// The signals that end a box with a terminal (and put the host's terminal back first).
const ENDING: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT];

/// `-it` needs a terminal on stdin (see the module's doc); said before any box starts.
pub fn check(mode: Mode) -> Result<(), String> {
    if mode.interactive && mode.tty && !nix::unistd::isatty(io::stdin().as_fd()).unwrap_or(false) {
        return Err(
            "-it needs a terminal on stdin, and this one is not; pipe input with -i alone, or use -t alone for a terminal without input"
                .into(),
        );
    }
    Ok(())
}

/// The size of the terminal on `fd`; 80x24 where it is none (or says 0).
pub fn size_of(fd: BorrowedFd<'_>) -> TtySize {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointer, which outlives the call.
    let ok = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } == 0;
    TtySize {
        cols: if ok && ws.ws_col > 0 { ws.ws_col } else { 80 },
        rows: if ok && ws.ws_row > 0 { ws.ws_row } else { 24 },
    }
}

/// The size of the terminal on kern's stdin, for the spec (before the stdio is swapped).
pub fn host_size() -> TtySize {
    size_of(io::stdin().as_fd())
}

/// `TERM` for a box with a terminal: the host's, as ssh passes it on, else xterm-256color.
pub fn term() -> String {
    std::env::var("TERM")
        .ok()
        .filter(|t| !t.is_empty() && !t.contains('\0'))
        .unwrap_or_else(|| "xterm-256color".into())
}

/// What goes to kern with the spec: the box's ends.
pub struct BoxSide {
    pub fds: BoxFds,
    /// The monitor's end of the lifeline (with `-t`): the relay ends the box by closing its own.
    pub lifeline: Option<OwnedFd>,
}

/// How the relay ended.
pub struct Finished {
    /// The signal that made kern end the box, if one did.
    pub signal: Option<i32>,
    /// What went wrong with the terminal, if anything did (the box was ended then).
    pub problem: Option<String>,
}

/// The host's side of a box's stdio or terminal.
pub struct Relay {
    mode: Mode,
    /// Where the master comes (`-t`).
    tty: Option<OwnedFd>,
    /// Our end of the lifeline (`-t`).
    lifeline: Option<OwnedFd>,
    /// kern's own stdio, set aside while the box runs (`stdio`).
    host: Option<HostStdio>,
    /// Without -t: the pipes at the box's stdout and stderr, until their relay starts.
    streams: Option<Streams>,
    /// `-i` alone: the host's stdin, and the pipe the workload reads it from.
    feed: Option<(OwnedFd, OwnedFd)>,
    /// Closed to tell the threads the box has ended.
    stop_w: Option<OwnedFd>,
    stop_r: OwnedFd,
    /// The signal handler's pipe (its write end is `SIGNAL_PIPE`).
    signals: Option<(OwnedFd, OwnedFd)>,
    output: Option<JoinHandle<()>>,
    ended_by: Arc<AtomicI32>,
    problem: Arc<Mutex<Option<String>>>,
    finished: bool,
}

impl Relay {
    /// Makes the box's ends for `mode`, and swaps kern's stdio away from the host's, in every
    /// mode (`stdio`), so this comes after anything kern still says on its own before the box.
    pub fn new(mode: Mode) -> io::Result<(Relay, BoxSide)> {
        let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let mut side = BoxSide {
            fds: BoxFds::default(),
            lifeline: None,
        };
        let mut relay = Relay {
            mode,
            tty: None,
            lifeline: None,
            host: None,
            streams: None,
            feed: None,
            stop_w: Some(stop_w),
            stop_r,
            signals: None,
            output: None,
            ended_by: Arc::new(AtomicI32::new(0)),
            problem: Arc::default(),
            finished: false,
        };
        if mode.tty {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
            relay.tty = Some(ours.into());
            side.fds.tty = Some(theirs.into());
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
            relay.lifeline = Some(ours.into());
            side.lifeline = Some(theirs.into());
            // The signal pipe before the swap, so nothing can fail between it and the box.
            let (r, w) =
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
            relay.signals = Some((r, w));
            relay.host = Some(HostStdio::take_for_terminal()?);
        } else {
            if mode.interactive {
                let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
                relay.feed = Some((dup_std(0)?, w));
                side.fds.stdin = Some(r);
            }
            let (host, streams) = HostStdio::take_piped()?;
            relay.host = Some(host);
            relay.streams = Some(streams);
        }
        install_panic_hook();
        Ok((relay, side))
    }

    /// The workload is about to exec: start the threads (kern clones nothing after this).
    pub fn start(&mut self) {
        if let Some((from, into)) = self.feed.take() {
            let spawned = std::thread::Builder::new()
                .name("stdin".into())
                .spawn(move || feed_pipe(from, into));
            if let Err(e) = spawned {
                self.fail(format!("start the stdin relay: {e}"));
            }
        }
        if self.streams.is_some() {
            let relay = self.stream_relay();
            let spawned =
                relay.and_then(|run| std::thread::Builder::new().name("output".into()).spawn(run));
            match spawned {
                Ok(handle) => self.output = Some(handle),
                // What the box writes is still relayed, once it has ended (`finish`).
                Err(e) => self.fail(format!("start the output relay: {e}")),
            }
            return;
        }
        let Some(sock) = self.tty.take() else {
            return;
        };
        let pump = self.pump(sock);
        let spawned = pump.and_then(|pump| {
            std::thread::Builder::new()
                .name("terminal".into())
                .spawn(move || pump.run())
        });
        match spawned {
            Ok(handle) => {
                self.output = Some(handle);
                if let Some((_, w)) = &self.signals {
                    catch_signals(w.as_raw_fd());
                }
            }
            Err(e) => self.fail(format!("start the terminal relay: {e}")),
        }
    }

    /// Without -t: the relay of the box's stdout and stderr, on its own copies.
    fn stream_relay(&mut self) -> io::Result<impl FnOnce() + Send + 'static> {
        let (Some(host), Some(streams)) = (&self.host, self.streams.take()) else {
            return Err(io::Error::other("kern's stdio was not set aside"));
        };
        let (out, err, stop) = (
            host.output.try_clone()?,
            host.errors.try_clone()?,
            self.stop_r.try_clone()?,
        );
        Ok(move || relay_streams(streams, out, err, stop))
    }

    /// The terminal relay's state, its own copies.
    fn pump(&mut self, sock: OwnedFd) -> io::Result<Pump> {
        let (Some(host), Some((signals, _))) = (&self.host, &self.signals) else {
            return Err(io::Error::other("kern's stdio was not set aside"));
        };
        Ok(Pump {
            sock,
            host_in: host.input.try_clone()?,
            host_out: host.output.try_clone()?,
            interactive: self.mode.interactive,
            signals: signals.try_clone()?,
            stop: self.stop_r.try_clone()?,
            lifeline: self.lifeline.take(),
            ended_by: self.ended_by.clone(),
            problem: self.problem.clone(),
        })
    }

    /// A relay that can't run: the box would be unreachable, so it ends (the lifeline closes).
    fn fail(&mut self, why: String) {
        self.lifeline = None;
        if let Ok(mut p) = self.problem.lock() {
            p.get_or_insert(why);
        }
    }

    /// The box has ended (kern's report is in): the relay stops, and the host's terminal and
    /// kern's stdio are put back. What the box's init and kern wrote meanwhile goes to stderr.
    pub fn finish(&mut self) -> Finished {
        if !self.finished {
            self.finished = true;
            // Its EOF is every thread's "stop".
            self.stop_w = None;
            if let Some(h) = self.output.take() {
                let _ = h.join();
            }
            // A box that ended before its workload started: what it said is in the pipes.
            if self.streams.is_some() {
                if let Ok(run) = self.stream_relay() {
                    run();
                }
            }
            uncatch_signals();
            self.signals = None;
            restore_terminal();
            if let Some(host) = self.host.take() {
                host.give_back();
            }
            self.lifeline = None;
        }
        let signal = match self.ended_by.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        };
        let problem = self.problem.lock().ok().and_then(|mut p| p.take());
        Finished { signal, problem }
    }
}

impl Drop for Relay {
    /// An early return (an error before or after the box) leaves nothing swapped or raw.
    fn drop(&mut self) {
        self.finish();
    }
}

/// The host terminal's settings before raw mode, for every path that restores them: the
/// relay, `Relay::finish`, the panic hook and the signal handler (which can only read statics).
static SAVED: OnceLock<(RawFd, libc::termios)> = OnceLock::new();
/// Whether the host terminal is raw now.
static RAW: AtomicBool = AtomicBool::new(false);

/// Puts the terminal on `fd` in raw mode, once per process.
fn enter_raw(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut before = std::mem::MaybeUninit::<libc::termios>::uninit();
    // SAFETY: tcgetattr fills the termios the pointer points to, or fails and touches nothing.
    if unsafe { libc::tcgetattr(fd.as_raw_fd(), before.as_mut_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: tcgetattr succeeded, so it is initialised.
    let before = unsafe { before.assume_init() };
    if SAVED.set((fd.as_raw_fd(), before)).is_err() {
        return Ok(());
    }
    let mut raw = before;
    // SAFETY: cfmakeraw only rewrites the flags of the termios it is given.
    unsafe { libc::cfmakeraw(&mut raw) };
    // SAFETY: tcsetattr reads the termios, which outlives the call.
    if unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSANOW, &raw) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // Only now: a signal that comes before finds nothing to restore, and the relay restores
    // when it reads that signal from its pipe.
    RAW.store(true, Ordering::SeqCst);
    Ok(())
}

/// Puts the host terminal back as it was; once, whoever comes first. Async-signal-safe.
fn restore_terminal() {
    if RAW.swap(false, Ordering::SeqCst) {
        if let Some((fd, before)) = SAVED.get() {
            // SAFETY: tcsetattr reads the saved termios, a static. The fd is the relay's
            // duplicate of the host's stdin, open while RAW is set (`Relay::finish` restores
            // before it closes it).
            unsafe { libc::tcsetattr(*fd, libc::TCSANOW, before) };
        }
    }
}

/// A panic must not leave the host's terminal raw, nor its message in the pipe.
fn install_panic_hook() {
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        let errors = HOST_STDERR.load(Ordering::SeqCst);
        if errors >= 0 {
            // SAFETY: dup2 on integer fds touches no memory; `errors` is open while set.
            unsafe { libc::dup2(errors, 2) };
        }
        before(info);
    }));
}

/// The signal handler's pipe (-1: none).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
/// Set by the first ending signal: a second one ends kern at once.
static ENDING_SEEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: only async-signal-safe calls (write, tcsetattr, signal, raise), errno kept.
    unsafe {
        let errno = *libc::__errno_location();
        if ENDING.contains(&sig) && ENDING_SEEN.swap(true, Ordering::SeqCst) {
            restore_terminal();
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        let fd = SIGNAL_PIPE.load(Ordering::SeqCst);
        if fd >= 0 {
            let b = sig as u8;
            libc::write(fd, (&b as *const u8).cast(), 1);
        }
        *libc::__errno_location() = errno;
    }
}

/// The relay's signals: SIGWINCH and the ending ones, to the pipe `fd` writes to. SA_RESTART:
/// the monitor's waitpid on the main thread must not see EINTR.
fn catch_signals(fd: RawFd) {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    SIGNAL_PIPE.store(fd, Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in ENDING.into_iter().chain([libc::SIGWINCH]) {
        if let Ok(s) = Signal::try_from(sig) {
            // SAFETY: the handler does only async-signal-safe work (see `on_signal`).
            let _ = unsafe { sigaction(s, &action) };
        }
    }
}

/// Back to the default dispositions once the relay is gone.
fn uncatch_signals() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    if SIGNAL_PIPE.swap(-1, Ordering::SeqCst) < 0 {
        return;
    }
    for sig in ENDING.into_iter().chain([libc::SIGWINCH]) {
        if let Ok(s) = Signal::try_from(sig) {
            // SAFETY: SIG_DFL installs no handler of ours.
            let _ = unsafe { signal(s, SigHandler::SigDfl) };
        }
    }
}

/// The terminal relay's thread: everything it needs, owned.
struct Pump {
    /// The master comes on it.
    sock: OwnedFd,
    host_in: OwnedFd,
    host_out: OwnedFd,
    interactive: bool,
    signals: OwnedFd,
    stop: OwnedFd,
    /// Dropped to end the box; held otherwise until the thread ends (a panic drops it too).
    lifeline: Option<OwnedFd>,
    ended_by: Arc<AtomicI32>,
    problem: Arc<Mutex<Option<String>>>,
}

/// What woke the relay.
enum Woke {
    Stop,
    Signals,
    Ready,
}

impl Pump {
    fn run(mut self) {
        if let Err(why) = self.relay() {
            // A box nobody can reach: it ends.
            self.lifeline = None;
            if let Ok(mut p) = self.problem.lock() {
                p.get_or_insert(why);
            }
        }
        restore_terminal();
        // The lifeline stays open until the box has ended on its own: closing it earlier would
        // kill a box whose workload is just exiting.
        while !matches!(self.wait(None), Woke::Stop) {
            self.take_signals(None);
        }
        // One that came with the box's end still counts (the stop is looked at first).
        self.take_signals(None);
    }

    /// Until the box ends: the master, then its output to the host.
    fn relay(&mut self) -> Result<(), String> {
        let (master, ended) = loop {
            match self.wait(Some(self.sock.as_fd())) {
                // A short-lived workload can end before its master was taken: it is still in
                // the socket then, with the output in it.
                Woke::Stop if readable(self.sock.as_fd()) => match self.receive()? {
                    Some(m) => break (m, true),
                    None => return Ok(()),
                },
                Woke::Stop => return Ok(()),
                Woke::Signals => {
                    if self.take_signals(None) {
                        return Ok(());
                    }
                }
                Woke::Ready => match self.receive()? {
                    Some(m) => break (m, false),
                    None => return Ok(()),
                },
            }
        };
        let mut buf = vec![0u8; 64 * 1024];
        let mut open = true;
        let mut out_ok = true;
        if !ended {
            self.start_input(&master)?;
            loop {
                match self.wait(open.then(|| master.as_fd())) {
                    Woke::Stop => break,
                    Woke::Signals => {
                        self.take_signals(Some(master.as_fd()));
                    }
                    Woke::Ready => match nix::unistd::read(&master, &mut buf) {
                        Ok(n @ 1..) => {
                            // The host's stdout gone, the box's output is still read (and
                            // dropped), so the box never blocks on a full terminal.
                            out_ok = out_ok && write_all(self.host_out.as_fd(), &buf[..n]).is_ok();
                        }
                        Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
                        // EIO: no process holds the terminal any more.
                        Ok(0) | Err(_) => open = false,
                    },
                }
            }
        }
        // The box (or the call) has ended: what its terminal holds, then done. Bounded: a
        // process a call left running in a resident box may still be writing to it.
        let mut left = DRAIN_MAX;
        while open && out_ok && left > 0 && readable(master.as_fd()) {
            match nix::unistd::read(&master, &mut buf) {
                Ok(n @ 1..) => {
                    left = left.saturating_sub(n);
                    out_ok = write_all(self.host_out.as_fd(), &buf[..n]).is_ok();
                }
                _ => open = false,
            }
        }
        Ok(())
    }

    /// The master from the box; None if the box ended before its terminal opened (its report
    /// says why).
    fn receive(&self) -> Result<Option<OwnedFd>, String> {
        pty::receive_master(&self.sock).map_err(|e| format!("the box's terminal: {e}"))
    }

    /// The box's terminal is live: the host's is made raw (with -i), its size is set again (it
    /// may have changed since the spec), and the input thread starts (with -i).
    fn start_input(&self, master: &OwnedFd) -> Result<(), String> {
        // Raw only when the keys go to the box: with -t alone, ^C stays this terminal's SIGINT,
        // which ends the box.
        if self.interactive && nix::unistd::isatty(self.host_in.as_fd()).unwrap_or(false) {
            enter_raw(self.host_in.as_fd())
                .map_err(|e| format!("put this terminal in raw mode: {e}"))?;
        }
        let _ = pty::set_size(master.as_fd(), size_of(self.host_in.as_fd()));
        if self.interactive {
            let (from, into, stop) = (|| {
                Ok::<_, io::Error>((
                    self.host_in.try_clone()?,
                    master.try_clone()?,
                    self.stop.try_clone()?,
                ))
            })()
            .map_err(|e| format!("the terminal's input: {e}"))?;
            std::thread::Builder::new()
                .name("terminal-input".into())
                .spawn(move || feed_terminal(from, into, stop))
                .map_err(|e| format!("start the terminal's input: {e}"))?;
        }
        Ok(())
    }

    /// Waits for the stop, a signal, or `fd`.
    fn wait(&self, fd: Option<BorrowedFd<'_>>) -> Woke {
        loop {
            let mut fds = vec![
                PollFd::new(self.stop.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
            ];
            fds.extend(fd.map(|f| PollFd::new(f, PollFlags::POLLIN)));
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                // poll on three valid descriptors does not fail otherwise; treat it as the end.
                Err(_) => return Woke::Stop,
            }
            let ready = |i: usize| {
                fds.get(i)
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty())
            };
            if ready(0) {
                return Woke::Stop;
            }
            if ready(1) {
                return Woke::Signals;
            }
            if ready(2) {
                return Woke::Ready;
            }
        }
    }

    /// Acts on the signals caught: SIGWINCH resizes `master`; an ending one restores the host's
    /// terminal and ends the box. True if the box is being ended.
    fn take_signals(&mut self, master: Option<BorrowedFd<'_>>) -> bool {
        let mut caught = Vec::new();
        sys::read_available(&self.signals, &mut caught);
        for sig in caught.into_iter().map(libc::c_int::from) {
            if sig == libc::SIGWINCH {
                if let Some(m) = master {
                    let _ = pty::set_size(m, size_of(self.host_in.as_fd()));
                }
            } else if ENDING.contains(&sig) {
                let _ = self
                    .ended_by
                    .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                restore_terminal();
                self.lifeline = None;
            }
        }
        self.lifeline.is_none()
    }
}

/// The host's stdin (a terminal, `check`) to the box's terminal, until the stop or its
/// hang-up.
fn feed_terminal(from: OwnedFd, into: OwnedFd, stop: OwnedFd) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut fds = [
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            PollFd::new(from.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
        if ready(&fds[0]) {
            return;
        }
        if !ready(&fds[1]) {
            continue;
        }
        match nix::unistd::read(&from, &mut buf) {
            Ok(n @ 1..) => {
                if write_all(into.as_fd(), &buf[..n]).is_err() {
                    return;
                }
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            Ok(0) | Err(_) => return,
        }
    }
}

/// `-i` alone: the host's stdin into the workload's pipe; closing it at EOF is the workload's.
/// Never joined: it may sit in a read of the host's stdin when the box ends.
fn feed_pipe(from: OwnedFd, into: OwnedFd) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match nix::unistd::read(&from, &mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if write_all(into.as_fd(), &buf[..n]).is_err() {
                    // EPIPE: the workload is gone, or closed its stdin.
                    return;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                let mut fds = [PollFd::new(from.as_fd(), PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::NONE);
            }
            Err(_) => return,
        }
    }
}
