//! `kern ps`, `kern stop`, `kern pause` and `kern resume`: the resident boxes (`persist` Sandboxes) this user has, found
//! through `engine::monitor::resident`'s state files.

use kern_sandbox::engine::monitor::resident;

/// One line per live resident box: its name, PID 1, age, TTL left and workspace.
pub fn ps() -> Result<(), String> {
    let dir = resident::state_dir().map_err(|e| e.to_string())?;
    let now = resident::now_unix_ms();
    let secs = |ms: u64| format!("{}s", ms / 1000);
    println!(
        "{:<24} {:>8} {:>8} {:>9}  WORKSPACE",
        "NAME", "PID", "AGE", "TTL LEFT"
    );
    for s in resident::list(&dir) {
        println!(
            "{:<24} {:>8} {:>8} {:>9}  {}",
            s.name,
            s.pid1.pid,
            secs(now.saturating_sub(s.created_unix_ms)),
            secs(s.deadline_unix_ms.saturating_sub(now)),
            s.workspace.display()
        );
    }
    Ok(())
}

/// Stops the resident box `name`, waiting up to 30 s for it to go.
pub fn stop(name: &str) -> Result<(), String> {
    let dir = resident::state_dir().map_err(|e| e.to_string())?;
    let stopped = resident::stop(&dir, name, None, std::time::Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    if stopped {
        println!("stopped {name}");
    } else {
        println!("no live resident box named {name}");
    }
    Ok(())
}

/// Freezes (`frozen`) or thaws the resident box `name`.
pub fn pause(name: &str, frozen: bool) -> Result<(), String> {
    let dir = resident::state_dir().map_err(|e| e.to_string())?;
    let live = resident::find(&dir, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no live resident box named {name}"))?;
    let f = kern_sandbox::engine::monitor::freezer::Freezer::for_box(
        live.state.monitor.pid,
        live.state.pid1.pid,
    )
    .map_err(|e| format!("{name} can't be paused here: {e}"))?;
    if frozen {
        f.freeze().map_err(|e| format!("pause {name}: {e}"))?;
        println!("paused {name}");
    } else {
        f.thaw().map_err(|e| format!("resume {name}: {e}"))?;
        println!("resumed {name}");
    }
    Ok(())
}
