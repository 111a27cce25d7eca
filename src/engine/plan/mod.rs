//! A box's posture, written once, as data (bubblewrap's setup ops): each step one syscall (or
//! one file write), with its arguments, what it does, and which errors it may meet. This module
//! is the one place the posture is written; two runners carry the plans out, unchanged:
//! - `run` (Rust), in a fresh box's PID 1 (`mounts::build`, `init::setup`) and workload
//!   (`init::exec_workload`), and in a resident box's call;
//! - `lang/zygote.py` (python, `ctypes`), in a zygote's fork, which gets the plans as JSON.
//!
//! `workload`: the posture of the process that runs the untrusted code (session, keyring,
//! rlimits, capabilities, user, no_new_privs, Landlock, seccomp), from a `BoxSpec` or from a
//! zygote's `Inputs`. `pid1`: what every box's PID 1 mounts and sets of its own (`/proc` and
//! its masks, scratch mounts, devpts, hostname, loopback). `zygote`: a zygote fork's steps (its
//! namespaces, then `pid1`'s). `__tests__/zygote.test.js` compares the postures the
//! two kinds of box end up with.

pub mod pid1;
pub mod run;
pub mod workload;
pub mod zygote;

pub use workload::{Posture, Workload};
pub use zygote::{plans, Inputs, Plans};

use base64::Engine as _;
use serde::Serialize;

/// One step.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// `syscall(nr, args...)`; failure is a return below 0 whose errno is not in `tolerate`.
    /// `save`: the return value (an fd) is kept under this name for later `Arg::Var`s.
    Sys {
        what: String,
        nr: i64,
        args: Vec<Arg>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tolerate: Vec<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        save: Option<String>,
    },
    /// Writes `data` to `path` (open O_WRONLY, one write, close).
    Write {
        what: String,
        path: String,
        data: String,
    },
}

impl Op {
    /// The syscall number, for a `Sys` step.
    pub fn nr(&self) -> Option<i64> {
        match self {
            Op::Sys { nr, .. } => Some(*nr),
            Op::Write { .. } => None,
        }
    }

    /// What the step does, as a failure names it.
    pub fn what(&self) -> &str {
        match self {
            Op::Sys { what, .. } | Op::Write { what, .. } => what,
        }
    }
}

/// A syscall argument.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Arg {
    Int(i64),
    /// A NUL-terminated string.
    Str(String),
    /// A buffer (a struct passed by pointer); base64 in JSON.
    Bytes(#[serde(serialize_with = "base64_bytes")] Vec<u8>),
    /// A seccomp program (packed `sock_filter`s, native-endian, 8 bytes each; base64 in JSON):
    /// passed as a `struct sock_fprog`.
    Fprog(#[serde(serialize_with = "base64_bytes")] Vec<u8>),
    /// NULL.
    Null,
    /// An fd an earlier step saved; a step whose fd was not made (its step failed with an
    /// error it tolerates) is skipped.
    Var(String),
    /// A `struct landlock_path_beneath_attr` (packed: `allowed_access` u64, then `parent_fd`
    /// i32) whose directory is the fd an earlier step saved as `fd` (skipped as `Var` is).
    Beneath {
        allowed: u64,
        fd: String,
    },
}

fn base64_bytes<S: serde::Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
}

pub(crate) fn sys(what: impl Into<String>, nr: libc::c_long, args: Vec<Arg>) -> Op {
    Op::Sys {
        what: what.into(),
        nr,
        args,
        tolerate: Vec::new(),
        save: None,
    }
}

pub(crate) fn tolerating(op: Op, errnos: &[i32]) -> Op {
    match op {
        Op::Sys {
            what,
            nr,
            args,
            save,
            ..
        } => Op::Sys {
            what,
            nr,
            args,
            tolerate: errnos.to_vec(),
            save,
        },
        w => w,
    }
}

pub(crate) fn saving(op: Op, name: &str) -> Op {
    match op {
        Op::Sys {
            what,
            nr,
            args,
            tolerate,
            ..
        } => Op::Sys {
            what,
            nr,
            args,
            tolerate,
            save: Some(name.into()),
        },
        w => w,
    }
}

pub(crate) fn int(v: impl Into<i64>) -> Arg {
    Arg::Int(v.into())
}

pub(crate) fn s(v: &str) -> Arg {
    Arg::Str(v.into())
}

pub(crate) fn bytes(b: &[u8]) -> Arg {
    Arg::Bytes(b.to_vec())
}

/// A seccomp program as `Arg::Fprog`, from its packed `u64` form (`seccomp::unpack`'s input).
pub(crate) fn fprog(program: &[u64]) -> Arg {
    // Straight into one buffer: a fresh box packs the untrusted profile on its way to exec, and
    // a `Vec` per instruction cost the dev build about 2 ms there (measured against 9ae41f8).
    let mut packed = Vec::with_capacity(program.len() * 8);
    for f in crate::engine::boxside::seccomp::unpack(program) {
        packed.extend_from_slice(&f.code.to_ne_bytes());
        packed.extend_from_slice(&[f.jt, f.jf]);
        packed.extend_from_slice(&f.k.to_ne_bytes());
    }
    Arg::Fprog(packed)
}

pub(crate) fn write(what: &str, path: &str, data: &str) -> Op {
    Op::Write {
        what: what.into(),
        path: path.into(),
        data: data.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON `lang/zygote.py`'s `run` reads: a step's shape and each kind of argument.
    #[test]
    fn steps_serialise_as_the_python_runner_reads_them() {
        let args = vec![
            int(-1),
            s("lo"),
            Arg::Bytes(vec![1, 2, 3]),
            Arg::Fprog(vec![0; 8]),
            Arg::Null,
            Arg::Var("fd".into()),
            Arg::Beneath {
                allowed: 1 << 13,
                fd: "root".into(),
            },
        ];
        let step = saving(tolerating(sys("a step", 7, args), &[38]), "out");
        assert_eq!(
            serde_json::to_value(&step).expect("json"),
            json!({
                "op": "sys", "what": "a step", "nr": 7,
                "args": [{"int": -1}, {"str": "lo"}, {"bytes": "AQID"},
                         {"fprog": "AAAAAAAAAAA="}, "null", {"var": "fd"},
                         {"beneath": {"allowed": 8192, "fd": "root"}}],
                "tolerate": [38], "save": "out"
            })
        );
        assert_eq!(
            serde_json::to_value(sys("bare", 1, vec![])).expect("json"),
            json!({"op": "sys", "what": "bare", "nr": 1, "args": []})
        );
        assert_eq!(
            serde_json::to_value(write("w", "/p", "d")).expect("json"),
            json!({"op": "write", "what": "w", "path": "/p", "data": "d"})
        );
    }
}
