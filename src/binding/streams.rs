//! Workspace file streams (`createReadStream`, `createWriteStream`; js/streams.js makes the
//! Node streams).

use super::errors::to_napi;
use napi::bindgen_prelude::Buffer;
use napi_derive::napi;

#[napi]
pub struct NativeReadStream {
    pub(super) inner: crate::session::ReadStream,
}

#[napi]
impl NativeReadStream {
    /// The file's size when it was opened.
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        self.inner.size as f64
    }

    /// Up to `len` bytes (at most 1 MiB) from `position`; empty at the end of the file.
    #[napi]
    pub async fn read(&self, position: f64, len: u32) -> napi::Result<Buffer> {
        let data = self
            .inner
            .read(position as u64, len as usize)
            .await
            .map_err(to_napi)?;
        Ok(Buffer::from(data))
    }

    /// Releases the fd.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
    }
}

#[napi]
pub struct NativeWriteStream {
    pub(super) inner: crate::session::WriteStream,
}

#[napi]
impl NativeWriteStream {
    #[napi]
    pub async fn write(&self, data: Buffer) -> napi::Result<()> {
        self.inner.write(data.to_vec()).await.map_err(to_napi)
    }

    /// Puts the file in place.
    #[napi]
    pub async fn commit(&self) -> napi::Result<()> {
        self.inner.commit().await.map_err(to_napi)
    }

    /// Removes the temp file; the path is untouched.
    #[napi]
    pub fn abort(&self) {
        self.inner.abort();
    }
}
