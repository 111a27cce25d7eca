//! Per-language launch: which interpreter a `runCode` snippet goes to, and how.

pub mod driver;
pub mod jupyter;

use crate::error::{Error, Result};

/// Largest snippet `runCode` passes: the kernel refuses a single argv string over 128 KiB
/// (MAX_ARG_STRLEN), and the code travels as `-c`/`-e` so that Python's `sys.path[0]` and
/// Node's `require` resolve against the workspace as they do for an interactive cell.
pub const MAX_CODE_BYTES: usize = 128 * 1024 - 1;

/// A python cell travels on the box's channel, not in argv: this is its cap.
pub const MAX_CELL_BYTES: usize = 16 << 20;

/// Checks a python cell before it goes to the driver (a one-shot call or a kernel's cell).
pub fn check_cell(code: &str) -> Result<()> {
    if code.contains('\0') {
        return Err(Error::Invalid(
            "the code contains a NUL byte, which Python source cannot".into(),
        ));
    }
    check_cell_size(code)
}

/// Checks a cell's size (any kernel's: a Jupyter kernel's language may allow NUL bytes).
pub fn check_cell_size(code: &str) -> Result<()> {
    if code.len() > MAX_CELL_BYTES {
        return Err(Error::Invalid(format!(
            "the code is {} bytes, over the {} MiB a cell may be; write it to a workspace file and run it with run([\"python3\", \"file.py\"])",
            code.len(),
            MAX_CELL_BYTES >> 20
        )));
    }
    Ok(())
}

/// How a snippet is started.
pub struct Launch {
    pub argv: Vec<String>,
    pub env: Env,
    /// For python: the cell the driver runs, sent on the box's channel.
    pub cell: Option<String>,
}

/// Extra environment variables, in order.
pub type Env = Vec<(String, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    Bash,
    Sh,
    Node,
}

impl Language {
    pub fn parse(name: &str) -> Result<Language> {
        match name {
            "python" => Ok(Language::Python),
            "bash" => Ok(Language::Bash),
            "sh" => Ok(Language::Sh),
            "node" => Ok(Language::Node),
            other => Err(Error::Invalid(format!(
                "language {other:?} is not supported; use one of \"python\", \"bash\", \"sh\", \"node\""
            ))),
        }
    }

    /// How `code` runs: python through the driver (the argv starts it, the code goes to it as a
    /// cell on the box's channel); the others as the interpreter's `-c`/`-e` argument.
    pub fn launch(self, code: &str) -> Result<Launch> {
        if self == Language::Python {
            check_cell(code)?;
            return Ok(Launch {
                argv: vec!["python3".into(), "-c".into(), driver::DRIVER.into()],
                // Unbuffered, so onStdout sees prints as they happen rather than at exit.
                env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
                cell: Some(code.to_string()),
            });
        }
        let (argv, env) = self.argv(code)?;
        Ok(Launch {
            argv,
            env,
            cell: None,
        })
    }

    /// The argv that runs `code` directly, and extra environment the interpreter wants.
    pub fn argv(self, code: &str) -> Result<(Vec<String>, Env)> {
        if code.len() > MAX_CODE_BYTES {
            return Err(Error::Invalid(format!(
                "the code is {} bytes; runCode passes code as one argument, which Linux caps at 128 KiB. \
                 Write it to a workspace file and run it with run([\"python3\", \"file.py\"])",
                code.len()
            )));
        }
        if code.contains('\0') {
            return Err(Error::Invalid(
                "the code contains a NUL byte, which no interpreter's argument can carry".into(),
            ));
        }
        let (prog, flag, env): (&str, &str, &[(&str, &str)]) = match self {
            // Unbuffered, so onStdout sees prints as they happen rather than at exit.
            Language::Python => ("python3", "-c", &[("PYTHONUNBUFFERED", "1")]),
            Language::Bash => ("bash", "-c", &[]),
            Language::Sh => ("sh", "-c", &[]),
            Language::Node => ("node", "-e", &[]),
        };
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok((vec![prog.into(), flag.into(), code.into()], env))
    }
}

/// A program's output as text: moved, not copied, when it is valid UTF-8 (a call's output may
/// be tens of MiB); otherwise each invalid sequence becomes U+FFFD.
pub fn output_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_map_to_their_interpreters() {
        assert_eq!(
            Language::parse("python").unwrap().argv("1").unwrap().0,
            ["python3", "-c", "1"]
        );
        assert_eq!(
            Language::parse("node").unwrap().argv("1").unwrap().0,
            ["node", "-e", "1"]
        );
        assert!(Language::parse("ruby").is_err());
    }

    #[test]
    fn oversized_or_nul_code_is_refused() {
        let big = "x".repeat(MAX_CODE_BYTES + 1);
        assert!(Language::Python.argv(&big).is_err());
        assert!(Language::Sh.argv("a\0b").is_err());
    }
}
