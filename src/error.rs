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
    pub fn code(&self) -> &'static str {
        match self {
            Error::MountRefused(_) => "ERR_MOUNT_REFUSED",
            _ => "ERR_SANDBOX",
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
