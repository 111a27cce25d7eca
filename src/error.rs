//! The one error type of the crate's public operations. Each variant has a stable `code` that
//! the JS layer maps to a class (`SandboxError`, `MountRefused`); faults of a run are not errors
//! and never come through here.

/// A programmer or configuration mistake, or a missing runtime: thrown in JS.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad option, a bad argument, a call in the wrong state.
    #[error("{0}")]
    Invalid(String),
    /// A host mount refused as unsafe.
    #[error("{0}")]
    MountRefused(String),
    /// A call on a Sandbox (or kernel, process) not opened yet.
    #[error("{0}")]
    NotOpen(String),
    /// A call on a Sandbox, kernel or process that was closed, ended or torn down.
    #[error("{0}")]
    Closed(String),
    /// A workspace path refused (a symlink, `..`, not a regular file) or not there.
    #[error("{0}")]
    File(String),
    /// The image could not be resolved, pulled, verified or unpacked.
    #[error("{0}")]
    Image(String),
    /// A control the options insist on (`requireLimits`, `requireIsolation`) that this host
    /// cannot supply.
    #[error("{0}")]
    IsolationUnavailable(String),
    /// This host (its architecture, kernel or platform) cannot do what was asked at all.
    #[error("{0}")]
    HostUnsupported(String),
    /// A connection the caller asked for was refused: nothing accepts on that port (yet).
    #[error("{0}")]
    ConnectionRefused(String),
    /// The runtime could not be started or talked to.
    #[error("{0}")]
    Runtime(String),
    /// `setup` failed: thrown from `open()` with the command's exit code and last stderr lines.
    #[error("{message}")]
    SetupFailed {
        message: String,
        exit_code: i32,
        stderr_tail: String,
    },
}

impl Error {
    /// The stable code JS sees as `SandboxError.code` (the union `SandboxErrorCode` in
    /// index.d.ts; js/errors.js adds the JS-side ones).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Invalid(_) => "ERR_INVALID_OPTION",
            Error::MountRefused(_) => "ERR_MOUNT_REFUSED",
            Error::NotOpen(_) => "ERR_NOT_OPEN",
            Error::Closed(_) => "ERR_CLOSED",
            Error::File(_) => "ERR_FILE",
            Error::Image(_) => "ERR_IMAGE",
            Error::IsolationUnavailable(_) => "ERR_ISOLATION_UNAVAILABLE",
            Error::HostUnsupported(_) => "ERR_HOST_UNSUPPORTED",
            Error::ConnectionRefused(_) => "ERR_CONNECTION_REFUSED",
            Error::Runtime(_) => "ERR_RUNTIME",
            Error::SetupFailed { .. } => "ERR_SETUP_FAILED",
        }
    }

    /// Extra properties for the JS error object, beyond class and message.
    pub fn details(&self) -> Option<serde_json::Value> {
        match self {
            Error::SetupFailed {
                exit_code,
                stderr_tail,
                ..
            } => Some(serde_json::json!({ "exitCode": exit_code, "stderrTail": stderr_tail })),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for `Err(Error::Invalid(format!(...)))`.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => {
        Err($crate::error::Error::Invalid(format!($($arg)*)))
    };
}
