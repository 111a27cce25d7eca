//! `sb.watch()`'s handle (js/watch.js makes the async iterator).

use super::errors::to_napi;
use napi_derive::napi;

#[napi]
pub struct NativeWatch {
    pub(super) inner: crate::session::Watch,
}

/// One change (`WatchEvent` in index.d.ts).
#[napi(object)]
pub struct NativeWatchEvent {
    #[napi(js_name = "type")]
    pub kind: String,
    pub path: String,
    pub old_path: Option<String>,
    pub is_dir: bool,
    /// An overflow's count of dropped events, when known.
    pub dropped: Option<f64>,
}

#[napi]
impl NativeWatch {
    /// The next events, waiting for one; empty once the watch has ended.
    #[napi]
    pub async fn next(&self) -> napi::Result<Vec<NativeWatchEvent>> {
        let events = self.inner.next().await.map_err(to_napi)?;
        Ok(events
            .into_iter()
            .map(|e| NativeWatchEvent {
                kind: e.kind.as_str().to_string(),
                path: e.path,
                old_path: e.old_path,
                is_dir: e.is_dir,
                dropped: e.dropped.map(|n| n as f64),
            })
            .collect())
    }

    /// Ends the watch; `next()` ends once what is queued is taken.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
    }
}
