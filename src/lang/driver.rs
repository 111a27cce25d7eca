//! The drivers' side in the addon: the frames they speak on the box's channel (fd 3), and
//! turning their display/result frames into checked rich results (their sources: `sources`).
//!
//! A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. The host sends
//! `{"type": "cell", "id", "code", "once"}`; the driver answers, in order, `display` and
//! `result` frames (`data`: MIME type → payload), an `error` frame if the cell raised, and a
//! `done` frame.

use base64::Engine as _;
use serde_json::{Map, Value};

/// The driver refuses frames above this; so do we.
pub const MAX_FRAME: usize = 256 << 20;

/// How much of a cell's results (encoded images included) a call keeps: the driver's and a
/// Jupyter kernel's alike.
pub const MAX_RESULTS_BYTES: usize = 128 << 20;

/// Images from the box are untrusted: one larger than this (encoded) or than `MAX_PIXELS`
/// decoded is refused rather than handed to the caller as a decompression bomb.
pub const MAX_IMAGE_BYTES: usize = 32 << 20;
pub const MAX_PIXELS: u64 = 50_000_000;

/// A cell, framed for the driver. `marker` (a kernel's cells) is written to stdout and stderr
/// after the cell; `single` names a prewarmed box's one cell like a one-shot cell; `env` (a
/// kernel cell's own variables, checked by `parse_env`) is set for the cell and restored after
/// it. Optional keys are left out when unused, so a cell without them frames as it always did.
pub fn cell_frame(
    id: u64,
    code: &str,
    once: bool,
    marker: Option<&str>,
    single: bool,
    env: &[(String, String)],
) -> Vec<u8> {
    let mut body = serde_json::json!({"type": "cell", "id": id, "code": code, "once": once});
    if let Some(m) = marker {
        body["marker"] = Value::String(m.to_string());
    }
    if single {
        body["single"] = Value::Bool(true);
    }
    if !env.is_empty() {
        let vars: Map<String, Value> = env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        body["env"] = Value::Object(vars);
    }
    frame(&body)
}

pub fn frame(v: &Value) -> Vec<u8> {
    let body = v.to_string().into_bytes();
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Frames this short are read whatever the limit: a `done` frame is never missed.
const ALWAYS_READ: usize = 4096;

/// The most JSON values (numbers, strings, arrays, objects...) one frame may hold to be parsed.
/// A parsed value costs far more than its text (`0,` is 2 bytes of JSON and some 32 bytes
/// parsed): a 16 MiB frame of `[0,0,…]` took this process from 54 to 663 MiB before this bound,
/// so the 128 MiB a call's results may hold would have cost gigabytes. 1 Mi values stay within
/// tens of MiB; real results are mostly strings (text, base64 images), one value each.
pub const MAX_FRAME_VALUES: usize = 1 << 20;

/// An upper bound on the JSON values in `json`: one per `[`, `{`, `,` and `:` outside strings,
/// plus one. Linear, no allocation: it decides whether `json` may be parsed at all.
pub fn json_values_bound(json: &[u8]) -> usize {
    let mut n = 1;
    let mut in_string = false;
    let mut escaped = false;
    for &b in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b'[' | b'{' | b',' | b':') {
            n += 1;
        }
    }
    n
}

/// The tag byte a raw frame's body opens with (no JSON object does): its data follows.
pub const RAW_TAG: u8 = 0;

/// A raw frame carries at most this much data (the driver's `RAW_PIECE`).
pub const RAW_PIECE: usize = 64 << 20;

/// A raw frame's length and tag, before `len` bytes of its data.
pub fn raw_header(len: usize) -> [u8; 5] {
    let [a, b, c, d] = ((len + 1) as u32).to_be_bytes();
    [a, b, c, d, RAW_TAG]
}

/// Reads the driver's frames as their bytes arrive, holding at most one frame: a frame longer
/// than the caller's limit (what the results may still take) is skipped as it streams past,
/// never buffered, and counted. Raw frames are kept only while armed (`arm_raw`, a kernel's
/// state being saved), up to the armed cap; otherwise skipped.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Bytes of a skipped frame still to come.
    skipping: usize,
    /// Frames skipped for their size (bytes, or JSON values: `MAX_FRAME_VALUES`).
    pub skipped: usize,
    /// Raw data kept while armed, and how much more may come.
    raw: Option<(Vec<u8>, u64)>,
    /// Bytes of a kept raw frame still to come.
    streaming: usize,
}

impl FrameReader {
    /// Takes the next bytes of the stream; returns the whole frames they completed. `limit`
    /// says how long a frame may be to be read.
    pub fn feed(&mut self, mut data: &[u8], limit: impl Fn() -> usize) -> Vec<Value> {
        let mut out = Vec::new();
        while !data.is_empty() {
            if self.skipping > 0 {
                let n = self.skipping.min(data.len());
                self.skipping -= n;
                data = &data[n..];
                continue;
            }
            if self.streaming > 0 {
                // A kept raw frame's data, straight into what is kept (never through `buf`).
                let n = self.streaming.min(data.len());
                if let Some((kept, _)) = &mut self.raw {
                    kept.extend_from_slice(&data[..n]);
                }
                self.streaming -= n;
                data = &data[n..];
                continue;
            }
            // The length first (4 bytes), then the body up to that length; while raw frames are
            // kept, the body's first byte alone first, which says whether the frame is raw.
            let need = if self.buf.len() < 4 {
                4 - self.buf.len()
            } else if self.raw.is_some() && self.buf.len() == 4 && self.body_len() > 0 {
                1
            } else {
                4 + self.body_len() - self.buf.len()
            };
            let n = need.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() == 4 {
                let len = self.body_len();
                let mut allowed = limit().max(ALWAYS_READ);
                if let Some((_, room)) = &self.raw {
                    allowed = allowed
                        .max(usize::try_from(*room).unwrap_or(usize::MAX).min(RAW_PIECE) + 1);
                }
                if len > MAX_FRAME.min(allowed) {
                    self.skipped += 1;
                    self.skipping = len;
                    self.buf.clear();
                    continue;
                }
                if self.raw.is_none() {
                    self.buf.reserve_exact(len);
                }
            }
            if self.buf.len() == 5 && self.buf[4] == RAW_TAG {
                let len = self.body_len() - 1;
                if let Some((_, room)) = &mut self.raw {
                    if len as u64 <= *room {
                        *room -= len as u64;
                        self.streaming = len;
                    } else {
                        self.skipped += 1;
                        self.skipping = len;
                    }
                    self.buf.clear();
                    continue;
                }
            }
            if self.buf.len() >= 4 && self.buf.len() == 4 + self.body_len() {
                if self.buf.get(4) == Some(&RAW_TAG) {
                    // A raw frame while none are kept.
                    self.skipped += 1;
                } else if json_values_bound(&self.buf[4..]) > MAX_FRAME_VALUES {
                    self.skipped += 1;
                } else if let Ok(v) = serde_json::from_slice::<Value>(&self.buf[4..]) {
                    // A state frame says how much raw data follows: room for it all at once.
                    if let (Some((kept, room)), Some(head)) = (&mut self.raw, v.as_object()) {
                        if head.get("type").and_then(Value::as_str) == Some("state") {
                            let total = super::state::parts_total(head).unwrap_or(0).min(*room);
                            kept.reserve_exact(usize::try_from(total).unwrap_or(0));
                        }
                    }
                    out.push(v);
                }
                self.buf = Vec::new();
            }
        }
        out
    }

    fn body_len(&self) -> usize {
        u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize
    }

    /// Keeps the data of raw frames from now on, up to `cap` bytes in all.
    pub fn arm_raw(&mut self, cap: u64) {
        self.raw = Some((Vec::new(), cap));
    }

    /// The raw data kept since `arm_raw`; raw frames are skipped again from now on.
    pub fn take_raw(&mut self) -> Vec<u8> {
        self.skipping += std::mem::take(&mut self.streaming);
        self.raw.take().map(|(kept, _)| kept).unwrap_or_default()
    }

    /// Whether the stream stopped inside a frame (the box died mid-frame).
    pub fn cut(&self) -> bool {
        !self.buf.is_empty() || self.skipping > 0 || self.streaming > 0
    }
}

/// A rich result as the JS layer receives it: MIME type → payload, in the driver's order.
pub type Bundle = Map<String, Value>;

/// One kept result: its bundle, whether it is the value of the cell's last expression (the
/// driver's `result` frame, a Jupyter `execute_result`) rather than a `display()` or a figure,
/// and the chart data the driver read from a matplotlib figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub data: Bundle,
    pub main: bool,
    pub chart: Option<Value>,
}

/// The exception a cell raised, as the driver or a Jupyter kernel reported it
/// (`ExecutionResult.error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellError {
    pub name: String,
    pub value: String,
    pub traceback: String,
}

/// Where each kept result goes as soon as it is kept (`onResult`).
pub type ResultSink = tokio::sync::mpsc::UnboundedSender<Item>;

/// The most bytes of one chart's JSON a result keeps (the driver caps the points it reads
/// first; this bounds a box that sends its own frames).
pub const MAX_CHART_BYTES: usize = 4 << 20;

/// One field of an error, bounded: a box could send megabytes of evalue.
const MAX_ERROR_FIELD: usize = 1 << 20;

pub(crate) fn bounded(s: &str) -> String {
    if s.len() <= MAX_ERROR_FIELD {
        return s.to_string();
    }
    let mut end = MAX_ERROR_FIELD;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[cut at {} KiB]", &s[..end], MAX_ERROR_FIELD >> 10)
}

impl CellError {
    /// A driver `error` frame or a Jupyter `error` message's content: `ename`, `evalue` and a
    /// `traceback` that is a string (the driver) or a list of lines (Jupyter), ANSI colour
    /// codes removed.
    pub fn of(c: &Value) -> CellError {
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
        let traceback = match c.get("traceback") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(lines)) => lines
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        CellError {
            name: bounded(&strip_ansi_escapes::strip_str(s("ename"))),
            value: bounded(&strip_ansi_escapes::strip_str(s("evalue"))),
            traceback: bounded(&strip_ansi_escapes::strip_str(&traceback)),
        }
    }
}

/// How many rich results one call or cell keeps (display() calls, figures, the last value).
pub const MAX_RESULTS: usize = 10_000;

/// What one result costs against `MAX_RESULTS_BYTES` beyond its MIME names and payloads: its
/// map here and its objects in JS, so that many tiny results are bounded by memory too.
const RESULT_OVERHEAD: usize = 256;
/// The same, per MIME entry of a result.
const ENTRY_OVERHEAD: usize = 64;

/// The rich results of one call or cell, checked and kept within `MAX_RESULTS` and
/// `MAX_RESULTS_BYTES`; what does not fit is counted and said in a note. Every path (a fresh box,
/// a prewarmed one, the driver kernel, a Jupyter kernel) collects through this.
#[derive(Debug, Default)]
pub struct Results {
    bundles: Vec<Item>,
    /// The cell's exception, if it raised (the last one reported).
    error: Option<CellError>,
    /// Gets a copy of each result as it is kept.
    sink: Option<ResultSink>,
    bytes: usize,
    dropped: usize,
    notes: Vec<String>,
}

fn cost(b: &Bundle) -> usize {
    RESULT_OVERHEAD
        + b.iter()
            .map(|(k, v)| ENTRY_OVERHEAD + k.len() + v.as_str().map_or(0, str::len))
            .sum::<usize>()
}

impl Results {
    /// How long a frame or message may still be to be worth reading: nothing once the count
    /// is reached.
    pub fn room(&self) -> usize {
        if self.bundles.len() >= MAX_RESULTS {
            0
        } else {
            MAX_RESULTS_BYTES.saturating_sub(self.bytes)
        }
    }

    /// Counts results lost before they could be read (frames skipped for their size).
    pub fn lost(&mut self, n: usize) {
        self.dropped += n;
    }

    /// A driver frame: a display/result bundle is taken (with its chart), an error kept;
    /// other frames are not results.
    pub fn frame(&mut self, f: &Value) {
        let kind = f.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "error" {
            self.error = Some(CellError::of(f));
            return;
        }
        if kind != "display" && kind != "result" {
            return;
        }
        if let Some(data) = f.get("data").and_then(Value::as_object) {
            let chart = f.get("chart").filter(|c| c.is_object());
            self.push(data, kind == "result", chart);
        }
    }

    /// Sends each result kept from now on to `sink` too, as it is kept.
    pub fn live(&mut self, sink: Option<ResultSink>) {
        self.sink = sink;
    }

    /// Keeps the error a cell raised (a Jupyter kernel's `error` message).
    pub fn error(&mut self, e: CellError) {
        self.error = Some(e);
    }

    /// Checks a MIME bundle and keeps it if it fits; returns its index. `main`: it is the
    /// value of the cell's last expression; `chart`: data read from the figure it shows.
    pub fn push(
        &mut self,
        data: &Map<String, Value>,
        main: bool,
        chart: Option<&Value>,
    ) -> Option<usize> {
        let b = self.admit(data)?;
        let chart = chart.and_then(|c| self.chart(c));
        let item = Item {
            data: b,
            main,
            chart,
        };
        if let Some(s) = &self.sink {
            // A caller that went away no longer wants them.
            let _ = s.send(item.clone());
        }
        self.bundles.push(item);
        Some(self.bundles.len() - 1)
    }

    /// A chart within `MAX_CHART_BYTES` and what the results may still take, charged to them;
    /// else None and a note.
    fn chart(&mut self, c: &Value) -> Option<Value> {
        let len = c.to_string().len();
        if len > MAX_CHART_BYTES || self.bytes + len > MAX_RESULTS_BYTES {
            self.notes.push(format!(
                "note: a figure's chart data ({len} bytes of JSON) was dropped: a chart keeps at most {} MiB",
                MAX_CHART_BYTES >> 20
            ));
            return None;
        }
        self.bytes += len;
        Some(c.clone())
    }

    /// Puts a checked bundle in place of result `at` (a Jupyter `update_display_data`),
    /// charged as a new result would be.
    pub fn replace(&mut self, at: usize, data: &Map<String, Value>) {
        if at >= self.bundles.len() {
            return;
        }
        if let Some(b) = self.admit(data) {
            self.bundles[at].data = b;
        }
    }

    /// A note about the results (a cut-off frame).
    pub fn note(&mut self, n: String) {
        self.notes.push(n);
    }

    fn admit(&mut self, data: &Map<String, Value>) -> Option<Bundle> {
        if self.bundles.len() >= MAX_RESULTS {
            self.dropped += 1;
            return None;
        }
        let b = bundle(data, &mut self.notes)?;
        let c = cost(&b);
        if self.bytes + c > MAX_RESULTS_BYTES {
            self.dropped += 1;
            return None;
        }
        self.bytes += c;
        Some(b)
    }

    /// The exception the cell raised, if it did (taken before `finish`).
    pub fn take_error(&mut self) -> Option<CellError> {
        self.error.take()
    }

    /// The kept results, and the notes about what was refused or dropped.
    pub fn finish(mut self) -> (Vec<Item>, Vec<String>) {
        if self.dropped > 0 {
            self.notes.push(format!(
                "note: {} rich result(s) were dropped: a call keeps at most {MAX_RESULTS} results and {} MiB of them",
                self.dropped,
                MAX_RESULTS_BYTES >> 20
            ));
        }
        (self.bundles, self.notes)
    }
}

/// One MIME bundle, checked: entries that fail are dropped with a note; None when none is left.
fn bundle(data: &Map<String, Value>, notes: &mut Vec<String>) -> Option<Bundle> {
    let mut bundle = Map::new();
    for (mime, payload) in data {
        if !is_mime_type(mime) {
            let shown: String = mime.chars().take(80).collect();
            notes.push(format!(
                "note: a result's entry {shown:?} was dropped: its name is not a MIME type (type/subtype)"
            ));
            continue;
        }
        match check(mime, payload) {
            Ok(v) => {
                bundle.insert(mime.clone(), v);
            }
            Err(why) => notes.push(format!("note: a result's {mime} was dropped: {why}")),
        }
    }
    (!bundle.is_empty()).then_some(bundle)
}

/// `type/subtype` in RFC 6838's restricted names (what Jupyter bundles use, e.g.
/// `application/vnd.jupyter.widget-view+json`): never a name like `__proto__` or `toString`.
fn is_mime_type(s: &str) -> bool {
    let name = |p: &str| {
        (1..=127).contains(&p.len())
            && p.as_bytes()[0].is_ascii_alphanumeric()
            && p.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&c))
    };
    matches!(s.split_once('/'), Some((t, sub)) if name(t) && name(sub))
}

/// Payloads are strings; JSON values (`application/json` and every `+json` type, such as a
/// DataFrame's `application/vnd.dataresource+json`) are stringified (the spec's `json` is a
/// string); images are decoded once to prove they are what they say and within bounds.
fn check(mime: &str, payload: &Value) -> Result<Value, String> {
    if mime == "application/json" || mime.ends_with("+json") {
        return Ok(Value::String(payload.to_string()));
    }
    let Some(s) = payload.as_str() else {
        return Err("its payload is not a string".into());
    };
    let format = match mime {
        "image/png" => Some(image::ImageFormat::Png),
        "image/jpeg" => Some(image::ImageFormat::Jpeg),
        _ => None,
    };
    if let Some(format) = format {
        // Jupyter kernels send base64 in MIME style, in lines (IRkernel, `base64.encodebytes`):
        // whitespace is ignored, as Jupyter clients do, and the payload kept without it.
        let limit = MAX_IMAGE_BYTES.div_ceil(3) * 4;
        let too_large = || format!("the image is larger than {} MiB", MAX_IMAGE_BYTES >> 20);
        if s.len() > 2 * limit {
            return Err(too_large());
        }
        let b64: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        if b64.len() > limit {
            return Err(too_large());
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&b64)
            .map_err(|e| format!("its base64 is invalid ({e})"))?;
        verify_image(&bytes, format)?;
        return Ok(Value::String(b64));
    }
    Ok(Value::String(s.to_string()))
}

fn verify_image(bytes: &[u8], format: image::ImageFormat) -> Result<(), String> {
    let mut reader = image::ImageReader::with_format(std::io::Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_PIXELS * 4);
    reader.limits(limits);
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| format!("it is not a valid image ({e})"))?;
    if u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(format!(
            "{w}x{h} pixels is more than the {MAX_PIXELS} allowed"
        ));
    }
    let mut reader = image::ImageReader::with_format(std::io::Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_PIXELS * 4);
    reader.limits(limits);
    reader
        .decode()
        .map(|_| ())
        .map_err(|e| format!("it does not decode ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    fn png(w: u32, h: u32) -> String {
        let img = image::RgbaImage::new(w, h);
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        base64::engine::general_purpose::STANDARD.encode(out.into_inner())
    }

    /// Every frame of `bytes`, fed in pieces of `step` bytes.
    fn read_all(bytes: &[u8], step: usize, limit: usize) -> (Vec<Value>, FrameReader) {
        let mut r = FrameReader::default();
        let mut out = Vec::new();
        for piece in bytes.chunks(step) {
            out.extend(r.feed(piece, || limit));
        }
        (out, r)
    }

    #[test]
    fn a_cell_frame_carries_its_env_only_when_it_has_one() {
        let (plain, _) = read_all(
            &cell_frame(7, "1", false, Some("m"), false, &[]),
            1 << 20,
            usize::MAX,
        );
        assert_eq!(
            plain[0],
            json!({"type": "cell", "id": 7, "code": "1", "once": false, "marker": "m"})
        );
        let env = [
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), String::new()),
        ];
        let (with, _) = read_all(
            &cell_frame(8, "2", false, None, false, &env),
            1 << 20,
            usize::MAX,
        );
        assert_eq!(with[0]["env"], json!({"A": "1", "B": ""}));
        assert_eq!(with[0]["code"], "2");
    }

    #[test]
    fn frames_round_trip_in_any_pieces_and_truncation_is_seen() {
        let mut bytes = frame(&json!({"type": "display", "data": {"text/plain": "1"}}));
        bytes.extend(frame(&json!({"type": "done", "status": "ok"})));
        for step in [1, 3, 4, 5, 1 << 20] {
            let (frames, r) = read_all(&bytes, step, usize::MAX);
            assert_eq!((frames.len(), r.cut()), (2, false), "step {step}");
            assert_eq!(frames[1]["status"], "ok");
        }
        let (frames, r) = read_all(&bytes[..bytes.len() - 3], 7, usize::MAX);
        assert_eq!((frames.len(), r.cut()), (1, true));
    }

    #[test]
    fn a_frame_of_too_many_values_is_skipped_unparsed_and_the_next_one_read() {
        let n = MAX_FRAME_VALUES + 10;
        let many = format!(
            r#"{{"type":"display","data":{{"application/json":[{}0]}}}}"#,
            "0,".repeat(n)
        );
        let mut bytes = (many.len() as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(many.as_bytes());
        // The same count of commas inside a string is one value: read.
        let text = json!({"type": "display", "data": {"text/plain": ",".repeat(n)}});
        bytes.extend(frame(&text));
        bytes.extend(frame(&json!({"type": "done", "status": "ok"})));
        let mut r = FrameReader::default();
        let frames = r.feed(&bytes, || MAX_RESULTS_BYTES);
        assert_eq!(r.skipped, 1);
        assert_eq!(frames.len(), 2);
        assert_eq!(
            frames[0]["data"]["text/plain"].as_str().map(str::len),
            Some(n)
        );
        assert_eq!(frames[1]["type"], "done");
        assert_eq!(json_values_bound(br#"{"a":[1,2],"b":"x,\",y"}"#), 7);
    }

    #[test]
    fn a_frame_over_the_limit_is_skipped_unread_and_the_next_one_read() {
        let big = frame(&json!({"type": "display", "data": {"text/plain": "x".repeat(10_000)}}));
        let mut bytes = big.clone();
        bytes.extend(frame(&json!({"type": "done", "status": "ok"})));
        let (frames, r) = read_all(&bytes, 100, 500);
        assert_eq!((frames.len(), r.skipped, r.cut()), (1, 1, false));
        assert_eq!(frames[0]["type"], "done");
    }

    fn raw(data: &[u8]) -> Vec<u8> {
        let mut out = raw_header(data.len()).to_vec();
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn raw_frames_are_kept_only_while_armed_and_only_up_to_the_cap() {
        let mut bytes = raw(b"never kept");
        bytes.extend(frame(&json!({"type": "state", "parts": [5, 3]})));
        let mut r = FrameReader::default();
        let frames = r.feed(&bytes, || 1 << 20);
        assert_eq!((frames.len(), r.skipped), (1, 1));
        // Armed: pieces in any split add up; a piece past the cap is skipped, not kept.
        r.arm_raw(8);
        let mut armed = raw(b"abcde");
        armed.extend(raw(b"fgh"));
        armed.extend(raw(b"over"));
        armed.extend(frame(&json!({"type": "done"})));
        for piece in armed.chunks(3) {
            r.feed(piece, || 1 << 20);
        }
        assert_eq!(r.skipped, 2);
        let data = r.take_raw();
        assert_eq!(data, b"abcdefgh");
        let head = frames[0].as_object().unwrap().clone();
        let state = crate::lang::state::KernelState::of(head.clone(), data).unwrap();
        assert_eq!(state.data.len(), 8);
        assert!(crate::lang::state::KernelState::of(head, b"short".to_vec()).is_none());
        // Disarmed again.
        assert!(r.feed(&raw(b"late"), || 1 << 20).is_empty());
        assert_eq!((r.skipped, r.take_raw().len()), (3, 0));
    }

    fn results(frames: &[Value]) -> (Vec<Item>, Vec<String>) {
        let mut r = Results::default();
        frames.iter().for_each(|f| r.frame(f));
        r.finish()
    }

    #[test]
    fn images_are_checked_and_json_stringified() {
        let frames = vec![
            json!({"type": "result", "data": {"text/plain": "x", "image/png": png(4, 3), "application/json": {"a": [1]}}}),
            json!({"type": "display", "data": {"text/plain": "bad", "image/png": "aGVsbG8="}}),
            json!({"type": "error", "ename": "E"}),
        ];
        let (bundles, notes) = results(&frames);
        assert_eq!(bundles.len(), 2);
        assert_eq!(
            bundles[0].data.keys().collect::<Vec<_>>(),
            ["text/plain", "image/png", "application/json"]
        );
        assert_eq!(bundles[0].data["application/json"], json!("{\"a\":[1]}"));
        assert!(!bundles[1].data.contains_key("image/png"));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("image/png"), "{notes:?}");
    }

    #[test]
    fn a_json_suffixed_type_is_json_text_too() {
        let frame = json!({"type": "display", "data": {"text/plain": "t", "application/vnd.dataresource+json": {"data": [{"a": 1}]}}});
        let (bundles, notes) = results(&[frame]);
        assert_eq!(notes, Vec::<String>::new());
        assert_eq!(
            bundles[0].data["application/vnd.dataresource+json"],
            json!("{\"data\":[{\"a\":1}]}")
        );
    }

    #[test]
    fn base64_in_lines_is_decoded_and_kept_without_the_breaks() {
        let b64 = png(40, 30);
        let lines: Vec<String> = b64
            .as_bytes()
            .chunks(76)
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect();
        let mime_style = lines.join("\n") + "\n";
        assert!(mime_style.contains('\n'));
        let (bundles, notes) =
            results(&[json!({"type": "display", "data": {"image/png": mime_style}})]);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(bundles[0].data["image/png"], json!(b64));
    }

    #[test]
    fn names_that_are_not_mime_types_are_dropped() {
        let (bundles, notes) = results(&[json!({"type": "display", "data": {
            "text/plain": "ok", "hasOwnProperty": "x", "__proto__": "y", "toString": "z",
            "application/vnd.jupyter.widget-view+json": "{}", "text/": "w"}})]);
        assert_eq!(
            bundles[0].data.keys().collect::<Vec<_>>(),
            ["text/plain", "application/vnd.jupyter.widget-view+json"]
        );
        assert_eq!(notes.len(), 4, "{notes:?}");
    }

    #[test]
    fn results_are_bounded_in_count_and_bytes_with_a_note() {
        let tiny = json!({"type": "display", "data": {"text/plain": "1"}});
        let (bundles, notes) = results(&vec![tiny; MAX_RESULTS + 5]);
        assert_eq!(bundles.len(), MAX_RESULTS);
        assert!(
            notes[0].starts_with("note: 5 rich result(s) were dropped"),
            "{notes:?}"
        );
        let big =
            json!({"type": "display", "data": {"text/plain": "x".repeat(MAX_RESULTS_BYTES / 3)}});
        let (bundles, notes) = results(&[big.clone(), big.clone(), big.clone(), big]);
        assert_eq!(bundles.len(), 2);
        assert!(notes[0].starts_with("note: 2 rich result(s)"), "{notes:?}");
    }

    #[test]
    fn the_last_value_is_main_a_chart_is_kept_and_an_error_is_taken() {
        let mut r = Results::default();
        let chart = json!({"type": "line", "title": "t", "elements": []});
        for f in [
            json!({"type": "display", "data": {"text/plain": "fig"}, "chart": chart}),
            json!({"type": "result", "data": {"text/plain": "2"}, "chart": "not an object"}),
            json!({"type": "error", "ename": "\u{1b}[31mValueError\u{1b}[0m", "evalue": "bad", "traceback": "Traceback\nValueError: bad\n"}),
        ] {
            r.frame(&f);
        }
        let e = r.take_error().unwrap();
        assert_eq!((e.name.as_str(), e.value.as_str()), ("ValueError", "bad"));
        assert!(e.traceback.ends_with("ValueError: bad\n"));
        let (items, notes) = r.finish();
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(
            items.iter().map(|i| i.main).collect::<Vec<_>>(),
            [false, true]
        );
        assert_eq!(items[0].chart.as_ref(), Some(&chart));
        assert_eq!(items[1].chart, None);
        let lines = CellError::of(
            &json!({"ename": "E", "evalue": "v", "traceback": ["a", "\u{1b}[0;31mb\u{1b}[0m"]}),
        );
        assert_eq!(lines.traceback, "a\nb");
    }

    #[test]
    fn a_chart_over_its_cap_is_dropped_with_a_note() {
        let mut r = Results::default();
        let big = json!({"type": "line", "elements": ["x".repeat(MAX_CHART_BYTES)]});
        r.frame(&json!({"type": "display", "data": {"text/plain": "fig"}, "chart": big}));
        let (items, notes) = r.finish();
        assert_eq!((items.len(), items[0].chart.is_none()), (1, true));
        assert!(notes[0].contains("chart data"), "{notes:?}");
    }
}
