//! `Volume.create/list/inspect/remove` (an addition, issue 35): the named volumes of
//! `crate::volume`, each on a worker thread (they walk and remove trees), as JSON.

use super::errors::to_napi;
use crate::error::Error;
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// What a volume operation hands back: a volume's `Info` (or a list of them) as JSON; null for
/// a removal.
pub enum Op {
    Create(String, Option<f64>, Option<String>),
    Inspect(String),
    List,
    Remove(String),
}

pub struct VolumeTask(Op);

impl Task for VolumeTask {
    type Output = Option<String>;
    type JsValue = Option<String>;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        match &self.0 {
            Op::Create(name, size, from) => {
                let size = size
                    .map(crate::volume::check_size)
                    .transpose()
                    .map_err(to_napi)?;
                json(&crate::volume::create(name, size, from.as_deref()).map_err(to_napi)?)
            }
            Op::Inspect(name) => json(&crate::volume::inspect(name).map_err(to_napi)?),
            Op::List => json(&crate::volume::list().map_err(to_napi)?),
            Op::Remove(name) => crate::volume::remove(name).map(|()| None).map_err(to_napi),
        }
    }

    fn resolve(&mut self, _env: Env, out: Self::Output) -> napi::Result<Self::JsValue> {
        Ok(out)
    }
}

/// An `Info`, or a list of them, as JSON.
fn json<T: serde::Serialize>(v: &T) -> napi::Result<Option<String>> {
    serde_json::to_string(v)
        .map(Some)
        .map_err(|e| to_napi(Error::Runtime(e.to_string())))
}

/// Makes the volume `name` (`sizeMb`: its cap; null: none; `from`: a volume to copy): its
/// `Info` as JSON.
#[napi(ts_return_type = "Promise<string | null>")]
pub fn volume_create(
    name: String,
    size_mb: Option<f64>,
    from: Option<String>,
) -> AsyncTask<VolumeTask> {
    AsyncTask::new(VolumeTask(Op::Create(name, size_mb, from)))
}

/// The volume `name`'s `Info` as JSON.
#[napi(ts_return_type = "Promise<string | null>")]
pub fn volume_inspect(name: String) -> AsyncTask<VolumeTask> {
    AsyncTask::new(VolumeTask(Op::Inspect(name)))
}

/// Every volume's `Info`, as a JSON array.
#[napi(ts_return_type = "Promise<string | null>")]
pub fn volume_list() -> AsyncTask<VolumeTask> {
    AsyncTask::new(VolumeTask(Op::List))
}

/// Removes the volume `name` and what it holds (refused while mounted).
#[napi(ts_return_type = "Promise<string | null>")]
pub fn volume_remove(name: String) -> AsyncTask<VolumeTask> {
    AsyncTask::new(VolumeTask(Op::Remove(name)))
}
