//! What a box's PID 1 (and its workload, before exec) tells the monitor on the init pipe, and
//! what a zygote call's processes tell kern on their socket (`engine::monitor::zygote`): one short text
//! line each, a tag letter and space-separated fields, short enough to be one atomic write.
//! Written in Rust by `init` and in Python by the zygote (`_kern_pid1_msg` in `lang/zygote.py`,
//! tested against `Pid1Msg::encode` below); read by the monitor (`faults::conclude` and friends).

use super::ProtocolError;

/// The longest line, `\n` aside: a pipe write up to `PIPE_BUF` is atomic, and a zygote call's
/// socket reads 4 KiB messages. Longer text is cut on a character boundary.
pub const MAX_LINE: usize = 3800;

/// One message to the monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pid1Msg {
    /// `S <reason>`: setup failed before the workload existed.
    SetupFailed(String),
    /// `E <errno> <program>`: the workload could not be exec'd.
    ExecFailed { errno: i32, program: String },
    /// `C <reason>`: a call's `cwd` is missing in the box, or leads out of the workspace.
    CwdRefused(String),
    /// `K <signal>`: the workload was ended by a signal, just before its `Exited`.
    Signaled(i32),
    /// `X <code-or-128+signal> <used bytes>...`: the workload ended; how full each scratch tmpfs
    /// was, in the spec's order (`BoxSpec::tmpfs`), so an OOM can name the scratch that held it.
    Exited { code: i32, tmpfs_used: Vec<u64> },
    /// `B <syscall>`: the seccomp supervisor refused an escape syscall (once per name).
    Blocked(String),
    /// `R`: a resident box's PID 1 finished its setup and idles as the reaper.
    Ready,
    /// `P <host pid>`: a call into a resident box forked its workload (its process group, the
    /// per-call kill where there is no cgroup).
    Pid(i32),
    /// `W <pid in the box>`: the workload is set up and about to exec (`Said::Started`).
    Workload(i32),
    /// `Z <wait status>`: a zygote call's fork C says how the call's PID 1 ended.
    Reaped(i32),
    /// `w`: a zygote call's workload is in its posture, waiting for the call.
    Waiting,
}

impl Pid1Msg {
    /// The message's line, `\n` included.
    pub fn encode(&self) -> String {
        let (tag, fields): (char, Vec<String>) = match self {
            Pid1Msg::SetupFailed(why) => ('S', vec![why.clone()]),
            Pid1Msg::ExecFailed { errno, program } => {
                ('E', vec![errno.to_string(), program.clone()])
            }
            Pid1Msg::CwdRefused(why) => ('C', vec![why.clone()]),
            Pid1Msg::Signaled(sig) => ('K', vec![sig.to_string()]),
            Pid1Msg::Exited { code, tmpfs_used } => (
                'X',
                std::iter::once(code.to_string())
                    .chain(tmpfs_used.iter().map(u64::to_string))
                    .collect(),
            ),
            Pid1Msg::Blocked(name) => ('B', vec![name.clone()]),
            Pid1Msg::Ready => ('R', vec![]),
            Pid1Msg::Pid(pid) => ('P', vec![pid.to_string()]),
            Pid1Msg::Workload(pid) => ('W', vec![pid.to_string()]),
            Pid1Msg::Reaped(status) => ('Z', vec![status.to_string()]),
            Pid1Msg::Waiting => ('w', vec![]),
        };
        let mut line = std::iter::once(tag.to_string())
            .chain(fields)
            .collect::<Vec<_>>()
            .join(" ")
            .replace('\n', " ");
        let mut end = line.len().min(MAX_LINE);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('\n');
        line
    }

    /// One line, without its `\n`.
    pub fn decode(line: &str) -> Result<Pid1Msg, ProtocolError> {
        let bad = |why: &str| {
            ProtocolError::garbled("a message from the box's init", line.as_bytes(), why)
        };
        let mut chars = line.chars();
        let tag = chars.next().ok_or_else(|| bad("empty"))?;
        let rest = chars.as_str();
        let fields = match rest.strip_prefix(' ') {
            Some(f) => Some(f),
            None if rest.is_empty() => None,
            None => return Err(bad("no space after the tag")),
        };
        let text = || fields.map(str::to_string).ok_or_else(|| bad("no text"));
        let number = |f: Option<&str>| -> Result<i32, ProtocolError> {
            f.and_then(|n| n.parse().ok())
                .ok_or_else(|| bad("not a number where one belongs"))
        };
        let none = |m: Pid1Msg| {
            fields
                .is_none()
                .then_some(m)
                .ok_or_else(|| bad("fields after a bare tag"))
        };
        Ok(match tag {
            'S' => Pid1Msg::SetupFailed(text()?),
            'C' => Pid1Msg::CwdRefused(text()?),
            'B' => Pid1Msg::Blocked(text()?),
            'E' => {
                let f = fields.ok_or_else(|| bad("no errno"))?;
                let (errno, program) = f.split_once(' ').unwrap_or((f, ""));
                Pid1Msg::ExecFailed {
                    errno: number(Some(errno))?,
                    program: program.to_string(),
                }
            }
            'K' => Pid1Msg::Signaled(number(fields)?),
            // A host pid the monitor may kill with its process group: never 0, 1 or below,
            // which `kill` reads as "my group" or "everyone I may signal".
            'P' => match number(fields)? {
                pid if pid > 1 => Pid1Msg::Pid(pid),
                _ => return Err(bad("a pid that is not a single process")),
            },
            'W' => Pid1Msg::Workload(number(fields)?),
            'Z' => Pid1Msg::Reaped(number(fields)?),
            'X' => {
                let mut parts = fields.unwrap_or_default().split(' ');
                let code = number(parts.next())?;
                let tmpfs_used = parts
                    .map(|u| {
                        u.parse()
                            .map_err(|_| bad("a tmpfs use that is not a number"))
                    })
                    .collect::<Result<_, _>>()?;
                Pid1Msg::Exited { code, tmpfs_used }
            }
            'R' => none(Pid1Msg::Ready)?,
            'w' => none(Pid1Msg::Waiting)?,
            _ => return Err(bad("an unknown tag")),
        })
    }

    /// Every message in what the init pipe held, in order (blank lines are none).
    pub fn decode_all(messages: &[u8]) -> Vec<Result<Pid1Msg, ProtocolError>> {
        String::from_utf8_lossy(messages)
            .lines()
            .filter(|l| !l.is_empty())
            .map(Pid1Msg::decode)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_that_kill_would_widen_is_refused() {
        for line in ["P 0", "P 1", "P -1", "P -4242"] {
            assert!(Pid1Msg::decode(line).is_err(), "{line} decoded");
        }
        assert_eq!(Pid1Msg::decode("P 4242").ok(), Some(Pid1Msg::Pid(4242)));
    }

    /// Every variant, and the arguments zygote.py's encoder takes for it (a Python tuple).
    fn every_variant() -> Vec<(Pid1Msg, &'static str)> {
        vec![
            (
                Pid1Msg::SetupFailed("mount /proc: Operation not permitted, é".into()),
                r#"("S", "mount /proc: Operation not permitted, \u00e9")"#,
            ),
            (Pid1Msg::SetupFailed(String::new()), r#"("S", "")"#),
            (
                Pid1Msg::ExecFailed {
                    errno: 2,
                    program: "my prog".into(),
                },
                r#"("E", 2, "my prog")"#,
            ),
            (
                Pid1Msg::CwdRefused(" sub dir".into()),
                r#"("C", " sub dir")"#,
            ),
            (Pid1Msg::Signaled(9), r#"("K", 9)"#),
            (
                Pid1Msg::Exited {
                    code: 137,
                    tmpfs_used: vec![1 << 20, 0],
                },
                r#"("X", 137, 1048576, 0)"#,
            ),
            (
                Pid1Msg::Exited {
                    code: -1,
                    tmpfs_used: vec![],
                },
                r#"("X", -1)"#,
            ),
            (Pid1Msg::Blocked("ptrace".into()), r#"("B", "ptrace")"#),
            (Pid1Msg::Ready, r#"("R",)"#),
            (Pid1Msg::Pid(4242), r#"("P", 4242)"#),
            (Pid1Msg::Workload(7), r#"("W", 7)"#),
            (Pid1Msg::Reaped(256), r#"("Z", 256)"#),
            (Pid1Msg::Waiting, r#"("w",)"#),
        ]
    }

    #[test]
    fn every_variant_round_trips() {
        for (m, _) in every_variant() {
            let line = m.encode();
            let body = line.strip_suffix('\n').unwrap();
            assert!(!body.contains('\n'));
            assert_eq!(Pid1Msg::decode(body).unwrap(), m, "{line:?}");
        }
    }

    #[test]
    fn text_is_kept_to_one_line_cut_on_a_character() {
        let m = Pid1Msg::SetupFailed(format!("a\nb{}", "é".repeat(MAX_LINE)));
        let line = m.encode();
        assert!(line.len() <= MAX_LINE + 1);
        let Pid1Msg::SetupFailed(text) = Pid1Msg::decode(line.trim_end_matches('\n')).unwrap()
        else {
            panic!("{line:?}");
        };
        assert!(text.starts_with("a bé"));
    }

    #[test]
    fn a_line_that_is_no_message_is_an_error() {
        for line in [
            "",
            "Q 1",
            "Sfoo",
            "R 1",
            "w x",
            "K",
            "K nine",
            "X",
            "X 0 12 /tmp",
            "E",
            "E x prog",
            "W 7 8",
        ] {
            assert!(Pid1Msg::decode(line).is_err(), "{line:?}");
        }
        let all = Pid1Msg::decode_all(b"B ptrace\n\nW 7\nnonsense\nX 0\n");
        assert_eq!(all.len(), 4);
        assert_eq!(all[1], Ok(Pid1Msg::Workload(7)));
        assert!(all[2].is_err());
    }

    /// zygote.py's `_kern_pid1_msg`, taken out of the file (the file itself refuses to run
    /// outside a zygote), writes every variant byte for byte as `encode` does.
    #[test]
    fn the_zygotes_python_encoder_agrees_with_this_one() {
        let cases = every_variant();
        let long = "é".repeat(MAX_LINE);
        let script = format!(
            "import ast, sys\n\
             tree = ast.parse(sys.stdin.read())\n\
             fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == '_kern_pid1_msg']\n\
             assert len(fn) == 1, 'zygote.py has no _kern_pid1_msg'\n\
             exec(compile(ast.Module(body=fn, type_ignores=[]), 'zygote.py', 'exec'))\n\
             for args in [{}, ('S', 'a\\nb' + '\\u00e9' * {MAX_LINE})]:\n    \
                 sys.stdout.buffer.write(_kern_pid1_msg(*args))\n",
            cases.iter().map(|(_, a)| *a).collect::<Vec<_>>().join(", ")
        );
        let out = String::from_utf8(super::super::on_zygote_py(&script)).expect("UTF-8");
        let mut lines = out.split_inclusive('\n');
        for (m, args) in cases {
            let line = lines.next().unwrap_or_default();
            assert_eq!(line, m.encode(), "{args}");
            assert_eq!(
                Pid1Msg::decode(line.trim_end_matches('\n')),
                Ok(m),
                "{args}"
            );
        }
        let cut = Pid1Msg::SetupFailed(format!("a\nb{long}")).encode();
        assert_eq!(lines.next(), Some(cut.as_str()));
        assert_eq!(lines.next(), None);
    }
}
