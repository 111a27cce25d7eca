//! Interrupting a kernel's cell by signal (the driver kernel's, and a Jupyter kernel's whose
//! kernelspec asks for signals): its process group is found from the box's monitor through the
//! parent pids in `/proc`; so is the box's init, which `pause()` freezes the box by.

/// SIGINT to the box's workload, off the async threads (it reads `/proc`).
pub(crate) async fn interrupt(monitor: Option<u32>) {
    if let Some(monitor) = monitor {
        let _ = tokio::task::spawn_blocking(move || {
            signal_workload(monitor, nix::sys::signal::Signal::SIGINT)
        })
        .await;
    }
}

/// Sends `sig` to the box's workload (the kernel's process group): the children of the box's
/// init.
fn signal_workload(monitor: u32, sig: nix::sys::signal::Signal) {
    let parents = parent_map();
    let Some(init) = init_in(&parents, monitor) else {
        return;
    };
    for (w, _) in parents.iter().filter(|(_, pp)| *pp == init) {
        // The workload leads its own process group (init made it a session leader): signal
        // the group, as jupyter_client does, so a wrapper script's kernel gets it too. A pid
        // gone meanwhile gets ESRCH.
        let pid = nix::unistd::Pid::from_raw(*w);
        if nix::sys::signal::killpg(pid, sig).is_err() {
            let _ = nix::sys::signal::kill(pid, sig);
        }
    }
}

/// The host pid of the init (PID 1) of the box that `monitor` (a `kern`) watches.
pub(crate) fn box_init(monitor: u32) -> Option<i32> {
    init_in(&parent_map(), monitor)
}

/// The box's init: a descendant of its monitor (monitor -> (helpers) -> init), found by the
/// parent pids in `/proc`.
fn init_in(parents: &[(i32, i32)], monitor: u32) -> Option<i32> {
    let children = |of: i32| {
        parents
            .iter()
            .filter(move |(_, pp)| *pp == of)
            .map(|(p, _)| *p)
    };
    let mut frontier = vec![monitor as i32];
    for _ in 0..4 {
        let mut next = Vec::new();
        for p in frontier {
            for c in children(p) {
                if ns_pid(c) == Some(1) {
                    return Some(c);
                }
                next.push(c);
            }
        }
        frontier = next;
    }
    None
}

/// pid -> parent pid of every process in /proc.
fn parent_map() -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The fields after the command name, which may itself hold spaces and parentheses.
            let rest = &stat[stat.rfind(')')? + 2..];
            let ppid = rest.split(' ').nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// A process's pid in its own (innermost) pid namespace.
fn ns_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    let ids: Vec<&str> = line.split_whitespace().skip(1).collect();
    // Only a process in a nested namespace can be a box's init.
    if ids.len() < 2 {
        return None;
    }
    ids.last()?.parse().ok()
}
