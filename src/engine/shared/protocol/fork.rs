//! A fork server's call socket: between kern (`monitor::zygote::call`) and the three processes
//! a template forks for one call (C, its fork; P, PID 1 of the call; W, the workload), which
//! become the call's box by `plan::Plans`. The zygote (`lang/zygote.py`) is today's template;
//! its side names these messages `_KERN_FORK_*`, tested against this file. SOCK_SEQPACKET, so
//! each message is one datagram:
//! - from the fork: [`FromFork`], C's `Forked` first and P's `Pid1` (each with its pid on
//!   `SCM_CREDENTIALS`), then the box's [`Pid1Msg`] lines (W waiting, a failed step, W's end,
//!   C's `Reaped`);
//! - to the fork: [`ToFork`], the plans (with the box's stdout and stderr on `SCM_RIGHTS`),
//!   then `Go` (with the call's channel).

use super::pid1::Pid1Msg;
use super::ProtocolError;
use crate::engine::plan::Plans;

const FORKED: &[u8] = b"c";
const PID1: &[u8] = b"p";
const GO: &[u8] = b"go";

/// One message from a call's fork.
#[derive(Debug, Clone, PartialEq)]
pub enum FromFork {
    /// C, the template's fork, first: kern moves it into the call's cgroup, then sends plans.
    Forked,
    /// P, once it is PID 1 of the call: kern opens a pidfd on it.
    Pid1,
    /// A line of the call's box, as a fresh box's PID 1 writes it.
    Said(Pid1Msg),
}

impl FromFork {
    /// The bytes of one message (the fork side's encoder, for tests and a Rust template).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            FromFork::Forked => FORKED.to_vec(),
            FromFork::Pid1 => PID1.to_vec(),
            FromFork::Said(m) => m.encode().into_bytes(),
        }
    }

    /// One message, whole: a `Pid1Msg` is one line, and a message of two is garbled.
    pub fn decode(m: &[u8]) -> Result<FromFork, ProtocolError> {
        match m {
            FORKED => Ok(FromFork::Forked),
            PID1 => Ok(FromFork::Pid1),
            _ => match Pid1Msg::decode_all(m).as_slice() {
                [Ok(said)] => Ok(FromFork::Said(said.clone())),
                [Err(e)] => Err(e.clone()),
                _ => Err(ProtocolError::garbled(
                    "a message of a call's fork",
                    m,
                    "not one line",
                )),
            },
        }
    }
}

/// One message to a call's fork.
#[derive(Debug, Clone, Copy)]
pub enum ToFork<'a> {
    /// C's plans, for C, P and W.
    Plans(&'a Plans),
    /// To W: the call has come (its channel rides on the message).
    Go,
}

impl ToFork<'_> {
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        match self {
            ToFork::Plans(p) => serde_json::to_vec(p).map_err(|e| ProtocolError::Encode {
                what: "a call's plans",
                why: e.to_string(),
            }),
            ToFork::Go => Ok(GO.to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_round_trips_and_two_lines_are_garbled() {
        for m in [
            FromFork::Forked,
            FromFork::Pid1,
            FromFork::Said(Pid1Msg::Waiting),
            FromFork::Said(Pid1Msg::Reaped(9)),
            FromFork::Said(Pid1Msg::SetupFailed("mount /proc: EPERM".into())),
        ] {
            assert_eq!(FromFork::decode(&m.encode()), Ok(m.clone()), "{m:?}");
        }
        let two = [
            FromFork::Said(Pid1Msg::Waiting).encode(),
            FromFork::Said(Pid1Msg::Reaped(0)).encode(),
        ]
        .concat();
        assert!(FromFork::decode(&two).is_err());
        assert!(FromFork::decode(b"cp").is_err());
        assert!(FromFork::decode(b"").is_err());
    }

    /// zygote.py's `_KERN_FORK_*` constants, taken out of the file (which refuses to run
    /// outside a zygote), are these messages' bytes.
    #[test]
    fn the_zygotes_python_names_the_same_bytes() {
        let script = "import ast, sys\n\
            tree = ast.parse(sys.stdin.read())\n\
            names = {}\n\
            for n in tree.body:\n    \
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id.startswith('_KERN_FORK_'):\n        \
                    names[n.targets[0].id] = ast.literal_eval(n.value)\n\
            for k in sorted(names):\n    \
                sys.stdout.buffer.write(k.encode() + b'=' + names[k] + b'\\n')\n";
        let out = super::super::on_zygote_py(script);
        let want = [
            (&b"_KERN_FORK_FORKED"[..], FromFork::Forked.encode()),
            (b"_KERN_FORK_GO", ToFork::Go.encode().expect("go")),
            (b"_KERN_FORK_PID1", FromFork::Pid1.encode()),
        ]
        .iter()
        .flat_map(|(k, v)| [k.to_vec(), b"=".to_vec(), v.clone(), b"\n".to_vec()].concat())
        .collect::<Vec<u8>>();
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
    }
}
