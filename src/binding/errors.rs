//! Errors as they cross into JS: the stable code in front of the message.

use crate::error::Error;

/// napi-rs can't reject with a JS subclass, so the code rides in front of the message
/// (`[ERR_FILE] ...`) and the JS layer turns it into the class and `code`; extra properties (a
/// failed setup's exit code) follow the message after a NUL, as JSON. Not napi's own
/// `Error::new(status, ..)` with a string status (which sets `code`): napi 3.16's async
/// methods must return `napi::Error<Status>` (`execute_tokio_future` takes
/// `impl Into<Error>`), and most of ours are async; one channel serves both kinds.
pub(super) fn to_napi(e: Error) -> napi::Error {
    let details = e.details().map(|d| format!("\0{d}")).unwrap_or_default();
    napi::Error::from_reason(format!("[{}] {e}{details}", e.code()))
}

/// The abort registry's lock was poisoned (a panic while it was held).
pub(super) fn poisoned() -> napi::Error {
    to_napi(Error::Runtime(
        "the call registry's lock is poisoned".into(),
    ))
}
