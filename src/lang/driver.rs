//! The python driver's side in the addon: the driver source shipped in the binary, the frames
//! it speaks on the box's channel (fd 3), and turning its display/result frames into checked
//! rich results.
//!
//! A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. The host sends
//! `{"type": "cell", "id", "code", "once"}`; the driver answers, in order, `display` and
//! `result` frames (`data`: MIME type → payload), an `error` frame if the cell raised, and a
//! `done` frame.

use base64::Engine as _;
use serde_json::{Map, Value};

/// The driver, run as `python3 -c DRIVER`: stdlib only, it reads cells from fd 3.
pub const DRIVER: &str = include_str!("driver.py");

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
/// after the cell; `single` names a prewarmed box's one cell like a one-shot cell.
pub fn cell_frame(id: u64, code: &str, once: bool, marker: Option<&str>, single: bool) -> Vec<u8> {
    let mut body = serde_json::json!({"type": "cell", "id": id, "code": code, "once": once});
    if let Some(m) = marker {
        body["marker"] = Value::String(m.to_string());
    }
    if single {
        body["single"] = Value::Bool(true);
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

/// Splits a byte stream into frames; a truncated tail (the box died mid-frame) is dropped and
/// reported as `true`.
pub fn split_frames(mut bytes: &[u8]) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if len > MAX_FRAME || bytes.len() < 4 + len {
            return (out, true);
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&bytes[4..4 + len]) {
            out.push(v);
        }
        bytes = &bytes[4 + len..];
    }
    (out, !bytes.is_empty())
}

/// A rich result as the JS layer receives it: MIME type → payload, in the driver's order.
pub type Bundle = Map<String, Value>;

/// The display and result frames of a cell as checked bundles, in order, and the notes about
/// anything refused.
pub fn results(frames: &[Value]) -> (Vec<Bundle>, Vec<String>) {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for f in frames {
        let kind = f.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "display" && kind != "result" {
            continue;
        }
        let Some(data) = f.get("data").and_then(Value::as_object) else {
            continue;
        };
        out.extend(bundle(data, &mut notes));
    }
    (out, notes)
}

/// One MIME bundle, checked: entries that fail are dropped with a note; None when none is left.
/// Jupyter kernels' `display_data` and `execute_result` go through here too.
pub fn bundle(data: &Map<String, Value>, notes: &mut Vec<String>) -> Option<Bundle> {
    let mut bundle = Map::new();
    for (mime, payload) in data {
        match check(mime, payload) {
            Ok(v) => {
                bundle.insert(mime.clone(), v);
            }
            Err(why) => notes.push(format!("note: a result's {mime} was dropped: {why}")),
        }
    }
    (!bundle.is_empty()).then_some(bundle)
}

/// Payloads are strings; JSON values are stringified (the spec's `json` is a string); images
/// are decoded once to prove they are what they say and within bounds.
fn check(mime: &str, payload: &Value) -> Result<Value, String> {
    if mime == "application/json" {
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
        if s.len() > MAX_IMAGE_BYTES * 4 / 3 + 4 {
            return Err(format!(
                "the image is larger than {} MiB",
                MAX_IMAGE_BYTES >> 20
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| format!("its base64 is invalid ({e})"))?;
        verify_image(&bytes, format)?;
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

/// What the `done` frame says, if it came: the cell's status.
pub fn done_status(frames: &[Value]) -> Option<String> {
    frames
        .iter()
        .rev()
        .find(|f| f.get("type").and_then(Value::as_str) == Some("done"))
        .and_then(|f| f.get("status").and_then(Value::as_str))
        .map(str::to_string)
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

    #[test]
    fn frames_round_trip_and_truncation_is_seen() {
        let mut bytes = frame(&json!({"type": "display", "data": {"text/plain": "1"}}));
        bytes.extend(frame(&json!({"type": "done", "status": "ok"})));
        let (frames, cut) = split_frames(&bytes);
        assert_eq!((frames.len(), cut), (2, false));
        assert_eq!(done_status(&frames).as_deref(), Some("ok"));
        let (frames, cut) = split_frames(&bytes[..bytes.len() - 3]);
        assert_eq!((frames.len(), cut), (1, true));
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
            bundles[0].keys().collect::<Vec<_>>(),
            ["text/plain", "image/png", "application/json"]
        );
        assert_eq!(bundles[0]["application/json"], json!("{\"a\":[1]}"));
        assert!(!bundles[1].contains_key("image/png"));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("image/png"), "{notes:?}");
    }
}
