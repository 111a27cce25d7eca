//! `kern serve`: E2B's API over the library (js/serve/, in the npm package). The server is
//! JavaScript, so this finds the package's `js/serve/main.js` next to this binary and replaces
//! itself with `node` running it: the same arguments, stdio, signals and exit status.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Where the package's server is, seen from this binary: a checkout or the main package
/// (`kern` beside `js/`), or the platform package (`node_modules/kern-sandbox-<platform>/kern`
/// beside `node_modules/kern-sandbox/`).
fn main_js(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    [
        dir.join("js/serve/main.js"),
        dir.join("../kern-sandbox/js/serve/main.js"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

pub fn exec_node(args: &[String]) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_default();
    let Some(script) = main_js(&exe) else {
        eprintln!(
            "kern serve: the server ships in the npm package kern-sandbox, not beside {}: run it with `npx kern-sandbox serve`",
            exe.display()
        );
        return ExitCode::from(127);
    };
    let err = Command::new("node").arg(&script).args(args).exec();
    eprintln!("kern serve: can't run node ({err}): kern serve needs Node.js >= 20.17 on PATH");
    ExitCode::from(127)
}
