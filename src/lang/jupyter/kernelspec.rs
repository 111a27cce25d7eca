//! Kernelspecs (`kernel.json`) found in an image, and the connection file a kernel is started
//! with. The image is read from the host with every path resolved inside its root, so a
//! kernelspec directory that links to `/` reads the image's `/`, never the host's.

use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::path::Path;

/// Where in the box the kernel's private socket directory is mounted.
pub const SOCKET_DIR: &str = "/.kern-jupyter";
/// The connection file, in that directory.
pub const CONNECTION_FILE: &str = "/.kern-jupyter/connection.json";
/// The socket path prefix (`ip` of an ipc connection file); sockets are `{prefix}-{n}`.
const SOCKET_PREFIX: &str = "k";

/// The five channels, with the number that names each one's socket (`k-1` ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Shell = 1,
    IoPub = 2,
    Stdin = 3,
    Control = 4,
    Heartbeat = 5,
}

/// How a kernel wants to be interrupted (`interrupt_mode` in its kernelspec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// SIGINT to the kernel's process (the default).
    Signal,
    /// An `interrupt_request` on the control channel.
    Message,
}

/// A kernelspec as the box will run it.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    pub name: String,
    /// The kernel's command line, `{connection_file}` and `{resource_dir}` filled in.
    pub argv: Vec<String>,
    /// `env` of the kernelspec, filled in the same way.
    pub env: Vec<(String, String)>,
    pub interrupt: Interrupt,
    pub language: String,
}

/// Checks a kernelspec name as given by the caller (jupyter's own rule: letters, digits, `.`,
/// `_`, `-`).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "kernel({{ jupyter }}) takes a kernelspec name such as \"python3\" or \"ir\" (letters, digits, '.', '_', '-', at most 64), not {name:?}"
        )))
    }
}

/// The kernelspec directories of a box, most preferred first, in jupyter's own order: each
/// `JUPYTER_PATH` entry's `kernels`, the user's, then the system's. `homes`: the box's `HOME`
/// and the account's home in the image (where `pip install --user` put one).
pub fn search_dirs(jupyter_path: Option<&str>, homes: &[&str]) -> Vec<String> {
    let mut dirs: Vec<String> = Vec::new();
    let mut add = |d: String| {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    };
    for p in jupyter_path.unwrap_or("").split(':') {
        let p = p.trim_end_matches('/');
        if p.starts_with('/') && p.len() > 1 {
            add(format!("{p}/kernels"));
        }
    }
    for home in homes {
        let home = home.trim_end_matches('/');
        if home.starts_with('/') && home.len() > 1 {
            add(format!("{home}/.local/share/jupyter/kernels"));
        }
    }
    add("/usr/local/share/jupyter/kernels".into());
    add("/usr/share/jupyter/kernels".into());
    dirs
}

/// Where a directory of the box is on the host: a root to resolve it in (every symlink stays
/// under it) and the path below that root.
pub type Locate<'a> = &'a dyn Fn(&str) -> (std::path::PathBuf, String);

/// Finds kernelspec `name` in `dirs` (paths in the box, see `search_dirs`), read through
/// `locate`. A missing one is an error that lists the kernelspecs there are, and where it looked.
pub fn find(dirs: &[String], locate: Locate<'_>, name: &str) -> Result<KernelSpec> {
    check_name(name)?;
    for dir in dirs {
        let (root, rel) = locate(dir);
        if let Some(text) =
            crate::image::user::read_in_root(&root, &format!("{rel}/{name}/kernel.json"))
        {
            return parse(name, &format!("{dir}/{name}"), &text);
        }
    }
    let mut found: Vec<String> = dirs
        .iter()
        .flat_map(|d| {
            let (root, rel) = locate(d);
            list(&root, &rel)
        })
        .collect();
    found.sort();
    found.dedup();
    let have = if found.is_empty() {
        "no kernelspecs were found there (install one in the image, e.g. Debian's python3-ipykernel or r-cran-irkernel, or `pip install ipykernel`)".to_string()
    } else {
        format!(
            "the kernelspecs there are {}",
            found
                .iter()
                .map(|f| format!("\"{f}\""))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Err(Error::Invalid(format!(
        "no Jupyter kernelspec \"{name}\" in the box (looked in {}); {have}",
        dirs.join(", ")
    )))
}

/// The kernelspec names under one directory (those with a kernel.json).
fn list(root: &Path, rel: &str) -> Vec<String> {
    use crate::fsx::{open_beneath, Resolve};
    use nix::fcntl::OFlag;
    let Ok(rootfd) = std::fs::File::open(root) else {
        return Vec::new();
    };
    let dir = if rel.is_empty() { "." } else { rel };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    let Ok(fd) = open_beneath(&rootfd, dir, flags, Resolve::InRoot) else {
        return Vec::new();
    };
    let Ok(mut d) = nix::dir::Dir::from_fd(fd) else {
        return Vec::new();
    };
    d.iter()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .filter(|n| check_name(n).is_ok())
        .filter(|n| {
            crate::image::user::read_in_root(root, &format!("{rel}/{n}/kernel.json")).is_some()
        })
        .take(100)
        .collect()
}

/// Reads a kernel.json found at `dir` (a path in the box).
pub fn parse(name: &str, dir: &str, text: &str) -> Result<KernelSpec> {
    let bad = |why: String| Error::Invalid(format!("the kernelspec {dir}/kernel.json {why}"));
    let v: Value =
        serde_json::from_str(text).map_err(|e| bad(format!("is not valid JSON ({e})")))?;
    let fill = |s: &str| {
        s.replace("{connection_file}", CONNECTION_FILE)
            .replace("{resource_dir}", dir)
    };
    let argv: Vec<String> = v
        .get("argv")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("has no argv list".into()))?
        .iter()
        .map(|a| a.as_str().map(fill))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("has an argv entry that is not a string".into()))?;
    if argv.is_empty() || argv[0].is_empty() {
        return Err(bad("has an empty argv".into()));
    }
    if !argv.iter().any(|a| a.contains(CONNECTION_FILE)) {
        return Err(bad(
            "never passes {connection_file} to the kernel, so it could not be connected to".into(),
        ));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(bad("has a NUL byte in argv".into()));
    }
    let mut env = Vec::new();
    if let Some(map) = v.get("env").and_then(Value::as_object) {
        for (k, val) in map {
            let val = val
                .as_str()
                .ok_or_else(|| bad(format!("has a non-string env value for {k}")))?;
            if k.is_empty() || k.contains(['=', '\0']) || val.contains('\0') {
                return Err(bad(format!("has an invalid env entry {k:?}")));
            }
            env.push((k.clone(), fill(val)));
        }
    }
    let interrupt = match v.get("interrupt_mode").and_then(Value::as_str) {
        None | Some("signal") => Interrupt::Signal,
        Some("message") => Interrupt::Message,
        Some(other) => {
            return Err(bad(format!(
                "has interrupt_mode {other:?}; jupyter knows \"signal\" and \"message\""
            )))
        }
    };
    Ok(KernelSpec {
        name: name.to_string(),
        argv,
        env,
        interrupt,
        language: v
            .get("language")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    })
}

/// The socket file of a channel, under the socket directory `dir` as the host sees it.
pub fn socket_path(dir: &Path, channel: Channel) -> std::path::PathBuf {
    dir.join(format!("{SOCKET_PREFIX}-{}", channel as u8))
}

/// The connection file's JSON: ipc transport, sockets in the box's socket directory, the key.
pub fn connection_file(key: &str, kernel_name: &str) -> Value {
    json!({
        "transport": "ipc",
        "ip": format!("{SOCKET_DIR}/{SOCKET_PREFIX}"),
        "shell_port": Channel::Shell as u8,
        "iopub_port": Channel::IoPub as u8,
        "stdin_port": Channel::Stdin as u8,
        "control_port": Channel::Control as u8,
        "hb_port": Channel::Heartbeat as u8,
        "signature_scheme": "hmac-sha256",
        "key": key,
        "kernel_name": kernel_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["python3", "ir", "julia-1.10", "my_kernel.v2"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "py thon",
            "x\0",
            &"a".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ipykernel_and_irkernel_specs_parse() {
        let py = parse(
            "python3",
            "/usr/share/jupyter/kernels/python3",
            r#"{"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (ipykernel)", "language": "python",
                "metadata": {"debugger": true}}"#,
        )
        .unwrap();
        assert_eq!(py.argv[4], CONNECTION_FILE);
        assert_eq!(py.interrupt, Interrupt::Signal);
        assert_eq!(py.language, "python");
        let r = parse(
            "ir",
            "/usr/share/jupyter/kernels/ir",
            r#"{"argv": ["R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"],
                "display_name":"R", "language":"R", "interrupt_mode": "message",
                "env": {"R_HOME_HINT": "{resource_dir}/x"}}"#,
        )
        .unwrap();
        assert_eq!(r.argv[0], "R");
        assert_eq!(r.interrupt, Interrupt::Message);
        assert_eq!(
            r.env,
            vec![(
                "R_HOME_HINT".to_string(),
                "/usr/share/jupyter/kernels/ir/x".to_string()
            )]
        );
    }

    #[test]
    fn bad_specs_say_why() {
        let msg = |t: &str| parse("k", "/d", t).unwrap_err().to_string();
        assert!(msg("{").contains("not valid JSON"));
        assert!(msg(r#"{"argv": []}"#).contains("empty argv"));
        assert!(msg(r#"{"argv": ["x"]}"#).contains("{connection_file}"));
        assert!(
            msg(r#"{"argv": ["x", "{connection_file}"], "interrupt_mode": "poke"}"#)
                .contains("interrupt_mode")
        );
    }

    #[test]
    fn connection_file_uses_ipc_and_the_socket_dir() {
        let c = connection_file("abc", "python3");
        assert_eq!(c["transport"], "ipc");
        assert_eq!(c["ip"], "/.kern-jupyter/k");
        assert_eq!(c["iopub_port"], 2);
        assert_eq!(
            socket_path(Path::new("/tmp/d"), Channel::Heartbeat),
            Path::new("/tmp/d/k-5")
        );
    }

    #[test]
    fn search_order_is_jupyters() {
        assert_eq!(
            search_dirs(
                Some("/workspace/jk:relative:/opt/j/"),
                &["/tmp", "/root", "/tmp"]
            ),
            [
                "/workspace/jk/kernels",
                "/opt/j/kernels",
                "/tmp/.local/share/jupyter/kernels",
                "/root/.local/share/jupyter/kernels",
                "/usr/local/share/jupyter/kernels",
                "/usr/share/jupyter/kernels",
            ]
        );
    }

    #[test]
    fn finds_specs_in_an_image_and_lists_them_when_missing() {
        let root = tempfile::tempdir().unwrap();
        let k = root.path().join("usr/share/jupyter/kernels/python3");
        std::fs::create_dir_all(&k).unwrap();
        std::fs::write(
            k.join("kernel.json"),
            r#"{"argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}"#,
        )
        .unwrap();
        // A user kernelspec that is a symlink to the host's root: read inside the image.
        let user = root.path().join("root/.local/share/jupyter/kernels");
        std::fs::create_dir_all(&user).unwrap();
        std::os::unix::fs::symlink("/", user.join("evil")).unwrap();
        let dirs = search_dirs(None, &["/root"]);
        let r = root.path().to_path_buf();
        let locate = move |d: &str| (r.clone(), d.trim_start_matches('/').to_string());
        assert_eq!(find(&dirs, &locate, "python3").unwrap().argv[0], "python3");
        let e = find(&dirs, &locate, "julia").unwrap_err().to_string();
        assert!(e.contains("the kernelspecs there are \"python3\""), "{e}");
        assert!(e.contains("/usr/local/share/jupyter/kernels"), "{e}");
        let e = find(&dirs, &locate, "evil").unwrap_err().to_string();
        assert!(e.contains("no Jupyter kernelspec \"evil\""), "{e}");
    }
}
