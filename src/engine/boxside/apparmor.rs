//! `apparmor`: the workload enters a named, pre-loaded AppArmor profile when it is exec'd. It
//! fails closed: a host without AppArmor, or without that profile loaded, gets a
//! `startup_failed` box, never a box that runs unconfined.

use std::io;

const ENABLED: &str = "/sys/module/apparmor/parameters/enabled";
const PROFILES: &str = "/sys/kernel/security/apparmor/profiles";

/// Checked by kern on the host before the box exists: AppArmor is on and `name` is loaded.
pub fn check_loaded(name: &str) -> Result<(), String> {
    let closed = "the apparmor option fails closed: load the profile (apparmor_parser -r FILE) or leave the option out";
    match std::fs::read_to_string(ENABLED) {
        Ok(s) if s.trim() == "Y" => {}
        _ => {
            return Err(format!(
                "AppArmor profile {name:?} requested, but AppArmor is not enabled on this host ({ENABLED} does not say Y); {closed}"
            ))
        }
    }
    let profiles = std::fs::read_to_string(PROFILES).map_err(|e| {
        format!("AppArmor profile {name:?} requested, but the loaded profiles can't be read ({PROFILES}: {e}; is securityfs mounted?); {closed}")
    })?;
    // Lines are "<name> (<mode>)"; a name may itself contain spaces.
    let loaded = profiles
        .lines()
        .any(|l| l.rsplit_once(" (").is_some_and(|(n, _)| n == name));
    if loaded {
        Ok(())
    } else {
        Err(format!(
            "AppArmor profile {name:?} is not loaded on this host; {closed}"
        ))
    }
}

/// In the box, just before exec: the next exec enters `name`. The newer per-LSM attribute
/// first (Linux 5.8+, stacking-safe), then the legacy one.
pub fn exec_into(name: &str) -> io::Result<()> {
    let line = format!("exec {name}");
    std::fs::write("/proc/self/attr/apparmor/exec", &line)
        .or_else(|_| std::fs::write("/proc/self/attr/exec", &line))
}

/// What to tell a user whose unprivileged user namespaces are refused: Ubuntu 23.10+ restricts
/// them through AppArmor unless a profile allows them for the program.
pub fn userns_restriction_hint() -> Option<String> {
    let v =
        std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").ok()?;
    (v.trim() == "1").then(|| {
        "this host restricts unprivileged user namespaces through AppArmor (kernel.apparmor_restrict_unprivileged_userns = 1, as on Ubuntu 23.10+): load a profile for the kern binary with the `userns,` rule (see the README), or set the sysctl to 0".to_string()
    })
}
