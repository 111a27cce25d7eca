//! Response scrubbing for `secrets`: every form of a secret's value that a server may send back
//! (reflected from the request it got) becomes that secret's placeholder before the box reads it.
//!
//! Forms matched, each across chunk boundaries (a streaming matcher keeps the unfinished tail):
//! - text, char by char, each char as itself, percent-encoded (`%2F`/`%2f`, `+` for a space),
//!   JSON-escaped (`\/`, `\"`, `\uXXXX` incl. surrogate pairs; also twice, JSON in a JSON
//!   string), percent-encoded twice (`%252F`), or an HTML character reference (`&#47;`,
//!   `&#x2F;`, `&amp;`…), in any mix: the replacement is the placeholder as it is
//!   (letters, digits and `-`, the same in every one of these forms);
//! - hex, either case (replaced by the placeholder's hex);
//! - base64 and base64url at each of the three byte alignments a value can have inside a longer
//!   encoded text: the characters that carry any bit of the value are matched on those bits, and
//!   replaced by the placeholder's characters at the same alignment. The placeholder's length is
//!   drawn equal to the value's modulo 3 (`secrets.rs`), so the text after it decodes as before.
//!
//! Not matched: other transformations (a hash, a reversal, deeper or other nested encodings,
//! MIME line breaks inside base64). A host that deliberately transforms and echoes credentials can still hand
//! them back; `secrets` documents that.

/// One alternative spelling of one char of the value.
#[derive(Debug, Clone)]
struct Alt {
    bytes: Vec<u8>,
    /// Escapes compare ASCII case-insensitively (`%2f`, `\u002F`); the char itself exactly.
    fold: bool,
}

#[derive(Debug, Clone)]
enum Pattern {
    /// Char by char, each with its spellings.
    Text { units: Vec<Vec<Alt>>, with: Vec<u8> },
    /// Base64 characters at one alignment: (expected 6 bits, mask of the value's bits).
    Base64 {
        alphabet: &'static [u8; 64],
        value: Vec<(u8, u8)>,
        placeholder: Vec<(u8, u8)>,
    },
}

const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The 6 bits a base64 character stands for in `alphabet`.
fn sextet(alphabet: &[u8; 64], c: u8) -> Option<u8> {
    let std = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        _ if c == alphabet[62] => 62,
        _ if c == alphabet[63] => 63,
        _ => return None,
    };
    Some(std)
}

/// What a pattern made of the input at one position.
enum Found {
    /// Matched this many bytes; replace them with these.
    Full(usize, Vec<u8>),
    /// All of the input matched so far, but the pattern is longer.
    Partial,
    None,
}

/// Whether `alt` is at the start of `input`: `Some(true)` yes, `Some(false)` no, `None` the
/// input ended inside it.
fn alt_at(alt: &Alt, input: &[u8]) -> Option<bool> {
    let n = alt.bytes.len().min(input.len());
    let same = if alt.fold {
        alt.bytes[..n].eq_ignore_ascii_case(&input[..n])
    } else {
        alt.bytes[..n] == input[..n]
    };
    match (same, n == alt.bytes.len()) {
        (false, _) => Some(false),
        (true, true) => Some(true),
        (true, false) => None,
    }
}

impl Pattern {
    fn find(&self, input: &[u8]) -> Found {
        match self {
            Pattern::Text { units, with } => match text_at(units, input, 0) {
                Some(Some(n)) => Found::Full(n, with.clone()),
                Some(None) => Found::None,
                None => Found::Partial,
            },
            Pattern::Base64 {
                alphabet,
                value,
                placeholder,
            } => {
                for (i, &(want, mask)) in value.iter().enumerate() {
                    let Some(&c) = input.get(i) else {
                        return Found::Partial;
                    };
                    match sextet(alphabet, c) {
                        Some(d) if d & mask == want & mask => {}
                        _ => return Found::None,
                    }
                }
                let got: Vec<u8> = input[..value.len()]
                    .iter()
                    .filter_map(|&c| sextet(alphabet, c))
                    .collect();
                // The first and last characters keep their bits that are not the value's (the
                // neighbours'); the rest are the placeholder's.
                let last = placeholder.len() - 1;
                let out = placeholder
                    .iter()
                    .enumerate()
                    .map(|(i, &(p, mask))| {
                        let keep = match i {
                            0 => got[0] & !mask,
                            i if i == last => got[got.len() - 1] & !mask,
                            _ => 0,
                        };
                        alphabet[usize::from((p & mask) | keep)]
                    })
                    .collect();
                Found::Full(value.len(), out)
            }
        }
    }

    /// Bytes a match can start with.
    fn starts(&self, table: &mut [bool; 256]) {
        match self {
            Pattern::Text { units, .. } => {
                for alt in &units[0] {
                    let b = alt.bytes[0];
                    table[usize::from(b)] = true;
                    if alt.fold {
                        table[usize::from(b.to_ascii_lowercase())] = true;
                        table[usize::from(b.to_ascii_uppercase())] = true;
                    }
                }
            }
            Pattern::Base64 {
                alphabet, value, ..
            } => {
                let (want, mask) = value[0];
                for (d, &c) in alphabet.iter().enumerate() {
                    if d as u8 & mask == want & mask {
                        table[usize::from(c)] = true;
                    }
                }
            }
        }
    }
}

/// Matches `units[k..]` at the start of `input`: `Some(Some(len))`, `Some(None)` no match,
/// `None` the input ended while every way so far still matched.
fn text_at(units: &[Vec<Alt>], input: &[u8], k: usize) -> Option<Option<usize>> {
    let Some(unit) = units.get(k) else {
        return Some(Some(0));
    };
    let mut partial = false;
    for alt in unit {
        match alt_at(alt, input) {
            Some(true) => {
                let n = alt.bytes.len();
                match text_at(units, &input[n..], k + 1) {
                    Some(Some(rest)) => return Some(Some(n + rest)),
                    Some(None) => {}
                    None => partial = true,
                }
            }
            Some(false) => {}
            None => partial = true,
        }
    }
    if partial {
        None
    } else {
        Some(None)
    }
}

/// The spellings of one char (its UTF-8 bytes `utf8`).
fn spellings(c: char) -> Vec<Alt> {
    let mut buf = [0u8; 4];
    let utf8 = c.encode_utf8(&mut buf).as_bytes().to_vec();
    let fold = |s: String| Alt {
        bytes: s.into_bytes(),
        fold: true,
    };
    let mut alts = vec![Alt {
        bytes: utf8.clone(),
        fold: false,
    }];
    alts.push(fold(utf8.iter().map(|b| format!("%{b:02X}")).collect()));
    if c == ' ' {
        alts.push(fold("+".into()));
    }
    let mut units = [0u16; 2];
    alts.push(fold(
        c.encode_utf16(&mut units)
            .iter()
            .map(|u| format!("\\u{u:04X}"))
            .collect(),
    ));
    let short = match c {
        '"' => Some("\\\""),
        '\\' => Some("\\\\"),
        '/' => Some("\\/"),
        '\t' => Some("\\t"),
        _ => None,
    };
    if let Some(s) = short {
        alts.push(fold(s.into()));
    }
    // Escaped twice: JSON inside a JSON string (a debug endpoint quoting a request body), a
    // percent-encoded URL percent-encoded again.
    let again: Vec<Alt> = alts
        .iter()
        .filter(|a| a.bytes.first() == Some(&b'\\'))
        .map(|a| {
            let text = String::from_utf8_lossy(&a.bytes);
            fold(text.replace('\\', "\\\\").replace('"', "\\\""))
        })
        .collect();
    alts.extend(again);
    alts.push(fold(utf8.iter().map(|b| format!("%25{b:02X}")).collect()));
    alts.push(fold(format!("&#{};", u32::from(c))));
    alts.push(fold(format!("&#x{:X};", u32::from(c))));
    let named = match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        '"' => Some("&quot;"),
        '\'' => Some("&#39;"),
        _ => None,
    };
    if let Some(s) = named {
        alts.push(fold(s.into()));
    }
    alts
}

/// The 6-bit characters of `bytes` placed `r` bytes into a base64 group, from the first that
/// carries one of its bits to the last, each with the mask of those bits.
fn base64_chars(bytes: &[u8], r: usize) -> Vec<(u8, u8)> {
    let start = 8 * r;
    let end = start + 8 * bytes.len();
    let bit = |p: usize| -> u8 {
        if p < start || p >= end {
            return 0;
        }
        let i = p - start;
        (bytes[i / 8] >> (7 - i % 8)) & 1
    };
    let mut out = Vec::new();
    for j in start / 6..end.div_ceil(6) {
        let (mut v, mut m) = (0u8, 0u8);
        for k in 0..6 {
            let p = 6 * j + k;
            v = (v << 1) | bit(p);
            m = (m << 1) | u8::from(p >= start && p < end);
        }
        out.push((v, m));
    }
    out
}

/// The patterns for one secret.
fn patterns(value: &[u8], placeholder: &[u8]) -> Vec<Pattern> {
    let mut out = Vec::new();
    // A value that is not UTF-8 is matched as itself and in base64 only.
    let units = match std::str::from_utf8(value) {
        Ok(text) => text.chars().map(spellings).collect(),
        Err(_) => value
            .iter()
            .map(|&b| {
                vec![Alt {
                    bytes: vec![b],
                    fold: false,
                }]
            })
            .collect(),
    };
    out.push(Pattern::Text {
        units,
        with: placeholder.to_vec(),
    });
    out.push(Pattern::Text {
        units: hex::encode(value)
            .into_bytes()
            .chunks(2)
            .map(|c| {
                vec![Alt {
                    bytes: c.to_vec(),
                    fold: true,
                }]
            })
            .collect(),
        with: hex::encode(placeholder).into_bytes(),
    });
    // Same tail alignment needs the same length modulo 3 (the placeholder is drawn so).
    if value.len() % 3 == placeholder.len() % 3 {
        for alphabet in [STD, URL] {
            for r in 0..3 {
                out.push(Pattern::Base64 {
                    alphabet,
                    value: base64_chars(value, r),
                    placeholder: base64_chars(placeholder, r),
                });
            }
        }
    }
    out
}

/// A streaming replacer of every form of some values by their placeholders.
pub(super) struct Scrubber {
    /// Each pattern with the bytes a match of it can start with.
    patterns: Vec<(Pattern, Box<[bool; 256]>)>,
    /// The bytes any match can start with.
    starts: Box<[bool; 256]>,
    /// Input not yet judged: a match may start there and end in the next chunk.
    carry: Vec<u8>,
    /// How many matches were replaced so far.
    pub replaced: usize,
}

impl Scrubber {
    /// For these `(value, placeholder)` pairs.
    pub(super) fn new<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Scrubber {
        let patterns: Vec<Pattern> = pairs
            .into_iter()
            .flat_map(|(v, p)| patterns(v, p))
            .collect();
        let mut starts = Box::new([false; 256]);
        let patterns = patterns
            .into_iter()
            .map(|p| {
                let mut table = Box::new([false; 256]);
                p.starts(&mut table);
                p.starts(&mut starts);
                (p, table)
            })
            .collect();
        Scrubber {
            patterns,
            starts,
            carry: Vec::new(),
            replaced: 0,
        }
    }

    /// The scrubbed text of `input` that can be judged now; the rest waits for more input.
    pub(super) fn push(&mut self, input: &[u8]) -> Vec<u8> {
        self.run(input, false)
    }

    /// The rest, judged now that no more input comes.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        self.run(&[], true)
    }

    /// `input` scrubbed whole (a response head).
    pub(super) fn once(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = self.push(input);
        out.extend(self.finish());
        out
    }

    fn run(&mut self, input: &[u8], eof: bool) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(input);
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        'bytes: while i < buf.len() {
            let b = usize::from(buf[i]);
            if !self.starts[b] {
                out.push(buf[i]);
                i += 1;
                continue;
            }
            let mut partial = false;
            for (p, first) in &self.patterns {
                if !first[b] {
                    continue;
                }
                match p.find(&buf[i..]) {
                    Found::Full(n, with) => {
                        out.extend_from_slice(&with);
                        self.replaced += 1;
                        i += n;
                        continue 'bytes;
                    }
                    Found::Partial => partial = true,
                    Found::None => {}
                }
            }
            if partial && !eof {
                self.carry = buf.split_off(i);
                return out;
            }
            out.push(buf[i]);
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    const VALUE: &str = "sk-Va/l+ue\"&<x> 9";

    fn placeholder_for(value: &str) -> String {
        let mut p = "kern-secret-0123456789abcdef0123456789abcdef".to_owned();
        while p.len() % 3 != value.len() % 3 {
            p.push('f');
        }
        p
    }

    fn scrub_in_pieces(s: &mut Scrubber, input: &[u8], piece: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for c in input.chunks(piece.max(1)) {
            out.extend(s.push(c));
        }
        out.extend(s.finish());
        out
    }

    fn forms(v: &str) -> Vec<String> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut out = vec![
            v.to_owned(),
            v.bytes().map(|b| format!("%{b:02x}")).collect(),
            v.replace(' ', "+").replace('/', "%2F").replace('"', "%22"),
            serde_json::to_string(v).unwrap(),
            v.chars().map(|c| format!("\\u{:04x}", c as u32)).collect(),
            v.replace('/', "\\/").replace('"', "\\\""),
            serde_json::to_string(&serde_json::to_string(v).unwrap()).unwrap(),
            v.bytes().map(|b| format!("%25{b:02X}")).collect(),
            v.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('"', "&#34;"),
            hex::encode(v),
            hex::encode_upper(v),
        ];
        for pre in ["", "x", "xy", "Authorization: Bearer "] {
            let whole = format!("{pre}{v}!?");
            out.push(b64.encode(&whole));
            out.push(url.encode(&whole));
        }
        out
    }

    #[test]
    fn every_form_in_every_piece_size_is_replaced() {
        let ph = placeholder_for(VALUE);
        for form in forms(VALUE) {
            for piece in [1, 2, 3, 7, 64, 4096] {
                let mut s = Scrubber::new([(VALUE.as_bytes(), ph.as_bytes())]);
                let text = format!("<{form}>");
                let out = scrub_in_pieces(&mut s, text.as_bytes(), piece);
                assert!(s.replaced >= 1, "{form} in pieces of {piece}: not found");
                let out = String::from_utf8(out).unwrap();
                assert!(!out.contains(VALUE), "{form}: {out}");
                assert!(!out.contains(&form), "{form}: {out}");
            }
        }
    }

    #[test]
    fn base64_decodes_to_the_placeholder_in_place() {
        let ph = placeholder_for(VALUE);
        let b64 = base64::engine::general_purpose::STANDARD;
        for pre in ["", "a", "ab", "abc", "{\"auth\":\"Bearer "] {
            for post in ["", "1", "12", "\"}"] {
                let plain = format!("{pre}{VALUE}{post}");
                let mut s = Scrubber::new([(VALUE.as_bytes(), ph.as_bytes())]);
                let out = s.once(b64.encode(&plain).as_bytes());
                let decoded = b64.decode(&out).unwrap();
                assert_eq!(
                    String::from_utf8(decoded).unwrap(),
                    format!("{pre}{ph}{post}")
                );
            }
        }
    }

    #[test]
    fn other_text_passes_unchanged() {
        let ph = placeholder_for(VALUE);
        let mut s = Scrubber::new([(VALUE.as_bytes(), ph.as_bytes())]);
        let text: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        assert_eq!(scrub_in_pieces(&mut s, &text, 1000), text);
        assert_eq!(s.replaced, 0);
        let near = "sk-Va/l+ue\"&<x> 8 and sk-Va%2F";
        assert_eq!(s.once(near.as_bytes()), near.as_bytes());
    }

    #[test]
    fn every_secret_of_many_is_scrubbed() {
        let values: Vec<String> = (0..20).map(|i| format!("value-number-{i:02}")).collect();
        let phs: Vec<String> = values.iter().map(|v| placeholder_for(v)).collect();
        let mut s = Scrubber::new(
            values
                .iter()
                .zip(&phs)
                .map(|(v, p)| (v.as_bytes(), p.as_bytes())),
        );
        let b64 = base64::engine::general_purpose::STANDARD;
        let text = format!("{} {}", values[19], b64.encode(&values[18]));
        let out = String::from_utf8(s.once(text.as_bytes())).unwrap();
        assert_eq!(out, format!("{} {}", phs[19], b64.encode(&phs[18])));
    }
}
