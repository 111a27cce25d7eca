//! The addon <-> kern protocol (`engine::shared::protocol`), each side's decoder: the first line kern
//! reads (`Ask`), the box spec line (and the descriptors it announces), the lifeline's command
//! lines; what the addon reads back from kern (`Said`, through a `Transcript`); and init's
//! messages to the monitor (`Pid1Msg`). Input: a selector byte, then the bytes. Whatever decodes
//! must encode and decode back to the same message, and a stream read in pieces gives what it
//! gives read whole.
#![no_main]

use std::io::Write;

use kern_sandbox::engine::shared::handoff::{self, BoxFds};
use kern_sandbox::engine::shared::protocol::pid1::{Pid1Msg, MAX_LINE};
use kern_sandbox::engine::shared::protocol::{self, Ask, Command, Said, Transcript};
use kern_sandbox_fuzz::chunks;
use libfuzzer_sys::fuzz_target;

/// The line `encode` wrote, without its `\n`.
fn body(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").expect("an encoded line ends with \\n")
}

fn heard(pieces: &[&[u8]]) -> Transcript {
    let mut t = Transcript::default();
    for p in pieces {
        t.hear(p);
    }
    t.finish();
    t
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else {
        return;
    };
    match which % 4 {
        // kern's side: the first line, then the spec line.
        0 => {
            let mut lines = data.splitn(2, |b| *b == b'\n');
            if let Ok(ask) = Ask::decode(lines.next().unwrap_or_default()) {
                let line = ask.encode().expect("what decoded encodes");
                assert_eq!(Ask::decode(body(&line)), Ok(ask));
            }
            if let Ok(spec) = protocol::decode_spec(lines.next().unwrap_or_default()) {
                let line = protocol::encode_spec(&spec).expect("a spec encodes");
                let again = protocol::decode_spec(body(&line)).expect("what kern writes, it reads");
                assert_eq!(again, spec);
                let fds = BoxFds::received(&spec, Vec::new());
                let _ = fds.match_spec(&spec);
            }
        }
        // kern's lifeline: command lines, read from a pipe as kern reads them.
        1 => {
            for line in data.split(|b| *b == b'\n') {
                if let Ok(c) = Command::decode(line) {
                    let again = c.encode().expect("a command encodes");
                    assert_eq!(Command::decode(body(&again)), Ok(c));
                }
            }
            let (r, w) = nix::unistd::pipe().expect("a pipe");
            let mut w = std::fs::File::from(w);
            // A pipe holds 64 KiB; longer inputs are cut (libFuzzer's -max_len is smaller).
            let _ = w.write_all(&data[..data.len().min(60_000)]);
            drop(w);
            let mut pending = Vec::new();
            use std::os::fd::AsFd;
            while let Some(commands) = handoff::read_commands(r.as_fd(), &mut pending) {
                for command in commands {
                    if let Command::Signal { signal } = command {
                        let _ = handoff::signal_number(&signal.to_string());
                    }
                }
            }
        }
        // The addon's side: kern's lines, whole and in pieces.
        2 => {
            let pieces = chunks(data);
            let whole = heard(&[data.get(1..).unwrap_or_default()]);
            let split = heard(&pieces);
            assert_eq!(whole.prepared, split.prepared);
            assert_eq!(whole.started, split.started);
            assert_eq!(whole.report, split.report);
            assert_eq!(whole.garbled, split.garbled);
            if let Some(report) = whole.report {
                let said = Said::Report {
                    report: Box::new(report),
                };
                let line = said.encode().expect("a report encodes");
                assert_eq!(Said::decode(body(&line)), Ok(said));
            }
        }
        // init's messages to the monitor.
        _ => {
            for m in Pid1Msg::decode_all(data).into_iter().flatten() {
                let line = m.encode();
                // Longer text is cut to one atomic write: only what fits comes back whole.
                if line.len() <= MAX_LINE {
                    let text = line.trim_end_matches('\n');
                    assert_eq!(Pid1Msg::decode(text), Ok(m), "{line:?}");
                }
            }
            let _ = handoff::started_pid(data);
        }
    }
});
