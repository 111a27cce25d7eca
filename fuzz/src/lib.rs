//! What the fuzz targets share: splitting one input into several, tar checksums made valid (so
//! mutations reach the unpackers instead of dying at the header check), and scratch
//! directories that are checked for writes outside the root they hand out.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Splits `data` at every `sep`: one input carries several layers, lines or frames.
pub fn split<'a>(data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(sep.len()).position(|w| w == sep) {
        out.push(&rest[..at]);
        rest = &rest[at + sep.len()..];
    }
    out.push(rest);
    out
}

/// Pieces of `data` whose lengths the first bytes choose: a stream as it arrives in reads.
pub fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let Some((&step, mut rest)) = data.split_first() else {
        return Vec::new();
    };
    let step = usize::from(step % 64) + 1;
    let mut out = Vec::new();
    let mut i = 0usize;
    while !rest.is_empty() {
        // Vary the piece size a little, deterministically.
        let n = (step + i % 3).min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
        i += 1;
    }
    out
}

/// Sets the checksum of every header of a tar stream, walking it as a reader does (a header,
/// then its data rounded up to 512 bytes). Sizes in base-256 and octal are both understood.
pub fn fix_tar_checksums(tar: &mut [u8]) {
    let mut pos = 0usize;
    // `pos` may point far past the end (a huge size field): never `pos + 512`.
    while tar.len().saturating_sub(pos) >= 512 {
        let block = &mut tar[pos..pos + 512];
        if block.iter().all(|b| *b == 0) {
            pos += 512;
            continue;
        }
        block[148..156].fill(b' ');
        let sum: u32 = block.iter().map(|b| u32::from(*b)).sum();
        let text = format!("{sum:06o}\0 ");
        block[148..156].copy_from_slice(&text.as_bytes()[..8]);
        let size = header_size(&block[124..136]);
        let data = size.div_ceil(512).saturating_mul(512);
        pos = match usize::try_from(data)
            .ok()
            .and_then(|d| pos.checked_add(512)?.checked_add(d))
        {
            Some(p) => p,
            None => return,
        };
    }
}

fn header_size(field: &[u8]) -> u64 {
    if field[0] & 0x80 != 0 {
        return field[4..]
            .iter()
            .fold(0u64, |a, b| a.wrapping_shl(8) | u64::from(*b));
    }
    let text: String = field
        .iter()
        .take_while(|b| **b != 0 && **b != b' ')
        .map(|b| *b as char)
        .collect();
    u64::from_str_radix(text.trim(), 8).unwrap_or(0)
}

/// A scratch directory per input: `root()` is what the parser under test may write into; its
/// siblings (a canary file) must be untouched when the input is done, checked on drop.
pub struct Scratch {
    dir: PathBuf,
}

const CANARY: &str = "canary";
const CANARY_TEXT: &[u8] = b"written by the fuzz harness; nothing else may change it\n";

impl Scratch {
    pub fn new(what: &str) -> Scratch {
        let base = std::env::var_os("KERN_FUZZ_SCRATCH")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix(&format!("kern-fuzz-{what}-"))
            .tempdir_in(&base)
            .expect("a scratch directory")
            .keep();
        std::fs::create_dir(dir.join("root")).expect("the scratch root");
        std::fs::write(dir.join(CANARY), CANARY_TEXT).expect("the canary");
        Scratch { dir }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Nothing beside the root changed: no new entry, the canary as written.
    fn check(&self) {
        let names: BTreeSet<String> = std::fs::read_dir(&self.dir)
            .expect("listing the scratch directory")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let allowed: BTreeSet<String> = ["root", CANARY, "input"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(
            names.is_subset(&allowed),
            "something was written beside the root: {names:?}"
        );
        assert_eq!(
            std::fs::read(self.dir.join(CANARY)).ok().as_deref(),
            Some(CANARY_TEXT),
            "the canary beside the root changed"
        );
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.check();
        }
        remove_all(&self.dir);
    }
}

/// Removes a tree whatever modes the parser left on it.
pub fn remove_all(path: &Path) {
    let _ = kern_sandbox::image::store::remove_tree(path);
}
