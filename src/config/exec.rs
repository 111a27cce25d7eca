//! The exec limits of a box's argv and environment (MAX_ARG_STRLEN, a quarter of the stack
//! rlimit), checked before a box starts where the kernel's E2BIG would fail it.

use super::bounds::show_bytes;
use crate::error::Result;

/// The kernel's cap on one argv or environment string, its NUL included (MAX_ARG_STRLEN: 32
/// pages of 4 KiB).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;
/// What a box's exec budget keeps free of the caller's `env` for what kern adds to it: the
/// image's ENV, kern's own variables, and the call's argv (runCode's code, up to 128 KiB, and
/// python's driver).
pub const EXEC_RESERVE: usize = 256 << 10;

/// What argv and environment may take together at exec: a quarter of the stack rlimit, at most
/// 6 MiB (3/4 of the kernel's _STK_LIM) and at least 128 KiB (fs/exec.c). A box's workload
/// inherits this process's stack rlimit.
pub fn exec_budget() -> usize {
    use nix::sys::resource::{getrlimit, Resource};
    let stack = getrlimit(Resource::RLIMIT_STACK).map_or(8 << 20, |(soft, _)| soft);
    usize::try_from((stack / 4).clamp(128 << 10, 6 << 20)).unwrap_or(6 << 20)
}

/// Bytes an exec's string of `len` takes on the new stack: with its NUL, plus its pointer.
fn exec_cost(len: usize) -> usize {
    len + 1 + std::mem::size_of::<usize>()
}

/// The first environment string over MAX_ARG_STRLEN, as (name, length of `NAME=value`), and
/// what all of them take at exec.
fn env_exec_size(env: &[(String, String)]) -> (Option<(&str, usize)>, usize) {
    let len = |(k, v): &(String, String)| k.len() + 1 + v.len();
    let over = env
        .iter()
        .find(|kv| len(kv) + 1 > MAX_ARG_STRLEN)
        .map(|kv| (kv.0.as_str(), len(kv)));
    (over, env.iter().map(|kv| exec_cost(len(kv))).sum())
}

/// The caller's `env` against the exec limits, before any box: each `NAME=value` within
/// MAX_ARG_STRLEN, and the whole within the budget less what kern adds.
pub fn check_env_size(env: &[(String, String)]) -> Result<()> {
    let (over, total) = env_exec_size(env);
    if let Some((k, len)) = over {
        return crate::invalid!("option `env`: {k:?} is {} as NAME=value; Linux caps each environment string at {} KiB (MAX_ARG_STRLEN) and would refuse to start the box. Pass large data as a workspace file (writeFile) instead", show_bytes(len as u64), MAX_ARG_STRLEN >> 10);
    }
    let budget = exec_budget();
    let room = budget.saturating_sub(EXEC_RESERVE);
    if total > room {
        return crate::invalid!("option `env` takes {} at exec; a box's arguments and environment together may take {} here (a quarter of the stack rlimit, as Linux allows), of which {} KiB are kept for the image's environment, kern's own and the call's arguments, so `env` may take {}. Pass large data as a workspace file (writeFile) instead", show_bytes(total as u64), show_bytes(budget as u64), EXEC_RESERVE >> 10, show_bytes(room as u64));
    }
    Ok(())
}

/// A box's whole argv and environment (what kern adds included) against the exec limits: a
/// SandboxError before the box starts, where the kernel's E2BIG would fail it.
pub fn check_exec_size(argv: &[String], env: &[(String, String)]) -> Result<()> {
    if let Some((i, a)) = argv
        .iter()
        .enumerate()
        .find(|(_, a)| a.len() + 1 > MAX_ARG_STRLEN)
    {
        return crate::invalid!("argument {i} of the call is {}; Linux caps each argument at {} KiB (MAX_ARG_STRLEN) and would refuse to start it. Pass large data as a workspace file (writeFile) instead", show_bytes(a.len() as u64), MAX_ARG_STRLEN >> 10);
    }
    let (over, env_total) = env_exec_size(env);
    if let Some((k, len)) = over {
        return crate::invalid!("the box's environment variable {k:?} is {}; Linux caps each at {} KiB (MAX_ARG_STRLEN)", show_bytes(len as u64), MAX_ARG_STRLEN >> 10);
    }
    // The program's path is copied too: at most PATH_MAX.
    let total = argv.iter().map(|a| exec_cost(a.len())).sum::<usize>() + env_total + 4096;
    let budget = exec_budget();
    if total > budget {
        return crate::invalid!("the call's arguments and environment take {} at exec, over the {} Linux allows here (a quarter of the stack rlimit); pass large data as a workspace file (writeFile) instead", show_bytes(total as u64), show_bytes(budget as u64));
    }
    Ok(())
}
