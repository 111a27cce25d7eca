//! The Jupyter messaging protocol's wire form (v5.3, what ipykernel 6 and IRkernel 1.3 speak):
//! a multipart ZeroMQ message of routing identities, the `<IDS|MSG>` delimiter, a hex
//! HMAC-SHA256 signature, then four JSON frames (header, parent header, metadata, content) and
//! any raw buffers, which the signature does not cover.
//!
//! Written here rather than taken from `jupyter-zmq-client`: the framing is a page of code, and
//! we want two things that crate does not offer: every dropped message counted by why (a bad
//! signature is reported to the caller), and no second crypto stack (it brings `ring`; we
//! already have `sha2`, and `hmac` verifies in constant time).

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;

/// The frame between routing identities and the signature.
pub const DELIMITER: &[u8] = b"<IDS|MSG>";
/// The protocol version we put in headers.
pub const PROTOCOL_VERSION: &str = "5.3";
/// A message larger than this (all its frames) is not read: the largest image a result may hold
/// is 32 MiB (43 MiB in base64), and ipykernel and IRkernel send output in pieces far smaller.
/// It bounds one JSON parse, and what the ZeroMQ reader buffers (`session::kernel::jupyter`).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Signs and verifies with one kernel's key.
#[derive(Clone)]
pub struct Signer {
    mac: Hmac<Sha256>,
}

impl Signer {
    pub fn new(key: &[u8]) -> Signer {
        Signer {
            // HMAC takes a key of any length.
            mac: <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                .unwrap_or_else(|_| unreachable!("HMAC accepts any key length")),
        }
    }

    fn mac_of(&self, parts: &[&[u8]; 4]) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        for p in parts {
            mac.update(p);
        }
        mac
    }

    /// The lowercase hex signature of header, parent header, metadata and content.
    pub fn sign(&self, parts: &[&[u8]; 4]) -> String {
        hex::encode(self.mac_of(parts).finalize().into_bytes())
    }

    /// Whether `signature` (hex, as received) signs `parts`. The comparison is constant-time
    /// (`Mac::verify_slice`); a signature that is not hex fails without being compared.
    pub fn verify(&self, signature: &[u8], parts: &[&[u8]; 4]) -> bool {
        match hex::decode(signature) {
            Ok(sig) => self.mac_of(parts).verify_slice(&sig).is_ok(),
            Err(_) => false,
        }
    }
}

/// One received message, its JSON parsed.
#[derive(Debug, Clone)]
pub struct Message {
    pub header: Value,
    pub parent_header: Value,
    pub content: Value,
}

impl Message {
    pub fn msg_type(&self) -> &str {
        self.header
            .get("msg_type")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The id of the request this message answers, if any.
    pub fn parent_id(&self) -> Option<&str> {
        self.parent_header.get("msg_id").and_then(Value::as_str)
    }
}

/// Why a received message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The signature did not match (or was missing): not from the kernel we started.
    BadSignature,
    /// No delimiter, too few frames, or JSON that does not parse.
    Malformed,
    /// Over `MAX_MESSAGE_BYTES`, or its parts together over `driver::MAX_FRAME_VALUES` JSON values.
    TooLarge,
}

/// Splits a multipart message into its parts and checks its signature.
pub fn decode(signer: &Signer, frames: &[Bytes]) -> Result<Message, Dropped> {
    if frames.iter().map(Bytes::len).sum::<usize>() > MAX_MESSAGE_BYTES {
        return Err(Dropped::TooLarge);
    }
    let at = frames
        .iter()
        .position(|f| f.as_ref() == DELIMITER)
        .ok_or(Dropped::Malformed)?;
    let rest = &frames[at + 1..];
    if rest.len() < 5 {
        return Err(Dropped::Malformed);
    }
    let parts = [
        rest[1].as_ref(),
        rest[2].as_ref(),
        rest[3].as_ref(),
        rest[4].as_ref(),
    ];
    if !signer.verify(&rest[0], &parts) {
        return Err(Dropped::BadSignature);
    }
    // Parsed JSON costs many times its text (see `MAX_FRAME_VALUES`): bounded before parsing,
    // the three parts we parse together, so one message holds at most that many values.
    let values: usize = [parts[0], parts[1], parts[3]]
        .iter()
        .map(|b| crate::lang::driver::json_values_bound(b))
        .sum();
    if values > crate::lang::driver::MAX_FRAME_VALUES {
        return Err(Dropped::TooLarge);
    }
    let parse = |b: &[u8]| serde_json::from_slice::<Value>(b).map_err(|_| Dropped::Malformed);
    let header = parse(parts[0])?;
    if !header.is_object() {
        return Err(Dropped::Malformed);
    }
    Ok(Message {
        header,
        parent_header: parse(parts[1])?,
        content: parse(parts[3])?,
    })
}

/// One client session: its id goes in every header, and its signer signs every message.
#[derive(Clone)]
pub struct Session {
    pub id: String,
    pub signer: Signer,
}

impl Session {
    pub fn new(key: &[u8]) -> Session {
        Session {
            id: uuid::Uuid::new_v4().to_string(),
            signer: Signer::new(key),
        }
    }

    /// A request's frames (no identities: our DEALER sockets let the kernel's ROUTER add ours),
    /// and its msg_id, which the replies name as their parent.
    pub fn request(&self, msg_type: &str, content: &Value) -> (String, Vec<Bytes>) {
        let msg_id = uuid::Uuid::new_v4().to_string();
        let header = json!({
            "msg_id": msg_id,
            "session": self.id,
            "username": "kern",
            "date": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
            "msg_type": msg_type,
            "version": PROTOCOL_VERSION,
        });
        let frames = self.frames(&header, &json!({}), content);
        (msg_id, frames)
    }

    fn frames(&self, header: &Value, parent: &Value, content: &Value) -> Vec<Bytes> {
        let parts: [Vec<u8>; 4] = [
            header.to_string().into_bytes(),
            parent.to_string().into_bytes(),
            Value::Object(Map::new()).to_string().into_bytes(),
            content.to_string().into_bytes(),
        ];
        let sig = self
            .signer
            .sign(&[&parts[0], &parts[1], &parts[2], &parts[3]]);
        let mut out = vec![Bytes::from_static(DELIMITER), Bytes::from(sig.into_bytes())];
        out.extend(parts.into_iter().map(Bytes::from));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn signature_matches_a_known_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?", split over the
        // four parts (HMAC runs over their concatenation).
        let s = Signer::new(b"Jefe");
        let parts: [&[u8]; 4] = [b"what do ya", b" want ", b"for ", b"nothing?"];
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(s.sign(&parts), want);
        assert!(s.verify(want.as_bytes(), &parts));
        assert!(!s.verify(
            want.to_uppercase().replace('C', "c").as_bytes(),
            &[b"x", b"", b"", b""]
        ));
        assert!(!s.verify(b"zz", &parts));
        assert!(!s.verify(b"", &parts));
    }

    #[test]
    fn a_message_of_too_many_json_values_is_dropped_unparsed() {
        let session = Session::new(b"secret-key");
        let n = crate::lang::driver::MAX_FRAME_VALUES;
        let many: Vec<u8> = vec![0; n];
        let (_, frames) = session.request("display_data", &json!({ "data": many }));
        assert_eq!(
            decode(&session.signer, &frames).unwrap_err(),
            Dropped::TooLarge
        );
        let (_, fits) = session.request("display_data", &json!({ "data": vec![0; n / 2] }));
        assert!(decode(&session.signer, &fits).is_ok());
        // Spread over the header, the parent header and the content, the values count together.
        let third: Vec<u8> = vec![0; n / 3 + 10];
        let header = json!({"msg_type": "display_data", "x": third});
        let parts: [Vec<u8>; 4] = [
            header.to_string().into_bytes(),
            json!({ "x": third }).to_string().into_bytes(),
            b"{}".to_vec(),
            json!({ "data": third }).to_string().into_bytes(),
        ];
        let sig = session
            .signer
            .sign(&[&parts[0], &parts[1], &parts[2], &parts[3]]);
        let mut spread = vec![Bytes::from_static(DELIMITER), Bytes::from(sig.into_bytes())];
        spread.extend(parts.into_iter().map(Bytes::from));
        assert_eq!(
            decode(&session.signer, &spread).unwrap_err(),
            Dropped::TooLarge
        );
    }

    #[test]
    fn a_request_round_trips_and_a_forged_one_is_dropped() {
        let session = Session::new(b"secret-key");
        let (id, frames) = session.request("execute_request", &json!({"code": "1+1"}));
        assert_eq!(frames[0].as_ref(), DELIMITER);
        assert_eq!(frames.len(), 6);
        // As a ROUTER hands it on: an identity frame first.
        let mut routed = vec![b("peer-1")];
        routed.extend(frames.iter().cloned());
        let m = decode(&session.signer, &routed).expect("decodes");
        assert_eq!(m.msg_type(), "execute_request");
        assert_eq!(m.header["msg_id"], id);
        assert_eq!(m.content["code"], "1+1");
        assert_eq!(m.header["version"], PROTOCOL_VERSION);

        // Signed with another key, content changed after signing, or no signature at all.
        let other = Session::new(b"another-key");
        let (_, forged) = other.request("execute_request", &json!({"code": "1+1"}));
        assert_eq!(
            decode(&session.signer, &forged).unwrap_err(),
            Dropped::BadSignature
        );
        let mut tampered = frames.clone();
        tampered[5] = b(r#"{"code": "import os"}"#);
        assert_eq!(
            decode(&session.signer, &tampered).unwrap_err(),
            Dropped::BadSignature
        );
        let mut unsigned = frames.clone();
        unsigned[1] = Bytes::new();
        assert_eq!(
            decode(&session.signer, &unsigned).unwrap_err(),
            Dropped::BadSignature
        );
    }

    #[test]
    fn malformed_messages_are_dropped() {
        let session = Session::new(b"k");
        assert_eq!(
            decode(&session.signer, &[b("a"), b("b")]).unwrap_err(),
            Dropped::Malformed
        );
        assert_eq!(
            decode(&session.signer, &[b("<IDS|MSG>"), b("sig")]).unwrap_err(),
            Dropped::Malformed
        );
        // Validly signed, but the header is not JSON.
        let parts: [&[u8]; 4] = [b"not json", b"{}", b"{}", b"{}"];
        let sig = session.signer.sign(&parts);
        let frames: Vec<Bytes> = [DELIMITER, sig.as_bytes()]
            .into_iter()
            .chain(parts)
            .map(Bytes::copy_from_slice)
            .collect();
        assert_eq!(
            decode(&session.signer, &frames).unwrap_err(),
            Dropped::Malformed
        );
    }

    #[test]
    fn buffers_after_content_are_not_signed() {
        let session = Session::new(b"k");
        let (_, mut frames) = session.request("comm_msg", &json!({}));
        frames.push(b("raw buffer"));
        assert!(decode(&session.signer, &frames).is_ok());
    }
}
