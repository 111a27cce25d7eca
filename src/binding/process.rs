//! `NativeProcess`: a background process or terminal (js/processes.js wraps it).

use super::errors::to_napi;
use super::publish::NativePublished;
use super::result::{finish, NativeResult};
use crate::error::Error;
use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use std::sync::Arc;

/// A process started by `startProcess` (see `session::Process`).
#[napi]
pub struct NativeProcess {
    pub(super) inner: Arc<crate::session::Process>,
    /// Delivers its output; awaited before `wait` resolves, so every chunk came first.
    pub(super) forwarder: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[napi]
impl NativeProcess {
    /// Its pid in its box.
    #[napi(getter)]
    pub fn pid(&self) -> i32 {
        self.inner.pid
    }

    #[napi]
    pub fn running(&self) -> bool {
        self.inner.running()
    }

    #[napi]
    pub async fn write(&self, data: Buffer) -> napi::Result<()> {
        self.inner.write(&data).await.map_err(to_napi)
    }

    #[napi]
    pub async fn end(&self) -> napi::Result<()> {
        self.inner.end().await.map_err(to_napi)
    }

    #[napi]
    pub async fn kill(&self, signal: Option<String>) -> napi::Result<()> {
        self.inner.kill(signal.as_deref()).await.map_err(to_napi)
    }

    /// `cols` and `rows` as JS gave them (checked in `session::Process::resize`).
    #[napi]
    pub fn resize(&self, size_json: String) -> napi::Result<()> {
        let v: serde_json::Value = serde_json::from_str(&size_json)
            .map_err(|e| to_napi(Error::Invalid(format!("resize(): {e}"))))?;
        self.inner.resize(&v["cols"], &v["rows"]).map_err(to_napi)
    }

    /// A connected socket's descriptor, now the caller's (`net.Socket({ fd })` takes it).
    #[napi]
    pub async fn connect(&self, args_json: String) -> napi::Result<i32> {
        use std::os::fd::IntoRawFd;
        let v: serde_json::Value = serde_json::from_str(&args_json)
            .map_err(|e| to_napi(Error::Invalid(format!("connect(): {e}"))))?;
        let fd = self
            .inner
            .connect(&v["port"], &v["waitS"])
            .await
            .map_err(to_napi)?;
        Ok(fd.into_raw_fd())
    }

    /// ADDITION: a URL on the host into the box's port (`publish()`); `request_json` is
    /// `session::PublishRequest`.
    #[napi]
    pub async fn publish(&self, request_json: String) -> napi::Result<NativePublished> {
        let req = super::publish::request(&request_json)?;
        let inner = self.inner.publish(&req).await.map_err(to_napi)?;
        Ok(NativePublished { inner })
    }

    /// Its result once it has ended and every chunk was delivered; the first call takes it.
    #[napi]
    pub async fn wait(&self) -> napi::Result<NativeResult> {
        let result = self.inner.wait().await;
        let task = self.forwarder.lock().await.take();
        finish(result, task).await
    }
}
