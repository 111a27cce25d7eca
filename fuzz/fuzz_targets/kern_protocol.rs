//! The addon <-> kern protocol, each side's parser: the caps line kern reads first (a call's
//! target, a zygote spare's caps, or the limits), the box spec line (and the descriptors it
//! announces), the lifeline's command lines; and what the addon reads back from kern (the
//! prepared notes, the started line, the report) and from init (its message lines). Input: a
//! selector byte, then the bytes. Whatever parses must serialise and parse again.
#![no_main]

use std::io::Write;

use kern_sandbox::engine::handoff::{self, BoxFds, CallTarget};
use kern_sandbox::engine::launch;
use kern_sandbox::engine::spec::{BoxSpec, Limits};
use kern_sandbox::engine::plan::Inputs;
use libfuzzer_sys::fuzz_target;
use serde::{de::DeserializeOwned, Serialize};

/// The caps lines as `kern`'s `boxed()` (src/bin/kern/main.rs) declares them.
#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ZygoteCaps {
    limits: Limits,
    zygote: Inputs,
}

#[derive(serde::Deserialize, Serialize)]
struct CallCaps {
    call: CallTarget,
}

fn round_trip<T: DeserializeOwned + Serialize>(line: &[u8]) -> Option<T> {
    let v: T = serde_json::from_slice(line).ok()?;
    let text = serde_json::to_vec(&v).expect("what parsed serialises");
    let again: T = serde_json::from_slice(&text).expect("what kern writes, it reads back");
    Some(again)
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else {
        return;
    };
    match which % 3 {
        // kern's side: caps, then the spec line, in the order boxed() tries them.
        0 => {
            let mut lines = data.splitn(2, |b| *b == b'\n');
            let caps = lines.next().unwrap_or_default();
            if round_trip::<CallCaps>(caps).is_none() && round_trip::<ZygoteCaps>(caps).is_none() {
                let _ = round_trip::<Limits>(caps);
            }
            if let Some(spec) = round_trip::<BoxSpec>(lines.next().unwrap_or_default()) {
                let fds = BoxFds::received(&spec, Vec::new());
                let _ = fds.match_spec(&spec);
            }
        }
        // kern's lifeline: command lines, read from a pipe as kern reads them.
        1 => {
            let (r, w) = nix::unistd::pipe().expect("a pipe");
            let mut w = std::fs::File::from(w);
            // A pipe holds 64 KiB; longer inputs are cut (libFuzzer's -max_len is smaller).
            let _ = w.write_all(&data[..data.len().min(60_000)]);
            drop(w);
            let mut pending = Vec::new();
            use std::os::fd::AsFd;
            while let Some(commands) = handoff::read_commands(r.as_fd(), &mut pending) {
                for c in commands {
                    let _ = handoff::signal_number(&c.signal.to_string());
                }
            }
        }
        // The addon's side: kern's status lines and init's messages.
        _ => {
            let _ = launch::prepared_notes(data);
            let _ = launch::started_pid(data);
            if let Some(report) = launch::parse_report(data) {
                let text = serde_json::to_vec(&report).expect("a report serialises");
                assert!(launch::parse_report(&text).is_some());
            }
            let _ = handoff::started_pid(data);
        }
    }
});
