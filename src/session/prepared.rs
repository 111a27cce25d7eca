//! A prepared call: what every entry that starts a box for the caller checks and carries before
//! the box (`runCode`/`run`, `spawn`/`terminal`, kernels and prewarmed boxes, the zygote,
//! `setup`, the isolation probe of the call route):
//! the workload (argv, or a language's launch and cell), the timeout, the call's own `env` and
//! `cwd`, the box's spec from the session's posture, and the size check the kernel would
//! otherwise fail with E2BIG. `before` is the workspace walk and quota check a call makes before
//! its box, `check_abort` its abort, and `ends` the box's descriptors (a driver's channel,
//! stdin, a terminal, the connector) with its egress line. `route` then says which kind of box
//! serves it.

use super::network::{self, Line};
use super::opened::Opened;
use super::percall::{self, PerCall};
use super::result::over_quota;
use crate::engine::boxside::connector;
use crate::engine::shared::handoff::BoxFds;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::status::Fault;
use crate::error::{Error, Result};
use crate::lang::Language;
use crate::workspace::track;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

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
    /// What the box's channel holds before anything else: the python driver, which
    /// `sources::PY_LOADER` reads (a zygote's fork, whose driver runs already, reads past it).
    pub(super) first: Option<Arc<Vec<u8>>>,
    /// Where the box's stdin comes from (`set_stdin`, which the spec announces); none: /dev/null.
    stdin: Option<Stdin>,
    /// The call's abort signal (`run`/`runCode`), checked by `check_abort`.
    pub(super) abort: Option<watch::Receiver<bool>>,
}

/// Where a box's stdin comes from.
pub(super) enum Stdin {
    /// These bytes, then EOF (`run`'s `stdin`): a task feeds them from the box's start.
    Bytes(Vec<u8>),
    /// A pipe the caller writes as the workload runs (`spawn`'s `write()`).
    Pipe,
}

/// The box's ends of its descriptors, as its spec announces them, and its egress line. Sent
/// with the spec: lent (`lent`) by a call, which keeps them until its box has ended, or handed
/// over (`hand_over`) by a steered process, so that the box holds the only copies.
pub(super) struct BoxEnds {
    /// The channel, stdin, terminal and connector ends (the egress one is the line's).
    fds: BoxFds,
    line: Option<Line>,
}

/// Our ends of the box's descriptors.
#[derive(Default)]
pub(super) struct OurEnds {
    /// The driver's socket, with `spec.channel`.
    pub(super) driver: Option<tokio::net::UnixStream>,
    /// The write end of the stdin pipe, with `Stdin::Pipe`.
    pub(super) stdin: Option<tokio::net::unix::pipe::Sender>,
    /// The task feeding `Stdin::Bytes`; aborted once the box is gone, so a workload that never
    /// read leaves nothing behind.
    pub(super) feeder: Option<tokio::task::JoinHandle<()>>,
    /// Where the terminal's master comes back, with `spec.tty`.
    pub(super) tty: Option<OwnedFd>,
    /// The connector's line, with `spec.connector`.
    pub(super) connect: Option<OwnedFd>,
}

impl BoxEnds {
    /// Borrowed for `launch::Kern::run` (once more, for a retry in a fresh kern): ours stay open
    /// until this is dropped after the box, so a driver's reader sees EOF only then.
    pub(super) fn lent(&self) -> BoxFds<&OwnedFd> {
        BoxFds {
            channel: self.fds.channel.as_ref(),
            egress: self.line.as_ref().map(Line::fd),
            stdin: self.fds.stdin.as_ref(),
            tty: self.fds.tty.as_ref(),
            connect: self.fds.connect.as_ref(),
        }
    }

    /// Given up for `launch::Kern::run_steered`, which closes them once sent: the box then holds
    /// the only copies. The egress end sent is a copy of the line's; the line comes back, to be
    /// kept until the box has ended.
    pub(super) fn hand_over(self) -> Result<(BoxFds, Option<Line>)> {
        let egress = self
            .line
            .as_ref()
            .map(|l| l.fd().try_clone())
            .transpose()
            .map_err(|e| Error::Runtime(format!("the box's egress line: {e}")))?;
        Ok((BoxFds { egress, ..self.fds }, self.line))
    }
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
    if let Some(account) = &place.user {
        // As the Sandbox's `user` is, at open(): an account of the image, ids 0 to 65535.
        spec.user = crate::image::resolve_user(&opened.image.root, account)?;
    }
    // What the kernel would refuse with E2BIG is the caller's mistake, said before a box.
    crate::config::check_exec_size(&spec.argv, &spec.env)?;
    Ok(Prepared {
        spec,
        workspace,
        timeout_ms,
        place,
        first: (l.lang == Some(Language::Python) && l.channel).then(|| opened.python_start()),
        cell: l.cell,
        lang: l.lang,
        stdin: None,
        abort: None,
    })
}

impl Prepared {
    /// The workspace before the box, when the session tracks files or caps the workspace: the
    /// snapshot to compare with after (with `trackFiles`), or the fault of a workspace already
    /// over `workspaceMaxBytes` (no box then). A watched workspace's box is `setid_watched`:
    /// the watch clears the set-id bits of what it changes (`result::workspace_changes`).
    pub(super) async fn before(
        &mut self,
        opened: &Opened,
    ) -> std::result::Result<Option<track::Before>, Fault> {
        let cfg = &opened.config;
        let caps: Vec<_> = cfg
            .volumes
            .iter()
            .filter_map(crate::volume::Use::cap)
            .collect();
        if let Some(fault) = super::result::volumes_full(&caps).await {
            return Err(fault);
        }
        let quota = cfg.workspace_max_bytes;
        if !cfg.track_files && quota.is_none() {
            return Ok(None);
        }
        // A watched workspace: a mark, no walk (the tracker exists only without a quota).
        if let Some(t) = opened.tracker.get().cloned() {
            if let Ok(Some(mark)) = tokio::task::spawn_blocking(move || t.begin()).await {
                self.spec.setid_watched = true;
                return Ok(Some(track::Before::Watched(mark)));
            }
        }
        let ws = self.workspace.clone();
        let before = tokio::task::spawn_blocking(move || track::snapshot(&ws, quota))
            .await
            .unwrap_or_else(|e| track::Snapshot::unmeasured(e.to_string()));
        if let Some(fault) = quota.and_then(|cap| over_quota(&before, cap)) {
            return Err(fault);
        }
        Ok(cfg.track_files.then_some(track::Before::Walked(before)))
    }

    /// Gives the box a stdin from `from` (none: /dev/null), as its spec announces.
    pub(super) fn set_stdin(&mut self, from: Option<Stdin>) {
        self.spec.stdin = from.is_some();
        self.stdin = from;
    }

    /// An error once the call's abort signal has fired: checked before its box, and after it
    /// (then the call's result is moot).
    pub(super) fn check_abort(&self) -> Result<()> {
        if percall::aborted(self.abort.as_ref()) {
            return Err(Error::Invalid(percall::ABORTED.into()));
        }
        Ok(())
    }

    /// The box's descriptors, made from what its spec announces (a driver's channel, stdin, a
    /// terminal, the connector), and its egress line when the session's boxes go through the
    /// proxy. A `Stdin::Bytes` is fed from now on: what the pipe holds waits for the box.
    pub(super) fn ends(&mut self, opened: &Opened) -> Result<(BoxEnds, OurEnds)> {
        let line = opened.egress_line(&self.spec)?;
        ends_for(&self.spec, self.first.as_deref(), self.stdin.take(), line)
    }
}

/// The descriptors `spec` announces, beside the egress line (`Prepared::ends`).
fn ends_for(
    spec: &BoxSpec,
    first: Option<&Vec<u8>>,
    stdin: Option<Stdin>,
    line: Option<Line>,
) -> Result<(BoxEnds, OurEnds)> {
    let mut ours = OurEnds::default();
    let mut fds = BoxFds::default();
    if spec.channel {
        let (driver, theirs) = network::box_socketpair("driver", first.map(|v| &v[..]))?;
        ours.driver = Some(driver);
        fds.channel = Some(theirs);
    }
    match stdin {
        Some(Stdin::Bytes(data)) => {
            let (read, feeder) = percall::stdin_pipe(data)?;
            fds.stdin = Some(read);
            ours.feeder = Some(feeder);
        }
        Some(Stdin::Pipe) => {
            let (read, write) = stdin_pipe()?;
            fds.stdin = Some(read);
            ours.stdin = Some(write);
        }
        None => {}
    }
    let io = |what: &str, e: std::io::Error| Error::Runtime(format!("{what}: {e}"));
    if spec.tty.is_some() {
        let (a, b) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| io("a socket for the terminal", e))?;
        ours.tty = Some(OwnedFd::from(a));
        fds.tty = Some(OwnedFd::from(b));
    }
    if spec.connector {
        let (a, b) = connector::pair().map_err(|e| io("a socket for connect()", e))?;
        ours.connect = Some(a);
        fds.connect = Some(b);
    }
    Ok((BoxEnds { fds, line }, ours))
}

/// A pipe for a steered process's stdin: the box's read end and our writer.
fn stdin_pipe() -> Result<(OwnedFd, tokio::net::unix::pipe::Sender)> {
    let io = |what: &str, e: std::io::Error| Error::Runtime(format!("{what}: {e}"));
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| io("a pipe for the process's stdin", e.into()))?;
    let write = tokio::net::unix::pipe::Sender::from_owned_fd(write)
        .map_err(|e| io("the process's stdin", e))?;
    Ok((read, write))
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

    fn spec(channel: bool, stdin: bool, tty: bool, connector: bool) -> BoxSpec {
        use crate::engine::shared::spec::TtySize;
        BoxSpec {
            channel,
            stdin,
            tty: tty.then_some(TtySize { cols: 80, rows: 24 }),
            connector,
            ..BoxSpec::for_tests()
        }
    }

    #[tokio::test]
    async fn the_ends_made_are_the_ones_the_spec_announces_and_handed_over_whole() {
        let cases = [
            (
                spec(true, true, false, false),
                Some(Stdin::Bytes(b"x".to_vec())),
            ),
            (spec(false, true, false, true), Some(Stdin::Pipe)),
            (spec(false, false, true, false), None),
            (spec(false, false, false, false), None),
        ];
        for (spec, stdin) in cases {
            let bytes = matches!(stdin, Some(Stdin::Bytes(_)));
            let (theirs, ours) = ends_for(&spec, None, stdin, None).expect("ends");
            assert_eq!(ours.driver.is_some(), spec.channel);
            assert_eq!(ours.feeder.is_some(), bytes);
            assert_eq!(ours.stdin.is_some(), spec.stdin && !bytes);
            assert_eq!(ours.tty.is_some(), spec.tty.is_some());
            assert_eq!(ours.connect.is_some(), spec.connector);
            let lent = theirs.lent().raw();
            let (fds, line) = theirs.hand_over().expect("hand over");
            assert!(fds.match_spec(&spec), "{spec:?}");
            assert!(line.is_none());
            // The very descriptors lent, not copies: once sent and closed, the box holds the
            // only ones.
            assert_eq!(fds.raw(), lent);
        }
    }

    #[tokio::test]
    async fn stdin_bytes_reach_the_box_then_eof_and_a_pipe_carries_what_is_written() {
        use std::io::Read;
        use tokio::io::AsyncWriteExt;
        let s = spec(false, true, false, false);
        let (theirs, ours) =
            ends_for(&s, None, Some(Stdin::Bytes(b"fed".to_vec())), None).expect("ends");
        let (fds, _) = theirs.hand_over().expect("hand over");
        let mut read = std::fs::File::from(fds.stdin.expect("stdin"));
        let got = tokio::task::spawn_blocking(move || {
            let mut v = Vec::new();
            read.read_to_end(&mut v).map(|_| v)
        });
        assert_eq!(got.await.expect("join").expect("read"), b"fed");
        ours.feeder.expect("feeder").await.expect("fed");

        let (theirs, ours) = ends_for(&s, None, Some(Stdin::Pipe), None).expect("ends");
        let (fds, _) = theirs.hand_over().expect("hand over");
        let mut read = std::fs::File::from(fds.stdin.expect("stdin"));
        let mut write = ours.stdin.expect("writer");
        write.write_all(b"typed").await.expect("write");
        drop(write);
        let got = tokio::task::spawn_blocking(move || {
            let mut v = Vec::new();
            read.read_to_end(&mut v).map(|_| v)
        });
        assert_eq!(got.await.expect("join").expect("read"), b"typed");
    }
}
