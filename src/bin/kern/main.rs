//! `kern`: the runtime executable, one process per box or per call into a resident box. It
//! stays on the host as the box's monitor (`engine::monitor::parent`).
//!
//! `kern box` is the addon's (`engine::addon::launch::Kern`): it is started with a socketpair on its
//! stdin, the control socket, and its stdout and stderr carry the box's output, which the addon
//! drains. On the control socket, one JSON line each (`engine::shared::protocol`):
//!
//! 1. addon -> kern, an `Ask`: a fresh box's caps (kern makes its cgroup, or says which caps
//!    fall back to rlimits: `monitor::prepare`), a zygote spare's, or a call into a resident box
//!    (a per-call cgroup under it: `resident::call::prepare`); kern answers `Said::Prepared` and
//!    waits. A session keeps such spares, so the cgroup move (an RCU grace period) is off a
//!    call's path; EOF instead of line 2 means "not needed": kern leaves the cgroup and exits.
//! 2. addon -> kern, the `BoxSpec`, with the descriptors it announces on the line's first byte
//!    (SCM_RIGHTS, `handoff::BoxFds`, in this order): the channel that becomes the workload's fd 3
//!    (`spec.channel`, the python driver's frames), the egress relay's line to the host's proxy
//!    (`spec.egress`), the workload's stdin (`spec.stdin`), where its terminal's master goes
//!    (`spec.tty`) and the connector's line (`spec.connector`). kern answers `Said::Took` before
//!    it acts on the spec (a kern killed before that line did nothing with the call: the addon
//!    runs it in another), then runs the box (`monitor::parent::run_box`) or the call
//!    (`resident::call::run_call`).
//! 3. kern -> addon, once the workload is about to exec, `Said::Started` (its pid in the box);
//!    addon -> kern meanwhile, `Command::Signal` lines for the workload's process group
//!    (forwarded by the box's PID 1).
//! 4. kern -> addon, `Said::Report`; then kern closes the socket and its stdio, so
//!    the caller is done, and tears the cgroup down on its own time. For a box whose workspace
//!    the caller watches (`spec.setid_watched`), kern first waits for `Command::Swept`: the
//!    caller cleared the set-id bits of what the box changed, and kern need not walk the
//!    workspace; EOF instead, and kern sweeps it itself.
//!
//! Until the report, the addon's end of the socket is the box's lifeline: when it closes (the
//! caller went away, or the Sandbox is closing), kern kills the box. A `persist` box's spec
//! (`Resident::Start`) reports once the box is up; kern then detaches and keeps the box to its
//! TTL, and later calls reach it through line 1's `Ask::Call`.
//!
//! From a terminal, with flags named like the Sandbox options: `kern run` (a fresh box; its
//! fault as a `warning:` line, its exit code as kern's), `kern exec`/`ps`/`stop` (resident
//! boxes, found through `engine::monitor::resident`'s state files), `kern attach` and the
//! `-i`/`-t` of `run` and `exec` (a box's stdin and terminal at this one; interactive.rs; in
//! every mode the box's stdio is pipes or its own terminal, never kern's: stdio.rs), `kern
//! doctor` (what this host offers kern-sandbox, with the fix for each thing missing; doctor.rs),
//! and `kern pull`/`images`/`rmi`/`prune` (the image store the addon also pulls into, in its own
//! process; images.rs).

// The doc comments on the clap types below are `kern --help` text ("<user>[:<group>]",
// "PATH[:SIZE]"), not rustdoc: they are written for a terminal, not as links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use clap::{Parser, Subcommand};
use kern_sandbox::config::{self, base_env, DEFAULT_MEMORY_MB, DEFAULT_PIDS};
use kern_sandbox::engine::monitor::parent::run_box;
use kern_sandbox::engine::monitor::prepare::prepare;
use kern_sandbox::engine::monitor::resident::{self, call};
use kern_sandbox::engine::shared::handoff::{CallTarget, Caller};
use kern_sandbox::engine::shared::spec::{BoxSpec, Limits, Resident, DEFAULT_HOSTNAME};
use kern_sandbox::engine::shared::status::{self, BoxReport};
use kern_sandbox::image;
use kern_sandbox::workspace::Workspace;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

mod boxed;
mod doctor;
mod images;
mod interactive;
mod js_command;
mod publishing;
mod resident_cli;
mod scratch;
mod stdio;
mod volumes;

use interactive::{Mode, Relay};

#[derive(Parser)]
#[command(
    name = "kern",
    version,
    about = "Run code in a fresh, isolated Linux box"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command in a fresh box: kern run --image DIR -- python3 -c 'print(1)'
    Run(RunArgs),
    /// Pull an image into the store (or refresh a cached tag): kern pull python:3.12-slim
    Pull {
        /// A registry reference, an OCI layout directory or an image archive.
        reference: String,
        /// No progress bars.
        #[arg(long, short)]
        quiet: bool,
    },
    /// List the images in the store.
    Images,
    /// Serve E2B's API, so the E2B SDKs run on this host's boxes (docs/serve.md). Written in
    /// JS, in the npm package: this execs `node` on it with the same arguments.
    #[command(disable_help_flag = true)]
    Serve {
        /// kern serve's own flags (kern serve --help lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A Model Context Protocol server whose tools run in boxes, or with --wrap a box around
    /// another stdio MCP server (docs/mcp.md). Written in JS, in the npm package: this execs
    /// `node` on it with the same arguments.
    #[command(disable_help_flag = true)]
    Mcp {
        /// kern mcp's own flags (kern mcp --help lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Remove images from the store (by reference, digest or digest prefix).
    Rmi {
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// Remove blobs no image needs and abandoned partial work.
    Prune,
    /// Named volumes, mounted by name in boxes (`--volume` of run, the `volumes` option).
    #[command(subcommand)]
    Volume(volumes::VolumeCommand),
    /// Run a command in a live resident box (a Sandbox opened with `persist`):
    /// kern exec NAME -- python3 -c 'print(1)'
    Exec {
        /// The sandbox's `name`.
        name: String,
        #[command(flatten)]
        call: CallArgs,
        /// The command to run.
        #[arg(trailing_var_arg = true, required = true)]
        argv: Vec<String>,
    },
    /// An interactive shell in a live resident box (its image's bash, else sh), or the command
    /// given: kern attach NAME, kern attach NAME -- python3. As `kern exec -it`.
    Attach {
        /// The sandbox's `name`.
        name: String,
        /// Run as this account of the image ("<user>[:<group>]"), as the `user` option.
        #[arg(long, short)]
        user: Option<String>,
        /// Wall-clock limit of this shell in seconds [default: 7 days] (the box goes on after it).
        #[arg(long)]
        timeout: Option<f64>,
        /// Environment variable for this shell, KEY=VALUE (repeatable), on top of the box's.
        #[arg(long, short)]
        env: Vec<String>,
        /// The command to run instead of the shell.
        #[arg(trailing_var_arg = true)]
        argv: Vec<String>,
    },
    /// List the live resident boxes.
    Ps,
    /// Stop a resident box (and remove its state and cgroup); no box by that name is not an error.
    Stop { name: String },
    /// Freeze a resident box (every process in it; memory kept, no CPU) until `kern resume`.
    Pause { name: String },
    /// Let a paused resident box run again.
    Resume { name: String },
    /// Check this host for what kern-sandbox needs (user namespaces, cgroups, seccomp, ...),
    /// with the fix for each thing missing. Exits 1 when a box can't run with enforced caps.
    Doctor {
        /// Check idmapped mounts on this directory's filesystem (default: the temp dir).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print the checks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Internal: the addon's runtime for one box or call (the protocol at the top of main.rs).
    #[command(hide = true)]
    Box,
}

/// `kern exec`'s options for its call.
#[derive(clap::Args)]
struct CallArgs {
    /// Run as this account of the image ("<user>[:<group>]"), as the `user` option.
    #[arg(long, short)]
    user: Option<String>,
    /// Wall-clock limit of this call in seconds [default: 30; with -t: 7 days] (the box goes
    /// on after it).
    #[arg(long)]
    timeout: Option<f64>,
    /// Environment variable for this call, KEY=VALUE (repeatable), on top of the box's.
    #[arg(long, short)]
    env: Vec<String>,
    /// Keep stdin open: the workload reads kern's stdin (through a pipe, or with -t its
    /// terminal).
    #[arg(long, short)]
    interactive: bool,
    /// Give the workload a terminal of its own, sized like this one and relayed to it (raw
    /// while the call runs); with -i, an interactive shell: kern exec -it NAME -- bash.
    #[arg(long, short)]
    tty: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// An image reference (pulled if not cached), an absolute path (OCI layout, image archive
    /// or root filesystem directory), or "host" (the host's programs, read-only).
    #[arg(long, default_value = "host")]
    image: String,
    /// Host directory bound read-write at the workspace mount (default: a temporary one,
    /// deleted after).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Where the box sees the workspace, its cwd [default: /workspace].
    #[arg(long = "workspace-mount", value_name = "PATH")]
    workspace_mount: Option<String>,
    /// Memory cap in MiB; 0 = uncapped.
    #[arg(long, default_value_t = DEFAULT_MEMORY_MB)]
    memory: u64,
    /// Task cap; 0 = uncapped.
    #[arg(long = "pids-limit", default_value_t = DEFAULT_PIDS)]
    pids_limit: u64,
    /// CPU cap in cores.
    #[arg(long)]
    cpus: Option<f64>,
    /// Wall-clock limit in seconds [default: 30; with -t: 7 days].
    #[arg(long)]
    timeout: Option<f64>,
    /// Scratch tmpfs, PATH[:SIZE] (repeatable). Default /tmp:64m; "none" for no scratch.
    #[arg(long)]
    tmpfs: Vec<String>,
    /// Environment variable for the workload, KEY=VALUE (repeatable).
    #[arg(long, short)]
    env: Vec<String>,
    /// Caps as best-effort rlimits instead of cgroups.
    #[arg(long)]
    no_enforce_limits: bool,
    /// `untrusted`: run under the seccomp allowlist (escape syscalls fail with EPERM and are
    /// reported as an escape_blocked fault naming them).
    #[arg(long = "security-profile", value_parser = ["untrusted"])]
    security_profile: Option<String>,
    /// Keep stdin open: the workload reads kern's stdin (through a pipe, or with -t its
    /// terminal).
    #[arg(long, short)]
    interactive: bool,
    /// Give the workload a terminal of its own, sized like this one and relayed to it (raw
    /// while the box runs); with -i, an interactive shell: kern run -it -- bash.
    #[arg(long, short)]
    tty: bool,
    /// Publish the box's 127.0.0.1:PORT (an HTTP or WebSocket server in it) on a URL of this
    /// host with a token, printed on stderr (repeatable); nothing else of the host opens to
    /// the box.
    #[arg(long, short = 'p', value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    publish: Vec<u16>,
    /// Mount a named volume (`kern volume create`), NAME:PATH (read-write, its only writer),
    /// NAME:PATH:ro or NAME:PATH:shared (repeatable); held until the box ends.
    #[arg(long, short = 'v', value_name = "NAME:PATH[:ro|:shared]")]
    volume: Vec<String>,
    /// The command to run.
    #[arg(trailing_var_arg = true, required = true)]
    argv: Vec<String>,
}

fn main() -> ExitCode {
    // Before any box's namespaces exist: they keep the limit their maker had (`engine::shared::mq`).
    kern_sandbox::engine::shared::mq::lift_host_budget();
    match Cli::parse().command {
        Command::Box => boxed::boxed(),
        Command::Run(args) => or_125(run(args)),
        Command::Exec { name, call, argv } => {
            let mode = Mode {
                interactive: call.interactive,
                tty: call.tty,
            };
            let CallArgs {
                user, timeout, env, ..
            } = call;
            or_125(resident_exec(
                &name,
                user.as_deref(),
                timeout,
                &env,
                argv,
                mode,
            ))
        }
        Command::Attach {
            name,
            user,
            timeout,
            env,
            argv,
        } => {
            let mode = Mode {
                interactive: true,
                tty: true,
            };
            or_125(resident_exec(
                &name,
                user.as_deref(),
                timeout,
                &env,
                argv,
                mode,
            ))
        }
        Command::Doctor { workspace, json } => doctor::doctor(workspace, json),
        Command::Ps => report(resident_cli::ps()),
        Command::Stop { name } => report(resident_cli::stop(&name)),
        Command::Pause { name } => report(resident_cli::pause(&name, true)),
        Command::Resume { name } => report(resident_cli::pause(&name, false)),
        Command::Pull { reference, quiet } => report(images::pull(&reference, quiet)),
        Command::Images => report(images::list()),
        Command::Serve { args } => js_command::exec_node("serve", &args),
        Command::Mcp { args } => js_command::exec_node("mcp", &args),
        Command::Rmi { images } => report(images::rmi(&images)),
        Command::Prune => report(images::prune()),
        Command::Volume(cmd) => report(volumes::volume(cmd)),
    }
}

/// kern's own error (not the box's): said on stderr, exit 125 as docker does.
fn or_125(r: Result<ExitCode, String>) -> ExitCode {
    r.unwrap_or_else(|e| {
        eprintln!("kern: {e}");
        ExitCode::from(125)
    })
}

fn report(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kern: {e}");
            ExitCode::from(1)
        }
    }
}

/// A temporary workspace, deleted when `run` returns.
struct TempWorkspace(Workspace);

impl Drop for TempWorkspace {
    fn drop(&mut self) {
        let _ = self.0.dispose();
    }
}

fn run(a: RunArgs) -> Result<ExitCode, String> {
    let mode = Mode {
        interactive: a.interactive,
        tty: a.tty,
    };
    interactive::check(mode)?;
    let timeout = a.timeout.unwrap_or(default_timeout(mode));
    let source = image::Source::parse(&a.image).map_err(|e| e.to_string())?;
    let policy = image::PullPolicy::from_env().map_err(|e| e.to_string())?;
    let opened = image::open(&source, policy, &mut image::Quiet).map_err(|e| e.to_string())?;
    let root = opened.root.clone();
    let (ws, tmpfs) = scratch::workspace_and_tmpfs(a.workspace_mount.as_deref(), &a.tmpfs)?;
    let home = if tmpfs.iter().any(|t| t.target == "/tmp") {
        "/tmp"
    } else {
        ws.as_str()
    };
    let mut env = base_env(&opened.config, home);
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--env {kv:?}: expected KEY=VALUE"))?;
        env.retain(|(ek, _)| ek != k);
        env.push((k.to_string(), v.to_string()));
    }
    if mode.tty && !a.env.iter().any(|kv| kv.starts_with("TERM=")) {
        env.retain(|(k, _)| k != "TERM");
        env.push(("TERM".into(), interactive::term()));
    }
    // A temporary one is a Sandbox's kind: removed at the end, or, if this process is killed
    // first, by a later open() or `kern run` (`workspace::owner`).
    let temp;
    let workspace = match a.workspace {
        // The Sandbox's own check: a real directory (created if missing), never a symlink,
        // FIFO, device or file.
        Some(w) => {
            let w =
                std::path::absolute(&w).map_err(|e| format!("--workspace {}: {e}", w.display()))?;
            kern_sandbox::session::host_binds::check_workspace(&w).map_err(|e| e.to_string())?;
            kern_sandbox::workspace::Workspace::existing(&w)
                .map_err(|e| e.to_string())?
                .path
        }
        None => {
            temp = TempWorkspace(Workspace::temporary().map_err(|e| e.to_string())?);
            temp.0.path.clone()
        }
    };
    check_timeout(timeout)?;
    let (binds, _volumes) = volumes::mounts(&a.volume, &ws)?;
    for b in &binds {
        if let Some(s) = tmpfs.iter().find(|s| {
            config::at_or_under(&b.target, &s.target) || config::at_or_under(&s.target, &b.target)
        }) {
            return Err(format!("--volume at {}: over or inside the scratch tmpfs at {}; pick another path, or --tmpfs none", b.target, s.target));
        }
    }
    // The same bounds as the Sandbox options, before any box starts.
    let memory_bytes = (a.memory > 0).then(|| a.memory.saturating_mul(1 << 20));
    if let Some(why) = memory_bytes.and_then(config::memory_out_of_bounds) {
        return Err(format!("--memory {} (MiB) {why}", a.memory));
    }
    if let Some(why) = (a.pids_limit > 0)
        .then_some(a.pids_limit)
        .and_then(config::pids_out_of_bounds)
    {
        return Err(format!("--pids-limit {why}"));
    }
    if let Some(cores) = a.cpus {
        if !(cores.is_finite() && cores > 0.0) {
            return Err("--cpus must be a positive number of cores".into());
        }
        if let Some(why) = config::cpus_out_of_bounds(cores) {
            return Err(format!("--cpus {why}"));
        }
    }
    config::check_exec_size(&a.argv, &env).map_err(|e| e.to_string())?;
    let mut spec = BoxSpec {
        root,
        workspace,
        workspace_target: ws.clone(),
        tmpfs,
        limits: Limits {
            memory_bytes,
            pids: (a.pids_limit > 0).then_some(a.pids_limit),
            cpus: a.cpus,
            enforce: !a.no_enforce_limits,
            require: false,
        },
        timeout_ms: (timeout * 1000.0).ceil() as u64,
        argv: a.argv,
        env,
        hostname: DEFAULT_HOSTNAME.into(),
        user: opened.user.clone(),
        channel: false,
        binds,
        host_network: false,
        etc: Vec::new(),
        readonly_in_workspace: Vec::new(),
        egress: None,
        apparmor: None,
        keep_caps: Vec::new(),
        seccomp: match a.security_profile {
            Some(_) => Some(
                kern_sandbox::engine::boxside::seccomp::untrusted()
                    .map_err(|e| e.to_string())?
                    .clone(),
            ),
            None => None,
        },
        devices: Vec::new(),
        resident: None,
        cwd: None,
        stdin: mode.interactive && !mode.tty,
        tty: mode.tty.then(interactive::host_size),
        connector: false,
        serves_zygote: false,
        zygote: false,
        setid_watched: false,
    };
    let prepared = prepare(&spec.limits);
    let (mut relay, mut side) = match Relay::new(mode) {
        Ok(r) => r,
        Err(e) => {
            prepared.release();
            return Err(format!("set up the box's stdin or terminal: {e}"));
        }
    };
    // -p: the box gets a connector; the URLs are said once its workload starts.
    let mut published = match publishing::prepare(&a.publish, &mut spec, &mut side.fds) {
        Ok(p) => p,
        Err(e) => {
            prepared.release();
            return Err(e);
        }
    };
    let mut report = None;
    let caller = Caller {
        lifeline: side.lifeline.as_ref().map(|l| l.as_fd()),
        fds: side.fds,
        on_report: &mut |r| report = Some(r.clone()),
        // Threads only from here: the box is cloned from this process before.
        on_started: Some(&mut |_| {
            relay.start();
            if let Some(p) = published.as_mut() {
                p.start();
            }
        }),
    };
    run_box(&spec, prepared, caller);
    drop(published);
    Ok(conclude(&mut relay, report.as_ref()))
}

/// `--timeout` unless given: an interactive shell ends when its user leaves it.
fn default_timeout(mode: Mode) -> f64 {
    if mode.tty {
        config::MAX_TIMEOUT_S
    } else {
        30.0
    }
}

/// The box has ended: the terminal and stdio are put back, then what happened is said (on the
/// host's stderr again), and the exit code is the workload's, or 128 + the signal that made
/// kern end the box.
fn conclude(relay: &mut Relay, report: Option<&BoxReport>) -> ExitCode {
    let finished = relay.finish();
    if let Some(why) = finished.problem {
        status::note("warning", &format!("the box's stdio: {why}"));
    }
    if let Some(r) = report {
        if let Some(why) = &r.resident_gone {
            status::note("warning", why);
        }
    }
    if let Some(sig) = finished.signal {
        status::note(
            "warning",
            &format!("kern got {}: it ended the box", status::signal_name(sig)),
        );
        return ExitCode::from((128 + sig).clamp(0, 255) as u8);
    }
    ExitCode::from(report.map(say_fault_and_code).unwrap_or(125) as u8)
}

/// `kern exec` and `kern attach`: the box's own posture (and environment), this argv (none:
/// the image's shell); output straight through, or on a terminal with -t.
fn resident_exec(
    name: &str,
    user: Option<&str>,
    timeout: Option<f64>,
    env: &[String],
    argv: Vec<String>,
    mode: Mode,
) -> Result<ExitCode, String> {
    let dir = resident::state_dir().map_err(|e| e.to_string())?;
    let live = {
        let _lock = resident::lock(&dir, name).map_err(|e| e.to_string())?;
        resident::find(&dir, name).map_err(|e| e.to_string())?
    }
    .ok_or_else(|| format!("no live resident box named {name} (`kern ps` lists them)"))?;
    interactive::check(mode)?;
    let timeout = timeout.unwrap_or(default_timeout(mode));
    check_timeout(timeout)?;
    let state = live.state;
    let mut spec = state.spec.clone();
    if let Some(account) = user {
        spec.user = image::resolve_user(&spec.root, account).map_err(|e| e.to_string())?;
    }
    if mode.tty && !env.iter().any(|kv| kv.starts_with("TERM=")) {
        spec.env.retain(|(k, _)| k != "TERM");
        spec.env.push(("TERM".into(), interactive::term()));
    }
    for kv in env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--env {kv:?}: expected KEY=VALUE"))?;
        spec.env.retain(|(ek, _)| ek != k);
        spec.env.push((k.to_string(), v.to_string()));
    }
    let argv = match argv.is_empty() {
        true => vec![kern_sandbox::engine::boxside::pty::shell_of(&spec.root).to_string()],
        false => argv,
    };
    config::check_exec_size(&argv, &spec.env).map_err(|e| e.to_string())?;
    spec.argv = argv;
    spec.timeout_ms = (timeout * 1000.0).ceil() as u64;
    spec.channel = false;
    spec.egress = None;
    spec.stdin = mode.interactive && !mode.tty;
    spec.tty = mode.tty.then(interactive::host_size);
    spec.connector = false;
    let target = CallTarget {
        name: name.to_string(),
        pid1: state.pid1,
    };
    spec.resident = Some(Resident::Exec {
        name: target.name.clone(),
        pid1: target.pid1,
    });
    let prepared = call::prepare(&target);
    let (mut relay, side) = match Relay::new(mode) {
        Ok(r) => r,
        Err(e) => {
            prepared.release();
            return Err(format!("set up the call's stdin or terminal: {e}"));
        }
    };
    let mut report = None;
    let caller = Caller {
        lifeline: side.lifeline.as_ref().map(|l| l.as_fd()),
        fds: side.fds,
        on_report: &mut |r| report = Some(r.clone()),
        on_started: Some(&mut |_| relay.start()),
    };
    call::run_call(&spec, prepared, caller);
    Ok(conclude(&mut relay, report.as_ref()))
}

/// `--timeout` within the bounds of `timeoutS`.
fn check_timeout(seconds: f64) -> Result<(), String> {
    if !(seconds.is_finite() && (config::MIN_TIMEOUT_S..=config::MAX_TIMEOUT_S).contains(&seconds))
    {
        return Err(format!(
            "--timeout must be a number of seconds from {} to {} (7 days)",
            config::MIN_TIMEOUT_S,
            config::MAX_TIMEOUT_S
        ));
    }
    Ok(())
}

/// A box's fault as a `warning:` line on stderr, and its exit code as the CLI's (0..=255).
fn say_fault_and_code(report: &BoxReport) -> i32 {
    if let Some(f) = &report.fault {
        status::note(
            "warning",
            &format!("fault {}: {}", f.kind.as_str(), f.message),
        );
    }
    report.exit_code.clamp(0, 255)
}
