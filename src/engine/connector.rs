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
use super::sys::{self, Forked};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

/// How long the connector waits for the box's listener to accept (its backlog may be full).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the caller waits for the connector's answer: a dial's timeout and some.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a `connect` did not give a socket.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("nothing in the box accepts connections on 127.0.0.1:{port} ({why})")]
    Refused { port: u16, why: io::Error },
    #[error("the box's connector is gone: the process's box has ended, or something in the box ended the connector")]
    Gone,
    #[error("the box's connector did not answer within {} s", ANSWER_TIMEOUT.as_secs())]
    NoAnswer,
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
pub(super) fn start(line: OwnedFd) -> Result<(), SetupError> {
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
        let mut port = [0u8; 2];
        // The caller gone (EOF) ends the connector.
        match nix::sys::socket::recv(
            line.as_raw_fd(),
            &mut port,
            nix::sys::socket::MsgFlags::empty(),
        ) {
            Ok(2) => {}
            Ok(0) | Err(_) => sys::exit_now(0),
            Ok(_) => continue,
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, u16::from_be_bytes(port)));
        let sent = match TcpStream::connect_timeout(&addr, DIAL_TIMEOUT) {
            Ok(s) => sys::send_with_fds(line.as_fd(), &answer(0), &[s.as_raw_fd()]),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                sys::send_with_fds(line.as_fd(), &answer(errno), &[])
            }
        };
        if sent.is_err() {
            sys::exit_now(0);
        }
    }
}

/// An answer: `o` with the socket, or `e` and the errno.
fn answer(errno: i32) -> [u8; 5] {
    let mut a = [if errno == 0 { b'o' } else { b'e' }; 5];
    a[1..].copy_from_slice(&errno.to_be_bytes());
    a
}

/// The caller's side (blocking; one request at a time per line): asks for `port` and checks
/// what comes back is a TCP socket connected to `127.0.0.1:port`.
pub fn dial(line: &OwnedFd, port: u16) -> Result<OwnedFd, DialError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::socket::{getsockopt, send, sockopt, MsgFlags, SockType};
    match send(
        line.as_raw_fd(),
        &port.to_be_bytes(),
        MsgFlags::MSG_NOSIGNAL,
    ) {
        Ok(_) => {}
        Err(nix::errno::Errno::EPIPE | nix::errno::Errno::ECONNRESET) => {
            return Err(DialError::Gone)
        }
        Err(e) => return Err(DialError::Io(e.into())),
    }
    let mut fds = [PollFd::new(line.as_fd(), PollFlags::POLLIN)];
    let ms = ANSWER_TIMEOUT.as_millis() as u16;
    if poll(&mut fds, PollTimeout::from(ms)).map_err(io::Error::from)? == 0 {
        return Err(DialError::NoAnswer);
    }
    let mut buf = [0u8; 5];
    let (n, got) = sys::recv_with_fds(line.as_raw_fd(), &mut buf)?;
    if n == 0 {
        return Err(DialError::Gone);
    }
    let errno = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    match (n, buf[0], got.into_iter().next()) {
        (5, b'o', Some(sock)) => {
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
        (5, b'e', None) => Err(DialError::Refused {
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

    /// Runs `answer` as the connector for one request: it reads the port asked and replies.
    fn with_connector(answer: impl FnOnce(&OwnedFd, u16) + Send + 'static) -> OwnedFd {
        let (ours, theirs) = pair().expect("pair");
        std::thread::spawn(move || {
            let mut port = [0u8; 2];
            let n = nix::sys::socket::recv(
                theirs.as_raw_fd(),
                &mut port,
                nix::sys::socket::MsgFlags::empty(),
            )
            .expect("the request");
            assert_eq!(n, 2);
            answer(&theirs, u16::from_be_bytes(port));
            // Held until the caller has read the answer (EOF would read as `Gone`).
            let _ = nix::sys::socket::recv(
                theirs.as_raw_fd(),
                &mut port,
                nix::sys::socket::MsgFlags::empty(),
            );
        });
        ours
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
        let line = with_connector(move |c, _| send(c, &answer(0), &[s.as_raw_fd()]));
        let got = TcpStream::from(dial(&line, port).expect("a good answer"));
        assert_eq!(
            got.peer_addr().expect("peer"),
            SocketAddr::from((Ipv4Addr::LOCALHOST, port))
        );
    }

    #[test]
    fn control_the_errno_comes_back_as_refused() {
        let line = with_connector(|c, _| send(c, &answer(libc::ECONNREFUSED), &[]));
        match dial(&line, 4242) {
            Err(DialError::Refused { port: 4242, why }) => {
                assert_eq!(why.raw_os_error(), Some(libc::ECONNREFUSED))
            }
            other => panic!("expected Refused, got {other:?}"),
        }
    }

    #[test]
    fn a_pipe_is_refused() {
        let (r, _w) = nix::unistd::pipe().expect("pipe");
        let line = with_connector(move |c, _| send(c, &answer(0), &[r.as_raw_fd()]));
        assert_bad(dial(&line, 4242), 4242, "a pipe");
    }

    #[test]
    fn a_udp_socket_connected_to_the_port_is_refused() {
        let peer = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = peer.local_addr().expect("addr").port();
        let u = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        u.connect((Ipv4Addr::LOCALHOST, port)).expect("connect");
        let line = with_connector(move |c, _| send(c, &answer(0), &[u.as_raw_fd()]));
        assert_bad(dial(&line, port), port, "a UDP socket");
    }

    #[test]
    fn a_tcp_socket_connected_to_another_port_is_refused() {
        let (other, s) = connected();
        let asked = port_of(&other).wrapping_add(1).max(1);
        let line = with_connector(move |c, _| send(c, &answer(0), &[s.as_raw_fd()]));
        assert_bad(dial(&line, asked), asked, "TCP to another port");
    }

    #[test]
    fn a_listening_tcp_socket_on_the_port_is_refused() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = port_of(&l);
        let line = with_connector(move |c, _| send(c, &answer(0), &[l.as_raw_fd()]));
        assert_bad(dial(&line, port), port, "a listener, connected to nothing");
    }

    #[test]
    fn a_unix_stream_socket_is_refused() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let line = with_connector(move |c, _| send(c, &answer(0), &[a.as_raw_fd()]));
        assert_bad(dial(&line, 4242), 4242, "a unix stream socket");
    }

    #[test]
    fn an_ok_without_a_socket_is_refused() {
        let line = with_connector(|c, _| send(c, &answer(0), &[]));
        assert_bad(dial(&line, 4242), 4242, "'o' and no fd");
    }

    #[test]
    fn garbage_is_refused_with_or_without_a_socket() {
        let line = with_connector(|c, _| send(c, b"\xffgarbage", &[]));
        assert_bad(dial(&line, 4242), 4242, "garbage bytes");
        let (l, s) = connected();
        let port = port_of(&l);
        let line = with_connector(move |c, _| send(c, b"zzzzz", &[s.as_raw_fd()]));
        assert_bad(dial(&line, port), port, "garbage with a good socket");
        let (l, s) = connected();
        let port = port_of(&l);
        let line = with_connector(move |c, _| send(c, b"o", &[s.as_raw_fd()]));
        assert_bad(dial(&line, port), port, "a short 'o' with a good socket");
    }

    #[test]
    fn an_error_answer_carrying_a_socket_is_refused() {
        let (l, s) = connected();
        let port = port_of(&l);
        let line =
            with_connector(move |c, _| send(c, &answer(libc::ECONNREFUSED), &[s.as_raw_fd()]));
        assert_bad(dial(&line, port), port, "'e' with an fd");
    }
}
