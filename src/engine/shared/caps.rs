//! Capability names, for `capDrop`: what a box's workload keeps is every capability but the ones
//! dropped. Capabilities only ever count inside the box's user namespace (box root is never host
//! root), and nested user namespaces stay refused whatever is kept.

/// Linux's capabilities by number (capability.h), without the `CAP_` prefix.
pub const NAMES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// CAP_SYS_ADMIN's number (its place in `NAMES`), the capability every mount operation needs.
pub const SYS_ADMIN: u32 = 21;

/// The number of a capability name, `CAP_` prefix optional, any case.
pub fn number(name: &str) -> Option<u32> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    NAMES.iter().position(|n| *n == bare).map(|i| i as u32)
}

/// CAP_SETFCAP: setting file capabilities, which the host honours on files it can run.
pub const SETFCAP: u32 = 31;

/// What stays after dropping `drop` (names, or "ALL"); an unknown name is the error.
pub fn kept_after_dropping(drop: &[String]) -> Result<Vec<u32>, String> {
    if drop.iter().any(|d| d.eq_ignore_ascii_case("ALL")) {
        return Ok(Vec::new());
    }
    let mut dropped = Vec::new();
    for d in drop {
        dropped.push(number(d).ok_or_else(|| {
            format!("{d:?} is not a Linux capability; use names such as \"NET_RAW\" or \"CAP_SYS_ADMIN\", or \"ALL\"")
        })?);
    }
    Ok((0..NAMES.len() as u32)
        .filter(|c| !dropped.contains(c))
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sys_admin_is_numbered_as_the_kernel_does() {
        assert_eq!(super::number("SYS_ADMIN"), Some(super::SYS_ADMIN));
    }

    use super::*;

    #[test]
    fn names_and_lists() {
        assert_eq!(number("NET_BIND_SERVICE"), Some(10));
        assert_eq!(number("cap_sys_admin"), Some(21));
        assert_eq!(number("CAP_CHECKPOINT_RESTORE"), Some(40));
        assert_eq!(number("NET_BIND"), None);
        assert_eq!(
            kept_after_dropping(&["ALL".into()]).unwrap(),
            Vec::<u32>::new()
        );
        assert_eq!(kept_after_dropping(&[]).unwrap().len(), NAMES.len());
        let kept = kept_after_dropping(&["NET_RAW".into(), "cap_sys_admin".into()]).unwrap();
        assert!(!kept.contains(&13) && !kept.contains(&21) && kept.contains(&10));
        assert!(kept_after_dropping(&["NET_RAWR".into()])
            .unwrap_err()
            .contains("NET_RAWR"));
    }
}
