//! A Jupyter kernel's ZeroMQ sockets as kern holds them: connected through relays of ours that
//! bound what the kernel sends (`Relays`), each read by a task of its own into a bounded queue
//! of the messages that answer the request waited on (`Queue`), with what the readers dropped
//! counted for the next cell's notes (`Readers`).

use crate::config::show_bytes;
use crate::error::{Error, Result};
use crate::lang::jupyter::kernelspec::{self, Channel};
use crate::lang::jupyter::wire::{self, Dropped, Message, Session};
use bytes::Bytes;
use serde_json::json;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zeromq::{Socket, SocketRecv, SocketSend};

/// How long a kernel may take to start and answer `kernel_info_request` (R loads in about a
/// second here; a cold page cache on a slow disk is many times that).
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a kernel has to answer its heartbeat before a cell.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// How many message ids a socket's reader remembers to drop replays (then it starts over).
const SEEN_IDS: usize = 100_000;
/// How many messages, and how many bytes of them, a socket's reader may have queued for the
/// cell; past either it waits (and the kernel with it: IOPub then drops, as for any slow
/// subscriber). One message larger than `QUEUE_BYTES` waits for the queue to be empty. The
/// count holds a whole cell's worth of small results (a call keeps 10,000): at 1,024, a loaded
/// host's consumer fell that far behind a `display()` loop and ipykernel dropped 28 of 10,003
/// (CI, with the guest VMs beside it); the bytes still bound the memory.
const QUEUE_MESSAGES: usize = 16_384;
const QUEUE_BYTES: usize = 16 << 20;

/// A count the readers keep, and how much of it a note already reported.
#[derive(Default)]
pub(super) struct Counted {
    total: AtomicU64,
    reported: AtomicU64,
}

impl Counted {
    fn add(&self, n: u64) {
        self.total.fetch_add(n, Ordering::SeqCst);
    }

    /// (what came since the last call, the total).
    fn fresh(&self) -> (u64, u64) {
        let total = self.total.load(Ordering::SeqCst);
        (total - self.reported.swap(total, Ordering::SeqCst), total)
    }
}

/// What the socket readers share with the kernel.
#[derive(Default)]
pub(super) struct Readers {
    /// Messages dropped for a bad signature.
    bad_signatures: Counted,
    /// Messages over `wire::MAX_MESSAGE_BYTES`, dropped.
    too_large: Counted,
    /// Messages of more than `zmtp::MAX_FRAMES` frames, dropped.
    too_many_frames: Counted,
    /// The request whose answers are wanted now (a cell's execute_request, the start's
    /// kernel_info_request); anything else is dropped by the readers.
    wanted: std::sync::Mutex<Option<String>>,
    /// Output messages (stream, display, error...) that answered no wanted request, and their
    /// bytes: dropped, for the next cell's note.
    unasked: Counted,
    unasked_bytes: Counted,
}

impl Readers {
    pub(super) fn want(&self, id: Option<&str>) {
        if let Ok(mut w) = self.wanted.lock() {
            *w = id.map(str::to_string);
        }
    }

    pub(super) fn wants(&self, m: &Message) -> bool {
        match (self.wanted.lock(), m.parent_id()) {
            (Ok(w), Some(p)) => w.as_deref() == Some(p),
            _ => false,
        }
    }

    /// Counts a message dropped unasked, if it carried output.
    pub(super) fn unasked(&self, m: &Message, bytes: usize) {
        let output = matches!(
            m.msg_type(),
            "stream" | "display_data" | "execute_result" | "update_display_data" | "error"
        );
        if output {
            self.unasked.add(1);
            self.unasked_bytes.add(bytes as u64);
        }
    }
}

impl Readers {
    /// Notes about what the readers dropped since the last cell's notes.
    pub(super) fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let (n, _) = self.unasked.fresh();
        let (bytes, _) = self.unasked_bytes.fresh();
        if n > 0 {
            notes.push(format!(
                "note: {n} output message(s) of the kernel ({}) came while no cell ran (from a thread or process an earlier cell left running) and were dropped",
                show_bytes(bytes)
            ));
        }
        let (n, _) = self.too_many_frames.fresh();
        if n > 0 {
            notes.push(format!(
                "note: {n} message(s) of the kernel had more than {} ZeroMQ frames and were dropped (a Jupyter message has a handful)",
                crate::lang::jupyter::zmtp::MAX_FRAMES
            ));
        }
        let (n, _) = self.too_large.fresh();
        if n > 0 {
            notes.push(format!(
                "note: {n} message(s) of the kernel were over {} MiB, or over {} JSON values, and were dropped",
                wire::MAX_MESSAGE_BYTES >> 20,
                crate::lang::driver::MAX_FRAME_VALUES
            ));
        }
        let (n, total) = self.bad_signatures.fresh();
        if n > 0 {
            notes.push(format!(
                "note: {n} message(s) on the kernel's sockets had no valid signature and were dropped ({total} since the kernel started)"
            ));
        }
        notes
    }
}

/// A socket's queue of messages for the cell; each holds its bytes' share of `QUEUE_BYTES`
/// until it is taken.
pub(super) struct Queue(
    tokio::sync::mpsc::Receiver<(Message, usize, tokio::sync::OwnedSemaphorePermit)>,
);

impl Queue {
    pub(super) async fn recv(&mut self) -> Option<Message> {
        self.0.recv().await.map(|(m, _, _)| m)
    }

    /// Empties the queue: what is in it answered a request no longer waited on.
    pub(super) fn discard(&mut self, readers: &Readers) {
        while let Ok((m, bytes, _)) = self.0.try_recv() {
            readers.unasked(&m, bytes);
        }
    }
}

pub(super) fn runtime(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Runtime(format!("jupyter kernel: {what}: {e}"))
}

pub(super) async fn send(sock: &mut zeromq::DealerSendHalf, frames: Vec<Bytes>) -> Result<()> {
    let msg = zeromq::ZmqMessage::try_from(frames).map_err(|e| runtime("message", e))?;
    sock.send(msg).await.map_err(|e| runtime("send", e))
}

/// One heartbeat round trip.
pub(super) async fn heartbeat(hb: &mut zeromq::ReqSocket) -> std::result::Result<(), String> {
    let ping = Bytes::from_static(b"kern-ping");
    let round = async {
        hb.send(zeromq::ZmqMessage::from(ping.clone()))
            .await
            .map_err(|e| e.to_string())?;
        let pong = hb.recv().await.map_err(|e| e.to_string())?;
        if pong.get(0) == Some(&ping) {
            Ok(())
        } else {
            Err("it answered with something else".to_string())
        }
    };
    match tokio::time::timeout(HEARTBEAT_TIMEOUT, round).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer in {}s", HEARTBEAT_TIMEOUT.as_secs())),
    }
}

/// The connected sockets, each read by a task of its own.
pub(super) struct Sockets {
    /// The relays to the kernel's socket files, for as long as the sockets may reconnect.
    _relays: Relays,
    pub(super) shell: zeromq::DealerSendHalf,
    pub(super) control: zeromq::DealerSendHalf,
    pub(super) heartbeat: zeromq::ReqSocket,
    pub(super) replies: Queue,
    pub(super) iopub: Queue,
    /// Requests for input: we offer none (`allow_stdin: false`), but a kernel that asks anyway
    /// (IRkernel's `readline()`) would wait for ever.
    pub(super) stdin: Queue,
    /// The control socket's replies (to interrupt and shutdown requests) are read and dropped.
    _control: tokio::task::JoinHandle<()>,
}

/// Connects to the kernel's sockets as they appear and waits until it answers: a
/// `kernel_info_reply` on shell and a status for that request on IOPub, which proves the IOPub
/// subscription has reached the kernel (messages published before it would be lost).
pub(super) async fn connect(
    dir: std::path::PathBuf,
    session: Session,
    readers: Arc<Readers>,
) -> std::result::Result<Sockets, String> {
    // Connect only once the kernel has bound every socket: the ZeroMQ client retries a socket
    // that is not there yet with exponential back-off (0.05, 0.15, 0.35, 0.75, 1.55 s...), so
    // a kernel bound just after one attempt would be reached only at the next (BENCHMARKS.md).
    let all = [
        Channel::Shell,
        Channel::IoPub,
        Channel::Stdin,
        Channel::Control,
        Channel::Heartbeat,
    ];
    while !all
        .iter()
        .all(|c| kernelspec::socket_path(&dir, *c).exists())
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Shell and stdin share the session's identity, as jupyter_client does: a kernel sends its
    // input_request to the stdin peer named like the shell peer that asked.
    let identity = || -> std::result::Result<zeromq::SocketOptions, String> {
        let mut options = zeromq::SocketOptions::default();
        options.peer_identity(
            zeromq::util::PeerIdentity::try_from(session.id.as_bytes().to_vec())
                .map_err(|e| e.to_string())?,
        );
        options.connect_timeout(START_TIMEOUT);
        Ok(options)
    };
    let mut shell = zeromq::DealerSocket::with_options(identity()?);
    let mut stdin = zeromq::DealerSocket::with_options(identity()?);
    let mut control = zeromq::DealerSocket::new();
    let mut iopub = zeromq::SubSocket::new();
    let mut heartbeat = zeromq::ReqSocket::new();
    // Each socket is reached through a descriptor of the very file the kernel bound (opened
    // without following a symlink, checked to be a socket), never by its name again: the box
    // can write in the directory, and ZeroMQ reconnects by itself, so a name the box swapped
    // for a symlink must not lead a reconnect to a socket of the host's. And each is reached
    // through a relay of ours that bounds the size of what the kernel sends (`Relays`).
    let mut relays = Relays::new().map_err(|e| format!("the relay directory: {e}"))?;
    let mut ep = |c| -> std::result::Result<String, String> {
        use nix::fcntl::OFlag;
        use nix::sys::stat::{fstat, Mode, SFlag};
        let p = kernelspec::socket_path(&dir, c);
        let fd = nix::fcntl::open(
            &p,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("open {}: {e}", p.display()))?;
        let st = fstat(&fd).map_err(|e| format!("stat {}: {e}", p.display()))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
            return Err(format!("{} is not a socket", p.display()));
        }
        relays.add(c, fd, &readers)
    };
    let (shell_ep, stdin_ep, control_ep, iopub_ep, hb_ep) = (
        ep(Channel::Shell)?,
        ep(Channel::Stdin)?,
        ep(Channel::Control)?,
        ep(Channel::IoPub)?,
        ep(Channel::Heartbeat)?,
    );
    let e = |what: &str, e: zeromq::ZmqError| format!("{what}: {e}");
    iopub.subscribe("").await.map_err(|x| e("subscribe", x))?;
    let (a, b, c, d, f) = tokio::join!(
        shell.connect(&shell_ep),
        control.connect(&control_ep),
        iopub.connect(&iopub_ep),
        heartbeat.connect(&hb_ep),
        stdin.connect(&stdin_ep),
    );
    a.map_err(|x| e("shell", x))?;
    b.map_err(|x| e("control", x))?;
    c.map_err(|x| e("iopub", x))?;
    d.map_err(|x| e("heartbeat", x))?;
    f.map_err(|x| e("stdin", x))?;
    let (shell_tx, shell_rx) = shell.split();
    let (control_tx, control_rx) = control.split();
    let mut socks = Sockets {
        _relays: relays,
        shell: shell_tx,
        control: control_tx,
        heartbeat,
        replies: read_into(shell_rx, &session, &readers),
        iopub: read_into(iopub, &session, &readers),
        stdin: read_into(stdin, &session, &readers),
        _control: tokio::spawn(async move {
            let mut control = control_rx;
            while control.recv().await.is_ok() {}
        }),
    };
    // Asked again every half second until both answers for one request are in.
    loop {
        let (id, frames) = session.request("kernel_info_request", &json!({}));
        readers.want(Some(&id));
        send(&mut socks.shell, frames)
            .await
            .map_err(|e| e.to_string())?;
        let (mut reply, mut status) = (false, false);
        let wait = tokio::time::sleep(Duration::from_millis(500));
        tokio::pin!(wait);
        while !(reply && status) {
            tokio::select! {
                m = socks.replies.recv() => match m {
                    Some(m) => reply |= m.parent_id() == Some(id.as_str()) && m.msg_type() == "kernel_info_reply",
                    None => return Err("the shell socket closed".into()),
                },
                m = socks.iopub.recv() => match m {
                    Some(m) => status |= m.parent_id() == Some(id.as_str()) && m.msg_type() == "status",
                    None => return Err("the iopub socket closed".into()),
                },
                _ = &mut wait => break,
            }
        }
        if reply && status {
            return Ok(socks);
        }
    }
}

/// Our ZeroMQ sockets connect to a listener of ours per channel, in a private directory of the
/// host, which relays each connection to the kernel's socket (reached through a descriptor of
/// the file it bound) with what the kernel sends bounded by `zmtp::Bound`: the `zeromq` crate
/// would reserve any length a frame announces. Dropped with the kernel's sockets.
struct Relays {
    dir: tempfile::TempDir,
    accepting: Vec<tokio::task::AbortHandle>,
}

impl Relays {
    fn new() -> std::io::Result<Relays> {
        Ok(Relays {
            dir: tempfile::Builder::new().prefix("kern-jr-").tempdir()?,
            accepting: Vec::new(),
        })
    }

    /// Relays connections to the kernel's socket `target` of channel `c`; returns the endpoint.
    fn add(
        &mut self,
        c: Channel,
        target: std::os::fd::OwnedFd,
        readers: &Arc<Readers>,
    ) -> std::result::Result<String, String> {
        let path = kernelspec::socket_path(self.dir.path(), c);
        let listener = tokio::net::UnixListener::bind(&path)
            .map_err(|e| format!("relay {}: {e}", path.display()))?;
        let readers = readers.clone();
        let task = tokio::spawn(async move {
            let kernel = format!("/proc/self/fd/{}", target.as_raw_fd());
            while let Ok((ours, _)) = listener.accept().await {
                if let Some(theirs) = reach(&kernel).await {
                    tokio::spawn(relay(ours, theirs, readers.clone()));
                }
            }
        });
        self.accepting.push(task.abort_handle());
        Ok(format!("ipc://{}", path.display()))
    }
}

impl Drop for Relays {
    fn drop(&mut self) {
        self.accepting
            .iter()
            .for_each(tokio::task::AbortHandle::abort);
    }
}

/// Connects to the kernel's socket. Its file is there from the kernel's `bind()`, but it refuses
/// until the kernel's `listen()`; a connection of ours dropped in between would fail ZeroMQ's
/// handshake, which the `zeromq` crate's `connect` does not retry, and the kernel's start with it.
/// So a refusal (or a full backlog: `EAGAIN`) is tried again, at growing intervals, for as long
/// as a kernel may take to start: a kernel that has ended refuses for ever, and ZeroMQ's own
/// reconnects to it come here too. The wait also ends with the relays (dropped with the
/// kernel's sockets). Any other error is final.
async fn reach(kernel: &str) -> Option<tokio::net::UnixStream> {
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    let mut pause = Duration::from_millis(5);
    loop {
        match tokio::net::UnixStream::connect(kernel).await {
            Ok(s) => return Some(s),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::WouldBlock
                ) && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(_) => return None,
        }
    }
}

/// One relayed connection, until either side closes it.
async fn relay(
    ours: tokio::net::UnixStream,
    theirs: tokio::net::UnixStream,
    readers: Arc<Readers>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut ours_rx, mut ours_tx) = ours.into_split();
    let (mut theirs_rx, mut theirs_tx) = theirs.into_split();
    let up = tokio::io::copy(&mut ours_rx, &mut theirs_tx);
    let down = async {
        let mut bound = crate::lang::jupyter::zmtp::Bound::new(wire::MAX_MESSAGE_BYTES);
        let mut buf = vec![0u8; 64 << 10];
        let mut out = Vec::new();
        loop {
            let n = match theirs_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let before = (bound.dropped, bound.dropped_frames);
            // A command frame over the bound: not a kernel we can talk to; the connection goes.
            if bound.feed(&buf[..n], &mut out).is_err() {
                return;
            }
            readers.too_large.add(bound.dropped - before.0);
            readers.too_many_frames.add(bound.dropped_frames - before.1);
            if ours_tx.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
            out.shrink_to(1 << 20);
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// A receiving socket read continuously by its own task into a bounded queue: messages that
/// verify and answer the wanted request go on, the others are counted (bad signatures, output
/// nobody asked for) or dropped (malformed).
pub(super) fn read_into<S: SocketRecv + Send + 'static>(
    mut sock: S,
    session: &Session,
    readers: &Arc<Readers>,
) -> Queue {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_MESSAGES);
    let room = Arc::new(tokio::sync::Semaphore::new(QUEUE_BYTES));
    let signer = session.signer.clone();
    let readers = readers.clone();
    tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        loop {
            // Ends with the kernel (its receiver dropped), which drops the socket and stops
            // its reconnecting to a box that is gone.
            let m = tokio::select! {
                m = sock.recv() => m,
                _ = tx.closed() => return,
            };
            let Ok(m) = m else { return };
            let frames = m.into_vec();
            let bytes: usize = frames.iter().map(Bytes::len).sum();
            let msg = match wire::decode(&signer, &frames) {
                Ok(msg) => msg,
                Err(Dropped::BadSignature) => {
                    readers.bad_signatures.add(1);
                    continue;
                }
                Err(Dropped::TooLarge) => {
                    readers.too_large.add(1);
                    continue;
                }
                Err(Dropped::Malformed) => continue,
            };
            drop(frames);
            // A message seen before (same msg_id) is a replay, or ZeroMQ delivering it twice:
            // taken once.
            let id = msg
                .header
                .get("msg_id")
                .and_then(|v| v.as_str())
                .unwrap_or("");
            if !id.is_empty() && !seen.insert(id.to_string()) {
                continue;
            }
            if seen.len() > SEEN_IDS {
                seen.clear();
            }
            if !readers.wants(&msg) {
                readers.unasked(&msg, bytes);
                continue;
            }
            let share = bytes.clamp(1, QUEUE_BYTES) as u32;
            let Ok(permit) = room.clone().acquire_many_owned(share).await else {
                return;
            };
            if tx.send((msg, bytes, permit)).await.is_err() {
                return;
            }
        }
    });
    Queue(rx)
}
