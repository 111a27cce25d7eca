//! The user's `kern.toml` (resource profiles), read as `open()` reads it when a Sandbox names
//! profiles: the file parsed (unknown keys refused, spans for line numbers), the named profiles
//! looked up and applied to a session's config. Input: a first line of profile names
//! (comma-separated, e.g. `vcpu:heavy,vdisk:scratch`), then the file.
#![no_main]

use std::sync::OnceLock;

use kern_sandbox::config::Config;
use kern_sandbox::session::profiles;
use libfuzzer_sys::fuzz_target;

/// The file `KERN_CONFIG` names, set once: each input overwrites it.
fn config_file() -> &'static std::path::Path {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("kern-fuzz-toml-")
            .tempdir()
            .expect("a scratch directory")
            .keep();
        let path = dir.join("kern.toml");
        std::env::set_var(profiles::CONFIG_ENV, &path);
        path
    })
}

fuzz_target!(|data: &[u8]| {
    let path = config_file();
    let (names, file) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(names) = std::str::from_utf8(names) else {
        return;
    };
    let entries: Vec<String> = names.split(',').map(str::to_string).collect();
    std::fs::write(path, file).expect("writing kern.toml");
    let mut cfg = Config::defaults();
    let memory = serde_json::Value::Null;
    let _ = profiles::apply(&mut cfg, &entries, Some(&memory), None);
});
