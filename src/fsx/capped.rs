//! The one capped reader: a `Read` wrapper that yields at most as many bytes as a shared [`Cap`]
//! allows, and past it fails with the typed [`OverCap`]. Whoever drives the stream (the tar loop
//! of a restore or of a layer) raises the cap as it learns how much may legitimately follow, so
//! a parser that buffers a whole record (tar's GNU long names, PAX headers) cannot be made to
//! read a gzip bomb into memory before any size check runs.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

/// How far a [`Capped`] reader may go, shared with the loop that raises it.
#[derive(Debug)]
pub struct Cap {
    /// Bytes that may be read in all, counted from the start of the stream.
    limit: Cell<u64>,
    used: Cell<u64>,
    over: Cell<bool>,
}

/// A read met the cap. Travels inside an `io::Error` (`ErrorKind::Other`); a parser may rewrap
/// it, so [`Cap::over`] is the reliable test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream went past its cap of {limit} bytes")]
pub struct OverCap {
    pub limit: u64,
}

impl Cap {
    /// A cap of `limit` bytes from the start.
    pub fn new(limit: u64) -> Rc<Cap> {
        Rc::new(Cap {
            limit: Cell::new(limit),
            used: Cell::new(0),
            over: Cell::new(false),
        })
    }

    /// `more` bytes more may be read than so far allowed (a running budget).
    pub fn raise(&self, more: u64) {
        self.limit.set(self.limit.get().saturating_add(more));
    }

    /// From here on, `next` bytes may be read, whatever was allowed before (a per-record window).
    pub fn allow_next(&self, next: u64) {
        self.limit.set(self.used.get().saturating_add(next));
    }

    /// Whether a read was refused at the cap.
    pub fn over(&self) -> bool {
        self.over.get()
    }
}

/// `inner`, cut off where its [`Cap`] says.
pub struct Capped<R> {
    inner: R,
    cap: Rc<Cap>,
}

impl<R> Capped<R> {
    pub fn new(inner: R, cap: Rc<Cap>) -> Capped<R> {
        Capped { inner, cap }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let cap = &self.cap;
        let room = cap.limit.get().saturating_sub(cap.used.get());
        if room == 0 && !buf.is_empty() {
            cap.over.set(true);
            return Err(io::Error::other(OverCap {
                limit: cap.limit.get(),
            }));
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        cap.used.set(cap.used.get().saturating_add(n as u64));
        Ok(n)
    }
}
