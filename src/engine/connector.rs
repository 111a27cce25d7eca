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
    #[error("the process's box has ended; nothing in it can be connected to")]
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
