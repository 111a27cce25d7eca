//! `publish()`'s handle (js/publish.js wraps it as `PublishedPort`).

use super::errors::to_napi;
use crate::error::Error;
use napi_derive::napi;

#[napi]
pub struct NativePublished {
    pub(super) inner: crate::session::publish::Published,
}

/// The request as JS sent it (`session::PublishRequest`).
pub(super) fn request(json: &str) -> napi::Result<crate::session::publish::PublishRequest> {
    serde_json::from_str(json)
        .map_err(|e| to_napi(Error::Invalid(format!("publish() options: {e}"))))
}

#[napi]
impl NativePublished {
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.inner.url.clone()
    }

    #[napi(getter)]
    pub fn token(&self) -> String {
        self.inner.token.clone()
    }

    /// The host's address it listens on.
    #[napi(getter)]
    pub fn host(&self) -> String {
        self.inner.address.ip().to_string()
    }

    /// The host's port it listens on.
    #[napi(getter)]
    pub fn port(&self) -> u32 {
        u32::from(self.inner.address.port())
    }

    /// Resolves once the port is closed and its connections ended.
    #[napi]
    pub async fn close(&self) {
        self.inner.close().await;
    }
}
