//! `sha256:<hex>` digests: parsing, hashing while reading or writing, and checking.

use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io::{self, Read, Write};

/// A content digest. Only sha256 is produced; sha512 references are parsed but refused when
/// content has to be checked against them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`; anything else (including sha512) is refused, since
    /// it is what we have to verify and name files by.
    pub fn parse(s: &str) -> Result<Digest, String> {
        let hex = s
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("digest {s:?} is not sha256:<hex>"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!("digest {s:?} needs 64 lowercase hex digits"));
        }
        Ok(Digest(s.to_string()))
    }

    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    fn from_hasher(h: Sha256) -> Digest {
        let out = h.finalize();
        let mut s = String::with_capacity(71);
        s.push_str("sha256:");
        for b in out.iter() {
            s.push(char::from(HEX[(b >> 4) as usize]));
            s.push(char::from(HEX[(b & 15) as usize]));
        }
        Digest(s)
    }

    /// The 64 hex digits: a safe file name (checked at parse time).
    pub fn hex(&self) -> &str {
        &self.0[7..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads a small blob (a manifest, a config) whole: `None` when it is larger than `limit` or
/// its content does not have digest `d`.
pub fn read_small(path: &std::path::Path, d: &Digest, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit && Digest::of(&bytes) == *d).then_some(bytes))
}

/// Wraps a reader or writer and hashes every byte that passes through it.
pub struct Hashing<T> {
    inner: T,
    hasher: Sha256,
    count: u64,
}

impl<T> Hashing<T> {
    pub fn new(inner: T) -> Hashing<T> {
        Hashing {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// The digest and length of what passed so far, and the inner value.
    pub fn finish(self) -> (Digest, u64, T) {
        (Digest::from_hasher(self.hasher), self.count, self.inner)
    }

    pub fn count(&self) -> u64 {
        self.count
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_parses() {
        let d = Digest::of(b"");
        assert_eq!(
            d.as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(d.as_str()).unwrap(), d);
        let mut h = Hashing::new(&b"abc"[..]);
        io::copy(&mut h, &mut io::sink()).unwrap();
        let (d2, n, _) = h.finish();
        assert_eq!(n, 3);
        assert_eq!(d2, Digest::of(b"abc"));
        assert!(Digest::parse("sha256:ABC").is_err());
        assert!(Digest::parse("sha512:00").is_err());
        assert!(Digest::parse("sha256:../../etc/passwd").is_err());
    }
}
