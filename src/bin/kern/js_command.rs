//! `kern serve` and `kern mcp`: subcommands written in JavaScript (js/serve/, js/mcp/, in the
//! npm package). This finds the package's `js/<command>/main.js` next to this binary and
//! replaces itself with `node` running it: the same arguments, stdio, signals and exit status.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Where the package's `js/<command>/main.js` is, seen from this binary: a checkout or the
/// main package (`kern` beside `js/`), or the platform package
/// (`node_modules/kern-sandbox-<platform>/kern` beside `node_modules/kern-sandbox/`).
fn main_js(exe: &Path, command: &str) -> Option<PathBuf> {
    let dir = exe.parent()?;
    [
        dir.join(format!("js/{command}/main.js")),
        dir.join(format!("../kern-sandbox/js/{command}/main.js")),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Execs `node js/<command>/main.js args...`; returns only when that can't be done.
pub fn exec_node(command: &str, args: &[String]) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_default();
    let Some(script) = main_js(&exe, command) else {
        eprintln!(
            "kern {command}: it ships in the npm package kern-sandbox, not beside {}: run it with `npx kern-sandbox {command}`",
            exe.display()
        );
        return ExitCode::from(127);
    };
    let err = Command::new("node").arg(&script).args(args).exec();
    eprintln!(
        "kern {command}: can't run node ({err}): kern {command} needs Node.js >= 20.17 on PATH"
    );
    ExitCode::from(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_commands_script_beside_a_checkout_binary() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let exe = root.join("kern");
        for command in ["serve", "mcp"] {
            assert_eq!(
                main_js(&exe, command),
                Some(root.join(format!("js/{command}/main.js")))
            );
        }
        assert_eq!(main_js(&exe, "no-such-command"), None);
    }
}
