//! A kernel's state as data (`kernel.fork()`, checkpoints): what a driver's `state` frame and the
//! raw frames after it hold, checked, and the frames that ask for it and give it back. The raw
//! frames themselves are `driver`'s.

use super::driver::{bounded, frame};
use serde_json::{Map, Value};

/// The largest kernel state kern takes from a driver or gives one (`KernelState`).
pub const MAX_STATE: u64 = 1 << 30;

/// A kernel's state as its driver saved it (driver_state.py): the fields of its `state` frame
/// (what the parts are, the Python that wrote them, the names left out) and the parts' bytes.
/// Untrusted: it came from the box, and goes only into another box of the same kind.
#[derive(Clone)]
pub struct KernelState {
    pub head: Map<String, Value>,
    pub data: Vec<u8>,
}

impl std::fmt::Debug for KernelState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelState({} bytes)", self.data.len())
    }
}

impl KernelState {
    /// The state of a `state` frame `head` and the raw data read after it: None unless the
    /// frame names its parts and they add up to `data`.
    pub fn of(mut head: Map<String, Value>, data: Vec<u8>) -> Option<KernelState> {
        head.remove("type");
        head.remove("id");
        let total = parts_total(&head)?;
        (total == data.len() as u64).then_some(KernelState { head, data })
    }

    /// The names the driver left out, with why (values that could not be pickled).
    pub fn left(&self) -> Vec<(String, String)> {
        let Some(items) = self.head.get("left").and_then(Value::as_array) else {
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|i| {
                let pair = i.as_array()?;
                Some((
                    bounded(pair.first()?.as_str()?),
                    bounded(pair.get(1)?.as_str()?),
                ))
            })
            .collect()
    }

    /// The frames that load this state into a driver: the `load` frame, then raw frames.
    pub fn load_head(&self, id: u64, marker: &str) -> Vec<u8> {
        let mut body = self.head.clone();
        body.insert("type".into(), "load".into());
        body.insert("id".into(), id.into());
        body.insert("marker".into(), marker.into());
        frame(&Value::Object(body))
    }
}

/// The sum of a state frame's `parts`, if they are sizes and within `MAX_STATE`.
pub(crate) fn parts_total(head: &Map<String, Value>) -> Option<u64> {
    let parts = head.get("parts")?.as_array()?;
    let mut total = 0u64;
    for p in parts {
        total = total.checked_add(p.as_u64()?)?;
    }
    (total <= MAX_STATE).then_some(total)
}

/// The `save` frame: the driver answers with the kernel's state (`KernelState`).
pub fn save_frame(id: u64, marker: &str) -> Vec<u8> {
    frame(&serde_json::json!({"type": "save", "id": id, "marker": marker}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_state_names_what_it_left_out_and_loads_with_its_fields() {
        let head = json!({"type": "state", "id": 4, "parts": [2], "python": 1,
            "left": [["lock", "TypeError: cannot pickle"], ["bad"], 7]});
        let s = KernelState::of(head.as_object().unwrap().clone(), vec![1, 2]).unwrap();
        assert_eq!(
            s.left(),
            vec![("lock".to_string(), "TypeError: cannot pickle".to_string())]
        );
        let f = s.load_head(9, "M");
        let v: Value = serde_json::from_slice(&f[4..]).unwrap();
        assert_eq!(
            (
                v["type"].as_str(),
                v["id"].as_u64(),
                v["marker"].as_str(),
                v["python"].as_u64()
            ),
            (Some("load"), Some(9), Some("M"), Some(1))
        );
        let over = json!({"parts": [MAX_STATE, 1]});
        assert!(KernelState::of(over.as_object().unwrap().clone(), Vec::new()).is_none());
    }
}
