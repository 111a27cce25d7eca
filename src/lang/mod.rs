//! Per-language launch: which interpreter a `runCode` snippet goes to, and how.

pub mod driver;
pub mod jupyter;
pub mod sources;
pub mod state;

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
    /// An addition: TypeScript, run by the node driver once the box's Node strips its types.
    TypeScript,
}

impl Language {
    pub fn parse(name: &str) -> Result<Language> {
        match name {
            "python" => Ok(Language::Python),
            "bash" => Ok(Language::Bash),
            "sh" => Ok(Language::Sh),
            "node" => Ok(Language::Node),
            "typescript" => Ok(Language::TypeScript),
            other => Err(Error::Invalid(format!(
                "language {other:?} is not supported; use one of \"python\", \"bash\", \"sh\", \"node\", \"typescript\""
            ))),
        }
    }

    /// Whether a driver runs this language's cells (frames on the box's channel, results back).
    pub fn driven(self) -> bool {
        matches!(
            self,
            Language::Python | Language::Node | Language::TypeScript
        )
    }

    /// What runs a driven language's cells, as messages name it.
    pub fn process_name(self) -> &'static str {
        match self {
            Language::Python => "python process",
            _ => "node process",
        }
    }

    /// The frames the driver takes before its first cell: the node driver's setup (its parser,
    /// and whether cells are TypeScript).
    pub fn setup_frame(self) -> Option<Vec<u8>> {
        match self {
            Language::Node => Some(sources::node_setup_frame(false)),
            Language::TypeScript => Some(sources::node_setup_frame(true)),
            _ => None,
        }
    }

    /// Checks a cell of a driven language before it goes to the driver.
    pub fn check_cell(self, code: &str) -> Result<()> {
        match self {
            Language::Python => check_cell(code),
            // JavaScript source may hold a NUL byte (in a string literal); JSON carries it.
            _ => check_cell_size(code),
        }
    }

    /// How `code` runs: python through the driver (the argv starts it, the code goes to it as a
    /// cell on the box's channel); the others as the interpreter's `-c`/`-e` argument.
    pub fn launch(self, code: &str) -> Result<Launch> {
        if self == Language::Python {
            check_cell(code)?;
            return Ok(Launch {
                // The driver itself comes on the channel (`sources::python_start`).
                argv: vec!["python3".into(), "-c".into(), sources::PY_LOADER.into()],
                // Unbuffered, so onStdout sees prints as they happen rather than at exit.
                env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
                cell: Some(code.to_string()),
            });
        }
        if matches!(self, Language::Node | Language::TypeScript) {
            self.check_cell(code)?;
            // The node driver (driver.js) reads its cells, as python's does, from the channel:
            // it gives a cell's last value as a result, display(), and `import` in a cell.
            return Ok(Launch {
                argv: vec!["node".into(), "-e".into(), sources::NODE_DRIVER.into()],
                env: Vec::new(),
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
            Language::Node | Language::TypeScript => ("node", "-e", &[]),
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
        let node = Language::parse("node").unwrap().launch("1").unwrap();
        assert_eq!(node.argv[..2], ["node", "-e"]);
        assert_eq!(node.cell.as_deref(), Some("1"));
        assert!(Language::TypeScript.setup_frame().is_some());
        assert!(Language::Python.setup_frame().is_none());
    }

    #[test]
    fn oversized_or_nul_code_is_refused() {
        let big = "x".repeat(MAX_CODE_BYTES + 1);
        assert!(Language::Python.argv(&big).is_err());
        assert!(Language::Sh.argv("a\0b").is_err());
    }
}
