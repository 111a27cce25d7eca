//! A prepared call: what every entry that starts a box for the caller checks and carries before
//! the box (`runCode`/`run`, `spawn`/`terminal`, kernels and prewarmed boxes, the zygote,
//! `setup`, the isolation probe of the call route):
//! the workload (argv, or a language's launch and cell), the timeout, the call's own `env` and
//! `cwd`, the box's spec from the session's posture, and the size check the kernel would
//! otherwise fail with E2BIG. `before` is the workspace walk and quota check a call makes before
//! its box. `route` then says which kind of box serves it.

use super::opened::Opened;
use super::percall::PerCall;
use super::result::over_quota;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::status::Fault;
use crate::error::{Error, Result};
use crate::lang::Language;
use crate::workspace::track;
use std::path::PathBuf;

/// What a box runs.
pub(super) enum Workload {
    /// A program of the image (`run`, `spawn`, `terminal`); `what` names the entry in errors.
    Argv {
        what: &'static str,
        argv: Vec<String>,
    },
    /// `runCode`: a snippet in `language` (python when absent). A driven language's snippet is a
    /// cell for the driver, on its own socket.
    Code {
        language: Option<String>,
        code: String,
    },
    /// A driver waiting for cells on its socket (a kernel, a prewarmed box).
    Driver(Language),
    /// A program of the session's own making (the zygote's python, a Jupyter kernel whose argv
    /// its kernelspec fills in later), with its own environment under the caller's.
    Own {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        channel: bool,
    },
}

/// A call checked and specified, before its box.
pub(super) struct Prepared {
    /// The box: the session's posture with this call's argv, environment, cwd and timeout.
    pub(super) spec: BoxSpec,
    /// The workspace on the host.
    pub(super) workspace: PathBuf,
    pub(super) timeout_ms: u64,
    /// The call's own `env` and `cwd`.
    pub(super) place: PerCall,
    /// The cell a driver runs (a driven language's `runCode`).
    pub(super) cell: Option<String>,
    /// The language of `runCode`, a kernel or a prewarmed box.
    pub(super) lang: Option<Language>,
}

/// A per-call `timeoutS` (absent or null: `default_ms`).
pub(super) fn timeout_ms(v: Option<&serde_json::Value>, default_ms: u64) -> Result<u64> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(default_ms),
        Some(v) => super::options::timeout_ms("timeoutS", v),
    }
}

/// A workload, checked: what the box runs, with the language's environment, the cell a driver
/// runs, and whether the box gets a channel (the driver's socket).
struct Launch {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cell: Option<String>,
    lang: Option<Language>,
    channel: bool,
}

fn launch(workload: Workload) -> Result<Launch> {
    Ok(match workload {
        Workload::Argv { what, argv } => {
            if argv.is_empty() || argv[0].is_empty() {
                let e = match what {
                    "run()" => {
                        "run() needs a non-empty argv array, e.g. run([\"ls\", \"-la\"])".into()
                    }
                    _ => format!("{what} needs a non-empty argv array, e.g. [\"bash\"]"),
                };
                return Err(Error::Invalid(e));
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return crate::invalid!("an argv element contains a NUL byte");
            }
            Launch {
                argv,
                env: Vec::new(),
                cell: None,
                lang: None,
                channel: false,
            }
        }
        Workload::Code { language, code } => {
            let lang = Language::parse(language.as_deref().unwrap_or("python"))?;
            let l = lang.launch(&code)?;
            Launch {
                channel: l.cell.is_some(),
                argv: l.argv,
                env: l.env,
                cell: l.cell,
                lang: Some(lang),
            }
        }
        Workload::Driver(lang) => {
            let l = lang.launch("")?;
            Launch {
                argv: l.argv,
                env: l.env,
                cell: None,
                lang: Some(lang),
                channel: true,
            }
        }
        Workload::Own { argv, env, channel } => Launch {
            argv,
            env,
            cell: None,
            lang: None,
            channel,
        },
    })
}

/// Checks `workload` and specifies its box in `opened`'s posture, with `place`'s env and cwd.
pub(super) fn prepare(
    opened: &Opened,
    workload: Workload,
    timeout_ms: u64,
    place: PerCall,
) -> Result<Prepared> {
    let l = launch(workload)?;
    let workspace = opened.workspace_path()?;
    let mut spec = opened.call_spec(
        l.argv, &l.env, &place.env, timeout_ms, l.channel, &workspace,
    );
    spec.cwd = place.cwd.clone();
    // What the kernel would refuse with E2BIG is the caller's mistake, said before a box.
    crate::config::check_exec_size(&spec.argv, &spec.env)?;
    Ok(Prepared {
        spec,
        workspace,
        timeout_ms,
        place,
        cell: l.cell,
        lang: l.lang,
    })
}

impl Prepared {
    /// The workspace before the box, when the session tracks files or caps the workspace: the
    /// snapshot to compare with after (with `trackFiles`), or the fault of a workspace already
    /// over `workspaceMaxBytes` (no box then).
    pub(super) async fn before(
        &self,
        opened: &Opened,
    ) -> std::result::Result<Option<track::Snapshot>, Fault> {
        let cfg = &opened.config;
        let quota = cfg.workspace_max_bytes;
        if !cfg.track_files && quota.is_none() {
            return Ok(None);
        }
        let ws = self.workspace.clone();
        let before = tokio::task::spawn_blocking(move || track::snapshot(&ws, quota))
            .await
            .unwrap_or_else(|e| track::Snapshot::unmeasured(e.to_string()));
        if let Some(fault) = quota.and_then(|cap| over_quota(&before, cap)) {
            return Err(fault);
        }
        Ok(cfg.track_files.then_some(before))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(what: &'static str, a: &[&str]) -> Result<Launch> {
        launch(Workload::Argv {
            what,
            argv: a.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn an_argv_is_checked_with_the_entry_named() {
        let e = argv("run()", &[]).err().expect("empty").to_string();
        assert!(e.contains("run() needs a non-empty argv array"), "{e}");
        let e = argv("spawn()", &[""])
            .err()
            .expect("empty first")
            .to_string();
        assert!(e.contains("spawn() needs a non-empty argv array"), "{e}");
        let e = argv("run()", &["ls", "a\0b"])
            .err()
            .expect("nul")
            .to_string();
        assert!(e.contains("NUL"), "{e}");
        let l = argv("run()", &["ls", "-la"]).expect("argv");
        assert_eq!(l.argv, ["ls", "-la"]);
        assert!(!l.channel && l.cell.is_none() && l.lang.is_none());
    }

    #[test]
    fn a_python_snippet_is_a_cell_on_the_channel_and_a_driver_waits_on_it() {
        let l = launch(Workload::Code {
            language: None,
            code: "print(1)".into(),
        })
        .expect("python");
        assert_eq!(l.lang, Some(Language::Python));
        assert_eq!(l.cell.as_deref(), Some("print(1)"));
        assert!(l.channel);
        let l = launch(Workload::Driver(Language::Python)).expect("driver");
        assert!(l.channel && l.cell.is_none());
        assert!(launch(Workload::Code {
            language: Some("cobol".into()),
            code: String::new(),
        })
        .is_err());
    }

    #[test]
    fn a_timeout_is_the_default_when_absent_or_null() {
        assert_eq!(timeout_ms(None, 7).ok(), Some(7));
        assert_eq!(timeout_ms(Some(&serde_json::Value::Null), 7).ok(), Some(7));
        assert_eq!(timeout_ms(Some(&serde_json::json!(2)), 7).ok(), Some(2000));
        assert!(timeout_ms(Some(&serde_json::json!(-1)), 7).is_err());
    }
}
