//! Carries out a plan's steps in this process, in order, stopping at the first that fails: the
//! Rust twin of `lang/zygote.py`'s `run`, with the same semantics (a `Sys` step fails on a
//! return below 0 whose errno it does not tolerate; `save` keeps its return value for later
//! `Arg::Var`s; a step naming a value no earlier step saved is skipped; a `Write` is one open,
//! one write, one close). Meant for the single-threaded child side of a clone: raw syscalls act
//! on the calling thread only.

use super::{Arg, Op};
use std::ffi::CString;
use std::io::Write as _;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A step that failed: what it does, and why (the errno's name first, as `nix` says it:
/// `sethostname: EPERM: Operation not permitted`, which `container::explain` and users read).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {}", errno_text(.error))]
pub struct Failed {
    pub what: String,
    #[source]
    pub error: std::io::Error,
}

fn errno_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => nix::errno::Errno::from_raw(n).to_string(),
        None => e.to_string(),
    }
}

/// The values steps saved (fds), by name.
#[derive(Debug, Default)]
pub struct Saved(Vec<(String, i64)>);

impl Saved {
    fn get(&self, name: &str) -> Option<i64> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// Takes the fd saved as `name`, which no later step of the plan may use or close (as the
    /// untrusted profile's listener: the plan only makes it).
    pub fn take_fd(&mut self, name: &str) -> Option<OwnedFd> {
        let at = self.0.iter().rposition(|(n, _)| n == name)?;
        let (_, v) = self.0.remove(at);
        let fd = RawFd::try_from(v).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: a saved value is the return of a successful syscall that made an fd (the
        // plans save only those), and it is removed here, so this is its only owner.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// Runs `ops` in order, adding what they save to `saved`.
pub fn run(ops: &[Op], saved: &mut Saved) -> Result<(), Failed> {
    for op in ops {
        match op {
            Op::Write { what, path, data } => std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|mut f| f.write_all(data.as_bytes()))
                .map_err(|error| Failed {
                    what: what.clone(),
                    error,
                })?,
            Op::Sys {
                what,
                nr,
                args,
                tolerate,
                save,
            } => {
                let fail = |error| Failed {
                    what: what.clone(),
                    error,
                };
                let Some(held) = Held::of(args, saved).map_err(fail)? else {
                    // An fd a tolerated step did not make (no Landlock in this kernel): nothing
                    // to act on.
                    continue;
                };
                match held.call(*nr) {
                    Ok(ret) => {
                        if let Some(name) = save {
                            saved.0.push((name.clone(), ret));
                        }
                    }
                    Err(e) if e.raw_os_error().is_some_and(|n| tolerate.contains(&n)) => {}
                    Err(e) => return Err(fail(e)),
                }
            }
        }
    }
    Ok(())
}

/// One argument made ready: the memory a pointer argument points at lives here until the call.
enum Ready {
    Value(libc::c_long),
    Str(CString),
    Bytes(Vec<u8>),
    /// The program, and the `sock_fprog` that points into it (so the program is kept, unread).
    Prog {
        _program: Vec<libc::sock_filter>,
        fprog: Box<libc::sock_fprog>,
    },
}

/// A step's arguments, ready to pass.
struct Held(Vec<Ready>);

impl Held {
    /// None when an argument names a value no earlier step saved.
    fn of(args: &[Arg], saved: &Saved) -> std::io::Result<Option<Held>> {
        let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        if args.len() > 6 {
            return Err(invalid("more than six syscall arguments"));
        }
        let mut ready = Vec::with_capacity(args.len());
        for a in args {
            ready.push(match a {
                Arg::Int(v) => Ready::Value(*v as libc::c_long),
                Arg::Null => Ready::Value(0),
                Arg::Var(name) => match saved.get(name) {
                    Some(v) => Ready::Value(v as libc::c_long),
                    None => return Ok(None),
                },
                Arg::Beneath { allowed, fd } => match saved.get(fd) {
                    Some(v) => {
                        let fd = i32::try_from(v).map_err(|_| invalid("an fd out of range"))?;
                        let mut attr = allowed.to_ne_bytes().to_vec();
                        attr.extend_from_slice(&fd.to_ne_bytes());
                        Ready::Bytes(attr)
                    }
                    None => return Ok(None),
                },
                Arg::Str(s) => Ready::Str(
                    CString::new(s.as_str()).map_err(|_| invalid("a string with a NUL byte"))?,
                ),
                Arg::Bytes(b) => Ready::Bytes(b.clone()),
                Arg::Fprog(b) => {
                    if b.len() % 8 != 0 {
                        return Err(invalid("a seccomp program of partial instructions"));
                    }
                    let filters: Vec<libc::sock_filter> = b
                        .chunks_exact(8)
                        .map(|c| libc::sock_filter {
                            code: u16::from_ne_bytes([c[0], c[1]]),
                            jt: c[2],
                            jf: c[3],
                            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
                        })
                        .collect();
                    let len = u16::try_from(filters.len())
                        .map_err(|_| invalid("a seccomp program too long"))?;
                    let mut filters = filters;
                    let prog = Box::new(libc::sock_fprog {
                        len,
                        filter: filters.as_mut_ptr(),
                    });
                    Ready::Prog {
                        _program: filters,
                        fprog: prog,
                    }
                }
            });
        }
        Ok(Some(Held(ready)))
    }

    fn call(mut self, nr: i64) -> std::io::Result<i64> {
        let mut a: [libc::c_long; 6] = [0; 6];
        for (slot, r) in a.iter_mut().zip(self.0.iter_mut()) {
            *slot = match r {
                Ready::Value(v) => *v,
                Ready::Str(s) => s.as_ptr() as libc::c_long,
                Ready::Bytes(b) => b.as_mut_ptr() as libc::c_long,
                Ready::Prog { fprog, .. } => &mut **fprog as *mut libc::sock_fprog as libc::c_long,
            };
        }
        // SAFETY: every pointer argument points into `self` (a NUL-terminated string, a buffer
        // of the length the plan gave, or a sock_fprog over a program held beside it), which
        // lives until the call returns; the plans pass each buffer where the syscall expects a
        // struct of that size. Unused argument registers are zero, which the kernel ignores.
        let ret = unsafe { libc::syscall(nr as libc::c_long, a[0], a[1], a[2], a[3], a[4], a[5]) };
        if ret < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ret as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{int, s, saving, sys, tolerating, write};
    use super::*;

    #[test]
    fn runs_steps_in_order_and_names_the_one_that_failed() {
        let ops = vec![
            sys("getpid", libc::SYS_getpid, vec![]),
            sys(
                "close an fd that is not open",
                libc::SYS_close,
                vec![int(-1)],
            ),
            sys("never reached", libc::SYS_getpid, vec![]),
        ];
        let e = run(&ops, &mut Saved::default()).expect_err("close(-1) fails");
        assert_eq!(e.what, "close an fd that is not open");
        assert_eq!(e.error.raw_os_error(), Some(libc::EBADF));
        assert_eq!(
            e.to_string(),
            "close an fd that is not open: EBADF: Bad file number"
        );
    }

    #[test]
    fn a_tolerated_errno_goes_on_and_a_step_on_an_unmade_fd_is_skipped() {
        let ops = vec![
            tolerating(
                saving(
                    sys(
                        "open a path that does not exist",
                        libc::SYS_openat,
                        vec![
                            int(libc::AT_FDCWD),
                            s("/nonexistent/kern-plan-test"),
                            int(libc::O_RDONLY | libc::O_CLOEXEC),
                        ],
                    ),
                    "f",
                ),
                &[libc::ENOENT],
            ),
            // Would fail (EBADF on a made-up fd) were it not skipped.
            sys("close it", libc::SYS_close, vec![Arg::Var("f".into())]),
        ];
        let mut saved = Saved::default();
        run(&ops, &mut saved).expect("tolerated, then skipped");
        assert!(saved.take_fd("f").is_none());
    }

    #[test]
    fn saves_an_fd_passes_strings_and_buffers_and_writes_files() {
        let dir = std::env::temp_dir().join(format!("kern-plan-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("f");
        std::fs::write(&file, "").expect("create");
        let path = file.to_string_lossy().into_owned();
        let ops = vec![
            write("write the file", &path, "ab"),
            saving(
                sys(
                    "open it",
                    libc::SYS_openat,
                    vec![
                        int(libc::AT_FDCWD),
                        s(&path),
                        int(libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC),
                    ],
                ),
                "f",
            ),
            sys(
                "append through the saved fd",
                libc::SYS_write,
                vec![Arg::Var("f".into()), Arg::Bytes(b"cd".to_vec()), int(2)],
            ),
        ];
        let mut saved = Saved::default();
        run(&ops, &mut saved).expect("runs");
        assert!(saved.take_fd("f").is_some());
        assert!(saved.take_fd("f").is_none(), "taken once");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "abcd");
        let missing = write("write a missing file", &format!("{path}.none"), "x");
        let e = run(&[missing], &mut saved).expect_err("no such file");
        assert_eq!(e.error.raw_os_error(), Some(libc::ENOENT));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn installs_a_seccomp_program() {
        // A filter that returns EPERM for getppid and allows the rest.
        let program: Vec<u64> = {
            let ins = |code: u16, jt: u8, jf: u8, k: u32| {
                (u64::from(code) << 48) | (u64::from(jt) << 40) | (u64::from(jf) << 32) | k as u64
            };
            vec![
                ins((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0, 0, 0),
                ins(
                    (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                    0,
                    1,
                    libc::SYS_getppid as u32,
                ),
                ins(
                    (libc::BPF_RET | libc::BPF_K) as u16,
                    0,
                    0,
                    libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
                ),
                ins(
                    (libc::BPF_RET | libc::BPF_K) as u16,
                    0,
                    0,
                    libc::SECCOMP_RET_ALLOW,
                ),
            ]
        };
        let ops = vec![
            sys(
                "no_new_privs",
                libc::SYS_prctl,
                vec![
                    int(libc::PR_SET_NO_NEW_PRIVS),
                    int(1),
                    int(0),
                    int(0),
                    int(0),
                ],
            ),
            sys(
                "the filter",
                libc::SYS_seccomp,
                vec![
                    int(libc::SECCOMP_SET_MODE_FILTER),
                    int(0),
                    super::super::fprog(&program),
                ],
            ),
        ];
        // A filter without TSYNC, and no_new_privs, bind only the thread that sets them: a
        // thread of its own, so the rest of the test process stays unfiltered.
        let refused = std::thread::spawn(move || {
            let before = nix::unistd::getppid().as_raw();
            run(&ops, &mut Saved::default()).expect("filter installed");
            // glibc's getppid is the bare syscall: -1 is the filter's EPERM.
            (before, nix::unistd::getppid().as_raw())
        })
        .join()
        .expect("thread");
        assert!(refused.0 > 0, "getppid works before the filter");
        assert_eq!(refused.1, -1, "getppid refused after it");
    }
}
