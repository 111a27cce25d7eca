//! `SandboxProcess.connect(port)`: a TCP connection from the host to `127.0.0.1:<port>` inside a
//! box, with nothing listening on a host port and the box's network unchanged. The box's PID 1
//! forks the connector once the mounts and `lo` are up (`spec.connector`); it holds one end of a
//! seqpacket pair whose other end only the caller has (`BoxFds::connect`). Asked for a port, it
//! dials it on the box's loopback and hands the connected socket back (SCM_RIGHTS), or the
//! errno. The host then talks to the box's service through a socket of the box's namespace;
//! the connector can only answer, so nothing in the box can make the host dial anything.
//! Like the egress relay (`relay`), it runs without capabilities or new privileges; it is
//! also non-dumpable, so a workload of the same account can't trace it.

use super::mounts::SetupError;
use crate::engine::shared::sys::{self, Forked};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

/// How long the connector waits for the box's listener to accept (its backlog may be full).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the caller waits for the connector's answer: a dial's timeout and some.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request: its id, then the port (both big-endian).
const REQUEST_LEN: usize = 10;
/// An answer: `o` or `e`, the errno, then the id of the request it answers.
const ANSWER_LEN: usize = 13;

/// Why a `connect` did not give a socket.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("nothing in the box accepts connections on 127.0.0.1:{port} ({why})")]
    Refused { port: u16, why: io::Error },
    #[error("the box's connector is gone: the process's box has ended, or something in the box ended the connector")]
    Gone,
    #[error("the box's connector did not answer the request for 127.0.0.1:{port} within {} s: something in the box stopped or stalled it (an answer that comes later is discarded, never taken for another request's); connect() again once the box's processes run", ANSWER_TIMEOUT.as_secs())]
    NoAnswer { port: u16 },
    #[error("the box's connector has not taken its earlier requests (something in the box stopped or stalled it), so no more can be queued; connect() again once the box's processes run")]
    Busy,
    #[error("the box's connector answered with something else than a socket to 127.0.0.1:{port}")]
    Bad { port: u16 },
    #[error("asking the box's connector: {0}")]
    Io(#[from] io::Error),
}

/// The pair: the caller's end and the box's (`BoxFds::connect`). Seqpacket, so a request and
/// an answer are each one message, with the socket riding on the answer.
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    Ok(socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?)
}

/// In PID 1: forks the connector with `line`; PID 1 keeps nothing of it.
pub(in crate::engine) fn start(line: OwnedFd) -> Result<(), SetupError> {
    match sys::clone_fork(0) {
        Ok(Forked::Child) => serve(line),
        Ok(Forked::Parent(_)) => Ok(()),
        Err(e) => Err(SetupError(format!("connector: fork: {e}"))),
    }
}

fn serve(line: OwnedFd) -> ! {
    sys::close_others(&[line.as_raw_fd()]);
    // Nothing to say on kern's output pipes, and no reason to hold them open.
    let _ = sys::detach_fds(&[1, 2]);
    let _ = nix::sys::prctl::set_dumpable(false);
    if sys::capset_clear().is_err() || nix::sys::prctl::set_no_new_privs().is_err() {
        sys::exit_now(1);
    }
    loop {
        let mut req = [0u8; REQUEST_LEN];
        // The caller gone (EOF) ends the connector.
        match nix::sys::socket::recv(
            line.as_raw_fd(),
            &mut req,
            nix::sys::socket::MsgFlags::empty(),
        ) {
            Ok(REQUEST_LEN) => {}
            Ok(0) | Err(_) => sys::exit_now(0),
            Ok(_) => continue,
        }
        let id = u64::from_be_bytes([
            req[0], req[1], req[2], req[3], req[4], req[5], req[6], req[7],
        ]);
        let port = u16::from_be_bytes([req[8], req[9]]);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let sent = match TcpStream::connect_timeout(&addr, DIAL_TIMEOUT) {
            Ok(s) => sys::send_with_fds(line.as_fd(), &answer(id, 0), &[s.as_raw_fd()]),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                sys::send_with_fds(line.as_fd(), &answer(id, errno), &[])
            }
        };
        if sent.is_err() {
            sys::exit_now(0);
        }
    }
}

/// The answer to request `id`: `o` with the socket, or `e` and the errno.
fn answer(id: u64, errno: i32) -> [u8; ANSWER_LEN] {
    let mut a = [0u8; ANSWER_LEN];
    a[0] = if errno == 0 { b'o' } else { b'e' };
    a[1..5].copy_from_slice(&errno.to_be_bytes());
    a[5..].copy_from_slice(&id.to_be_bytes());
    a
}

/// The caller's end of a connector's line. Every request carries an id the connector echoes,
/// so an answer is only ever taken for its own request: one that comes after its request was
/// given up on (a connector stopped or stalled by the box), or twice, is discarded with its
/// socket, and the requests after it are not put one behind.
pub struct Line {
    fd: OwnedFd,
    next: u64,
}

impl Line {
    pub fn new(fd: OwnedFd) -> Line {
        Line { fd, next: 1 }
    }

    /// Asks for `port` (blocking; one request at a time per line) and checks that what comes
    /// back answers this request and is a TCP socket connected to `127.0.0.1:port`.
    pub fn dial(&mut self, port: u16) -> Result<OwnedFd, DialError> {
        use nix::sys::socket::{send, MsgFlags};
        let id = self.next;
        self.next += 1;
        // Answers already queued answer requests given up on: gone before this one is asked.
        while self.readable(Duration::ZERO)? {
            self.recv()?;
        }
        let mut req = [0u8; REQUEST_LEN];
        req[..8].copy_from_slice(&id.to_be_bytes());
        req[8..].copy_from_slice(&port.to_be_bytes());
        // Never blocks: a connector that takes no requests fills the line, which says so.
        match send(
            self.fd.as_raw_fd(),
            &req,
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(_) => {}
            Err(nix::errno::Errno::EPIPE | nix::errno::Errno::ECONNRESET) => {
                return Err(DialError::Gone)
            }
            Err(nix::errno::Errno::EAGAIN) => return Err(DialError::Busy),
            Err(e) => return Err(DialError::Io(e.into())),
        }
        let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || !self.readable(left)? {
                return Err(DialError::NoAnswer { port });
            }
            let (buf, fds) = self.recv()?;
            // Not the answer's size or kind: nothing an honest connector sends.
            let Some((kind, errno, of)) = parse(&buf) else {
                return Err(DialError::Bad { port });
            };
            match of.cmp(&id) {
                // A late or repeated answer to an earlier request: its socket is closed here.
                std::cmp::Ordering::Less => continue,
                // An answer to a request not yet made: the connector is not ours to trust.
                std::cmp::Ordering::Greater => return Err(DialError::Bad { port }),
                std::cmp::Ordering::Equal => return take(kind, errno, fds, port),
            }
        }
    }

    /// Whether an answer (or the end) is there within `wait`.
    fn readable(&self, wait: Duration) -> Result<bool, DialError> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let until = std::time::Instant::now() + wait;
        loop {
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            let left = until.saturating_duration_since(std::time::Instant::now());
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(n) => return Ok(n > 0),
                // A signal to this thread (the host's SIGCHLD of any child) is not the
                // connector's silence: wait out the rest.
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(DialError::Io(e.into())),
            }
        }
    }

    /// One message and the descriptors on it; the end of the line is `Gone`.
    fn recv(&self) -> Result<(Vec<u8>, Vec<OwnedFd>), DialError> {
        // Larger than an answer, so a longer message is seen for what it is.
        let mut buf = [0u8; 64];
        // A box that ends while a request is out resets the line rather than closing it.
        let (n, fds) = match sys::recv_with_fds(self.fd.as_raw_fd(), &mut buf) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => {
                return Err(DialError::Gone)
            }
            r => r?,
        };
        if n == 0 {
            return Err(DialError::Gone);
        }
        Ok((buf[..n].to_vec(), fds))
    }
}

/// An answer's kind, errno and request id.
fn parse(buf: &[u8]) -> Option<(u8, i32, u64)> {
    let a: &[u8; ANSWER_LEN] = buf.try_into().ok()?;
    let errno = i32::from_be_bytes([a[1], a[2], a[3], a[4]]);
    let id = u64::from_be_bytes([a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12]]);
    matches!(a[0], b'o' | b'e').then_some((a[0], errno, id))
}

/// This request's answer: only one TCP socket connected to `127.0.0.1:port`, or an errno and
/// no socket.
fn take(kind: u8, errno: i32, fds: Vec<OwnedFd>, port: u16) -> Result<OwnedFd, DialError> {
    use nix::sys::socket::{getsockopt, sockopt, SockType};
    let mut fds = fds.into_iter();
    match (kind, fds.next(), fds.next()) {
        (b'o', Some(sock), None) => {
            let tcp = getsockopt(&sock, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
            let sock = TcpStream::from(sock);
            let to_port = sock
                .peer_addr()
                .is_ok_and(|p| p == SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
            if !(tcp && to_port) {
                return Err(DialError::Bad { port });
            }
            Ok(sock.into())
        }
        (b'e', None, None) => Err(DialError::Refused {
            port,
            why: io::Error::from_raw_os_error(errno),
        }),
        _ => Err(DialError::Bad { port }),
    }
}

#[cfg(test)]
mod tests {
    //! `dial` against a fake connector on the box's end of a real `pair()`: whatever the box
    //! answers, only a TCP socket connected to `127.0.0.1:<the port asked>` comes back.
    use super::*;
    use std::net::{TcpListener, UdpSocket};
    use std::os::fd::RawFd;

    /// Runs `answer` as the connector for one request: it reads the request and replies.
    fn with_connector(answer: impl FnOnce(&OwnedFd, u64, u16) + Send + 'static) -> Line {
        let (ours, theirs) = pair().expect("pair");
        std::thread::spawn(move || {
            let (id, port) = request(&theirs);
            answer(&theirs, id, port);
            // Held until the caller has read the answer (EOF would read as `Gone`).
            let mut rest = [0u8; REQUEST_LEN];
            let _ = nix::sys::socket::recv(
                theirs.as_raw_fd(),
                &mut rest,
                nix::sys::socket::MsgFlags::empty(),
            );
        });
        Line::new(ours)
    }

    /// The next request on the box's end: its id and port.
    fn request(theirs: &OwnedFd) -> (u64, u16) {
        let mut req = [0u8; 32];
        let n = nix::sys::socket::recv(
            theirs.as_raw_fd(),
            &mut req,
            nix::sys::socket::MsgFlags::empty(),
        )
        .expect("the request");
        assert_eq!(n, REQUEST_LEN);
        let id = u64::from_be_bytes(req[..8].try_into().expect("8 bytes"));
        (id, u16::from_be_bytes([req[8], req[9]]))
    }

    fn send(line: &OwnedFd, bytes: &[u8], fds: &[RawFd]) {
        sys::send_with_fds(line.as_fd(), bytes, fds).expect("the answer");
    }

    /// A listener on the host's loopback, and a socket connected to it.
    fn connected() -> (TcpListener, TcpStream) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let s = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        (l, s)
    }

    fn port_of(l: &TcpListener) -> u16 {
        l.local_addr().expect("addr").port()
    }

    #[track_caller]
    fn assert_bad(r: Result<OwnedFd, DialError>, port: u16, what: &str) {
        match r {
            Err(DialError::Bad { port: p }) => assert_eq!(p, port, "{what}"),
            other => panic!("{what}: expected DialError::Bad, got {other:?}"),
        }
    }

    #[test]
    fn control_a_tcp_socket_to_the_port_asked_is_taken() {
        let (l, s) = connected();
        let port = port_of(&l);
        let mut line = with_connector(move |c, id, _| send(c, &answer(id, 0), &[s.as_raw_fd()]));
        let got = TcpStream::from(line.dial(port).expect("a good answer"));
        assert_eq!(
            got.peer_addr().expect("peer"),
            SocketAddr::from((Ipv4Addr::LOCALHOST, port))
        );
    }

    #[test]
    fn control_the_errno_comes_back_as_refused() {
        let mut line = with_connector(|c, id, _| send(c, &answer(id, libc::ECONNREFUSED), &[]));
        match line.dial(4242) {
            Err(DialError::Refused { port: 4242, why }) => {
                assert_eq!(why.raw_os_error(), Some(libc::ECONNREFUSED))
            }
            other => panic!("expected Refused, got {other:?}"),
        }
    }

    #[test]
    fn a_box_that_ends_with_a_request_unread_is_gone() {
        // The box's end closes with the request still queued: the caller's recv sees a reset,
        // not an EOF, and that too is the box ending (a CI run once said "os error 104").
        let (ours, theirs) = pair().expect("pair");
        let mut line = Line::new(ours);
        let closer = std::thread::spawn(move || {
            let mut fds = [nix::poll::PollFd::new(
                theirs.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).expect("poll");
            drop(theirs);
        });
        match line.dial(4242) {
            Err(DialError::Gone) => {}
            other => panic!("expected Gone, got {other:?}"),
        }
        closer.join().expect("closer");
    }

    #[test]
    fn signals_to_the_waiting_thread_are_not_the_connectors_silence() {
        // The addon's thread waiting for an answer gets the host's signals (SIGCHLD of any
        // child of Node): an interrupted wait once read as "no answer within 10 s" at once.
        use nix::sys::pthread::{pthread_kill, pthread_self};
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        extern "C" fn nothing(_: libc::c_int) {}
        let act = SigAction::new(
            SigHandler::Handler(nothing),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler does nothing, so it is async-signal-safe; SIGUSR2 is used by
        // nothing else in this test binary.
        unsafe { sigaction(Signal::SIGUSR2, &act) }.expect("sigaction");
        let waiter = pthread_self();
        let (l, s) = connected();
        let port = port_of(&l);
        let mut line = with_connector(move |c, id, _| {
            // Signals while the caller waits (the request is out), then the answer.
            for _ in 0..200 {
                pthread_kill(waiter, Signal::SIGUSR2).expect("pthread_kill");
                std::thread::sleep(Duration::from_millis(1));
            }
            send(c, &answer(id, 0), &[s.as_raw_fd()]);
        });
        line.dial(port).expect("the answer, after the signals");
    }

    #[test]
    fn a_pipe_is_refused() {
        let (r, _w) = nix::unistd::pipe().expect("pipe");
        let mut line = with_connector(move |c, id, _| send(c, &answer(id, 0), &[r.as_raw_fd()]));
        assert_bad(line.dial(4242), 4242, "a pipe");
    }

    #[test]
    fn a_udp_socket_connected_to_the_port_is_refused() {
        let peer = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = peer.local_addr().expect("addr").port();
        let u = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        u.connect((Ipv4Addr::LOCALHOST, port)).expect("connect");
        let mut line = with_connector(move |c, id, _| send(c, &answer(id, 0), &[u.as_raw_fd()]));
        assert_bad(line.dial(port), port, "a UDP socket");
    }

    #[test]
    fn a_tcp_socket_connected_to_another_port_is_refused() {
        let (other, s) = connected();
        let asked = port_of(&other).wrapping_add(1).max(1);
        let mut line = with_connector(move |c, id, _| send(c, &answer(id, 0), &[s.as_raw_fd()]));
        assert_bad(line.dial(asked), asked, "TCP to another port");
    }

    #[test]
    fn a_listening_tcp_socket_on_the_port_is_refused() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = port_of(&l);
        let mut line = with_connector(move |c, id, _| send(c, &answer(id, 0), &[l.as_raw_fd()]));
        assert_bad(line.dial(port), port, "a listener, connected to nothing");
    }

    #[test]
    fn a_unix_stream_socket_is_refused() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let mut line = with_connector(move |c, id, _| send(c, &answer(id, 0), &[a.as_raw_fd()]));
        assert_bad(line.dial(4242), 4242, "a unix stream socket");
    }

    #[test]
    fn an_ok_without_a_socket_is_refused() {
        let mut line = with_connector(|c, id, _| send(c, &answer(id, 0), &[]));
        assert_bad(line.dial(4242), 4242, "'o' and no fd");
    }

    #[test]
    fn garbage_is_refused_with_or_without_a_socket() {
        let mut line = with_connector(|c, _, _| send(c, b"\xffgarbage", &[]));
        assert_bad(line.dial(4242), 4242, "garbage bytes");
        let (l, s) = connected();
        let port = port_of(&l);
        let mut line = with_connector(move |c, _, _| send(c, b"zzzzz", &[s.as_raw_fd()]));
        assert_bad(line.dial(port), port, "garbage with a good socket");
        let (l, s) = connected();
        let port = port_of(&l);
        let mut line = with_connector(move |c, _, _| send(c, b"o", &[s.as_raw_fd()]));
        assert_bad(line.dial(port), port, "a short 'o' with a good socket");
    }

    #[test]
    fn an_error_answer_carrying_a_socket_is_refused() {
        let (l, s) = connected();
        let port = port_of(&l);
        let mut line = with_connector(move |c, id, _| {
            send(c, &answer(id, libc::ECONNREFUSED), &[s.as_raw_fd()])
        });
        assert_bad(line.dial(port), port, "'e' with an fd");
    }

    /// A connected pair on the host's loopback, for an answer to carry: the listener (kept, so
    /// the port stays ours) and the dialled end.
    fn good_socket() -> (TcpListener, TcpStream, u16) {
        let (l, s) = connected();
        let port = port_of(&l);
        (l, s, port)
    }

    #[test]
    fn an_answer_to_an_earlier_request_is_discarded_and_this_ones_taken() {
        let (l, s, port) = good_socket();
        let (_l2, stale, _) = good_socket();
        let stale_local = stale.local_addr().expect("addr");
        let mut line = with_connector(move |c, id, _| {
            // A late answer to the request before (given up on), then this one's.
            send(c, &answer(id - 1, 0), &[stale.as_raw_fd()]);
            send(c, &answer(id, 0), &[s.as_raw_fd()]);
        });
        line.next = 7;
        let got = TcpStream::from(line.dial(port).expect("this request's answer"));
        assert_eq!(
            got.peer_addr().expect("peer"),
            l.local_addr().expect("addr")
        );
        assert_ne!(got.local_addr().expect("local"), stale_local);
    }

    #[test]
    fn a_late_or_repeated_answer_is_not_taken_by_the_next_request() {
        let (ours, theirs) = pair().expect("pair");
        let mut line = Line::new(ours);
        let (_l1, first, port1) = good_socket();
        let (_l2, second, port2) = good_socket();
        let first_local = first.local_addr().expect("addr");
        let second_local = second.local_addr().expect("addr");
        let box_side = std::thread::spawn(move || {
            let (id, _) = request(&theirs);
            send(&theirs, &answer(id, 0), &[first.as_raw_fd()]);
            // The same answer again (and once more with an errno): queued for the next dial.
            send(&theirs, &answer(id, 0), &[first.as_raw_fd()]);
            send(&theirs, &answer(id, libc::ECONNREFUSED), &[]);
            let (id2, _) = request(&theirs);
            assert_eq!(id2, id + 1);
            send(&theirs, &answer(id2, 0), &[second.as_raw_fd()]);
            // Held until the caller is done (its end closing is EOF here).
            let mut rest = [0u8; REQUEST_LEN];
            let _ = nix::sys::socket::recv(
                theirs.as_raw_fd(),
                &mut rest,
                nix::sys::socket::MsgFlags::empty(),
            );
        });
        let a = TcpStream::from(line.dial(port1).expect("the first"));
        assert_eq!(a.local_addr().expect("local"), first_local);
        let b = TcpStream::from(line.dial(port2).expect("the second, its own"));
        assert_eq!(b.local_addr().expect("local"), second_local);
        drop(line);
        box_side.join().expect("the box side");
    }

    #[test]
    fn an_answer_to_a_request_not_made_is_refused() {
        let (_l, s, port) = good_socket();
        let mut line =
            with_connector(move |c, id, _| send(c, &answer(id + 1, 0), &[s.as_raw_fd()]));
        assert_bad(line.dial(port), port, "an id from the future");
    }

    #[test]
    fn an_ok_with_two_sockets_is_refused() {
        let (_l, s, port) = good_socket();
        let (_l2, s2, _) = good_socket();
        let mut line = with_connector(move |c, id, _| {
            send(c, &answer(id, 0), &[s.as_raw_fd(), s2.as_raw_fd()])
        });
        assert_bad(line.dial(port), port, "two sockets");
    }

    #[test]
    fn a_connector_that_takes_no_requests_is_busy_not_a_hang() {
        let (ours, _theirs) = pair().expect("pair");
        let mut line = Line::new(ours);
        // Nobody reads the box's end: requests queue until the line is full. Each would wait
        // for its answer, so this fills the queue directly, as unanswered requests would.
        let req = [0u8; REQUEST_LEN];
        while nix::sys::socket::send(
            line.fd.as_raw_fd(),
            &req,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        )
        .is_ok()
        {}
        match line.dial(80) {
            Err(DialError::Busy) => {}
            other => panic!("expected Busy, got {other:?}"),
        }
    }
}
