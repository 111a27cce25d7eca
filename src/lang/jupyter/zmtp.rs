//! A bound on what a ZeroMQ peer can make us buffer. The `zeromq` crate (0.7) has no maximum
//! message size (libzmq's `ZMQ_MAXMSGSIZE`): it reserves whatever length a frame header announces
//! and keeps every frame of a multipart message. Bytes from a kernel pass through `Bound` first:
//! it reads the ZMTP 3 framing (RFC 23: a 64-byte greeting, then frames of a flags byte and a
//! 1- or 8-byte length) and passes on whole messages up to a size and a count of frames, dropping
//! larger ones as they stream past without holding them. The frame count matters as much as the
//! bytes: the `zeromq` crate holds each frame as a `Bytes` (32 bytes, plus its queue's slack), so
//! a message of empty frames (2 bytes each on the wire) would cost some 30 times its size.

/// Bytes of the ZMTP 3 greeting.
const GREETING: usize = 64;
const MORE: u8 = 0x01;
const LONG: u8 = 0x02;
const COMMAND: u8 = 0x04;

/// The most frames one message may have: a Jupyter message is its routing identities, the
/// delimiter, the signature, four JSON parts and its raw buffers (a handful, for ipywidgets).
pub const MAX_FRAMES: usize = 1024;

/// Why a stream cannot go on.
#[derive(Debug, PartialEq, Eq)]
pub enum Broken {
    /// A command frame (the handshake, pings) over the size: no peer of ours sends one.
    Command,
}

#[derive(Debug)]
enum State {
    Greeting(usize),
    Flags,
    Length { flags: u8, got: Vec<u8> },
    Body { flags: u8, left: usize },
}

/// One direction of one connection, from the peer.
#[derive(Debug)]
pub struct Bound {
    max: usize,
    state: State,
    /// The message (or command) read so far, headers included; empty while dropping.
    held: Vec<u8>,
    /// Bytes of the current message so far.
    size: usize,
    /// Frames of the current message so far.
    frames: usize,
    /// The current message is over `max` bytes or `MAX_FRAMES` frames: its frames are skipped.
    dropping: bool,
    /// Of the message being dropped: for its frames, not its bytes.
    for_frames: bool,
    /// Messages dropped for their size.
    pub dropped: u64,
    /// Messages dropped for their count of frames.
    pub dropped_frames: u64,
}

impl Bound {
    pub fn new(max: usize) -> Bound {
        Bound {
            max,
            state: State::Greeting(GREETING),
            held: Vec::new(),
            size: 0,
            frames: 0,
            dropping: false,
            for_frames: false,
            dropped: 0,
            dropped_frames: 0,
        }
    }

    /// Takes the next bytes from the peer; appends what may go on to `out`.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<(), Broken> {
        while !data.is_empty() {
            match &mut self.state {
                State::Greeting(left) => {
                    let n = (*left).min(data.len());
                    out.extend_from_slice(&data[..n]);
                    *left -= n;
                    data = &data[n..];
                    if *left == 0 {
                        self.state = State::Flags;
                    }
                }
                State::Flags => {
                    let flags = data[0];
                    data = &data[1..];
                    self.keep(&[flags]);
                    self.state = State::Length {
                        flags,
                        got: Vec::with_capacity(8),
                    };
                }
                State::Length { flags, got } => {
                    let want = if *flags & LONG != 0 { 8 } else { 1 };
                    let n = (want - got.len()).min(data.len());
                    got.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if got.len() < want {
                        continue;
                    }
                    let len = got.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
                    let (flags, header) = (*flags, std::mem::take(got));
                    self.keep(&header);
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    self.size = self.size.saturating_add(len);
                    self.frames += 1;
                    if (self.size > self.max || self.frames > MAX_FRAMES) && !self.dropping {
                        if flags & COMMAND != 0 {
                            return Err(Broken::Command);
                        }
                        self.dropping = true;
                        self.for_frames = self.size <= self.max;
                        self.held = Vec::new();
                    }
                    self.state = State::Body { flags, left: len };
                    if len == 0 {
                        self.frame_end(flags, out);
                    }
                }
                State::Body { flags, left } => {
                    let n = (*left).min(data.len());
                    let flags = *flags;
                    *left -= n;
                    let done = *left == 0;
                    self.keep(&data[..n]);
                    data = &data[n..];
                    if done {
                        self.frame_end(flags, out);
                    }
                }
            }
        }
        Ok(())
    }

    fn keep(&mut self, bytes: &[u8]) {
        if !self.dropping {
            self.held.extend_from_slice(bytes);
        }
    }

    /// A frame is complete: the last of a message (or a command) goes on, or is counted dropped.
    fn frame_end(&mut self, flags: u8, out: &mut Vec<u8>) {
        self.state = State::Flags;
        if flags & COMMAND == 0 && flags & MORE != 0 {
            return;
        }
        if self.dropping && self.for_frames {
            self.dropped_frames += 1;
        } else if self.dropping {
            self.dropped += 1;
        } else {
            out.append(&mut self.held);
        }
        self.held = Vec::new();
        self.size = 0;
        self.frames = 0;
        self.dropping = false;
        self.for_frames = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(flags: u8, body: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        if body.len() > 255 {
            f.push(flags | LONG);
            f.extend_from_slice(&(body.len() as u64).to_be_bytes());
        } else {
            f.push(flags);
            f.push(body.len() as u8);
        }
        f.extend_from_slice(body);
        f
    }

    fn run(stream: &[u8], step: usize, max: usize) -> (Vec<u8>, Bound) {
        let mut b = Bound::new(max);
        let mut out = Vec::new();
        for piece in stream.chunks(step) {
            b.feed(piece, &mut out).unwrap();
        }
        (out, b)
    }

    #[test]
    fn messages_within_the_bound_pass_unchanged_and_larger_ones_are_dropped_whole() {
        let greeting = [0xffu8; GREETING];
        let ready = frame(COMMAND, b"\x05READY");
        let small = [frame(MORE, b"<IDS|MSG>"), frame(0, b"{}")].concat();
        let big = [
            frame(MORE, b"<IDS|MSG>"),
            frame(MORE, &[7u8; 600]),
            frame(0, &[8u8; 600]),
        ]
        .concat();
        let stream = [&greeting[..], &ready, &small, &big, &small].concat();
        for step in [1, 2, 7, 64, 1 << 20] {
            let (out, b) = run(&stream, step, 1000);
            assert_eq!(
                out,
                [&greeting[..], &ready, &small, &small].concat(),
                "step {step}"
            );
            assert_eq!(b.dropped, 1);
        }
        let (out, b) = run(&stream, 5, 10_000);
        assert_eq!((out, b.dropped), (stream.clone(), 0));
    }

    #[test]
    fn a_message_of_too_many_frames_is_dropped_whole_however_small() {
        let greeting = [0xffu8; GREETING];
        let small = [frame(MORE, b"<IDS|MSG>"), frame(0, b"{}")].concat();
        let mut empties = Vec::new();
        for _ in 0..MAX_FRAMES * 3 {
            empties.extend(frame(MORE, b""));
        }
        empties.extend(frame(0, b""));
        let stream = [&greeting[..], &small, &empties, &small].concat();
        for step in [1, 3, 4096, 1 << 20] {
            let mut b = Bound::new(1 << 20);
            let mut out = Vec::new();
            for piece in stream.chunks(step) {
                b.feed(piece, &mut out).unwrap();
                assert!(b.held.len() <= 2 * MAX_FRAMES + 64, "step {step}");
            }
            assert_eq!(out, [&greeting[..], &small, &small].concat(), "step {step}");
            assert_eq!((b.dropped, b.dropped_frames), (0, 1));
        }
        // Exactly MAX_FRAMES frames still pass.
        let mut fits = Vec::new();
        for _ in 0..MAX_FRAMES - 1 {
            fits.extend(frame(MORE, b""));
        }
        fits.extend(frame(0, b""));
        let stream = [&greeting[..], &fits].concat();
        let (out, b) = run(&stream, 100, 1 << 20);
        assert_eq!((out, b.dropped), (stream.clone(), 0));
    }

    #[test]
    fn an_announced_huge_length_is_not_reserved_and_an_oversized_command_breaks() {
        let mut stream = vec![0xffu8; GREETING];
        stream.push(LONG);
        stream.extend_from_slice(&(1u64 << 60).to_be_bytes());
        stream.extend_from_slice(&[1u8; 4096]);
        let (out, b) = run(&stream, 100, 1000);
        assert_eq!((out.len(), b.held.capacity()), (GREETING, 0));
        let mut cmd = vec![0xffu8; GREETING];
        cmd.extend(frame(COMMAND, &[0u8; 2000]));
        let mut b = Bound::new(1000);
        assert_eq!(b.feed(&cmd, &mut Vec::new()), Err(Broken::Command));
    }
}
