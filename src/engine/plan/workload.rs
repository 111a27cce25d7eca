//! The workload's posture: what the process that runs untrusted code takes on before its exec
//! (a fresh box's, `init::exec_workload`) or before its cell (a zygote's fork, `lang/zygote.py`).
//!
//! In four phases, in this order, because a fresh box's workload does something of its own
//! between them (its terminal after the new session, its descriptors before the user switch,
//! its AppArmor profile and signal dispositions before the filters); a zygote's fork runs them
//! back to back (`Workload::into_ops`).

use super::{bytes, fprog, int, saving, sys, tolerating, Arg, Op};
use crate::engine::handoff::Fallback;
use crate::engine::seccomp::Programs;
use crate::engine::spec::BoxSpec;

/// What a workload's posture is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Posture {
    /// Join a new session keyring in the plan. A fresh box's PID 1 joins one for the whole box
    /// and a resident box's call joins its own with a retry on EDQUOT (`sys::new_session_keyring`:
    /// a retry is not a plan step), so only a zygote's fork joins one here.
    pub keyring: bool,
    /// RLIMIT_MSGQUEUE to the box's budget (`mq`). Not in a zygote's own box: since Linux 5.14
    /// the limit is counted per user namespace and checked again at each parent namespace
    /// against its creator's limit, so the zygote's would be one budget for every call it forks;
    /// each call's workload takes it in its own namespace.
    pub msgqueue: bool,
    /// The caps kern could not put in a cgroup, as rlimits.
    pub fallback: Fallback,
    /// The capabilities the workload keeps (`capDrop`), in its own user namespace.
    pub keep_caps: Vec<u32>,
    /// The image's USER, if the workload becomes it.
    pub user: Option<Switch>,
    /// A Landlock domain of its own (`landlock`). Not a zygote's own box: a domain refuses
    /// mounts, and its forks build each call's mount tree.
    pub landlock: bool,
    /// The `untrusted` seccomp profile: an allowlist, then a notify filter whose listener the
    /// plan saves as `LISTENER` for the box's PID 1.
    pub untrusted: Option<Programs>,
}

/// A switch to the image's USER.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub uid: u32,
    pub gid: u32,
    /// The supplementary groups to set, or None where the workload already is that uid (a
    /// single mapped id: setgroups is denied there).
    pub groups: Option<Vec<u32>>,
}

/// The name the untrusted profile's listener fd is saved under.
pub const LISTENER: &str = "listener";

impl Posture {
    /// A box's workload, from its spec. `uid_now`: the uid the workload runs as when the plan
    /// starts (with a single mapped id it already is the image's USER).
    pub fn of_box(spec: &BoxSpec, fallback: &Fallback, uid_now: u32) -> Self {
        Self {
            keyring: false,
            msgqueue: !spec.serves_zygote,
            // Not the pids fallback for a zygote, for the reason `msgqueue` gives: each call's
            // workload takes the cap in its own namespace.
            fallback: Fallback {
                nproc: fallback.nproc.filter(|_| !spec.serves_zygote),
                ..fallback.clone()
            },
            keep_caps: spec.keep_caps.clone(),
            user: spec.user.as_ref().map(|u| Switch {
                uid: u.uid,
                gid: u.gid,
                groups: (uid_now != u.uid).then(|| u.groups.clone()),
            }),
            landlock: !spec.serves_zygote,
            untrusted: spec.seccomp.clone(),
        }
    }

    /// A zygote's fork's workload: root of its own user namespace, no capability kept.
    pub fn of_call(fallback: &Fallback) -> Self {
        Self {
            keyring: true,
            msgqueue: true,
            fallback: fallback.clone(),
            keep_caps: Vec::new(),
            user: None,
            landlock: true,
            untrusted: None,
        }
    }
}

/// The workload's plan, in its four phases.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// A new session (no controlling terminal of the host: TIOCSTI), and the keyring.
    pub session: Vec<Op>,
    /// The rlimits.
    pub limits: Vec<Op>,
    /// The bounding set first (that needs CAP_SETPCAP, which a switch to another uid loses),
    /// then the image's USER, then no_new_privs and whatever capabilities remain.
    pub privileges: Vec<Op>,
    /// Last, from here on the process is filtered: the Landlock domain, the set-id filter, the
    /// untrusted profile.
    pub filters: Vec<Op>,
}

impl Workload {
    pub fn of(p: &Posture) -> Self {
        Self {
            session: session(p),
            limits: limits(p),
            privileges: privileges(p),
            filters: filters(p),
        }
    }

    /// The four phases, back to back.
    pub fn into_ops(self) -> Vec<Op> {
        [self.session, self.limits, self.privileges, self.filters].concat()
    }
}

fn session(p: &Posture) -> Vec<Op> {
    let mut ops = vec![sys("setsid", libc::SYS_setsid, vec![])];
    if p.keyring {
        // The caller's session keyring is inherited through fork and would stay readable.
        ops.push(tolerating(
            sys(
                "join a new session keyring",
                libc::SYS_keyctl,
                vec![int(1), Arg::Null],
            ),
            &[libc::ENOSYS],
        ));
    }
    ops
}

fn limits(p: &Posture) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut rlimit = |what: &str, res: u32, v: u64| {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&v.to_ne_bytes());
        b[8..].copy_from_slice(&v.to_ne_bytes());
        ops.push(sys(
            what,
            libc::SYS_prlimit64,
            vec![int(0), int(res), bytes(&b), Arg::Null],
        ));
    };
    rlimit("no core dumps", libc::RLIMIT_CORE, 0);
    if p.msgqueue {
        rlimit(
            "the box's POSIX message queue budget",
            libc::RLIMIT_MSGQUEUE,
            crate::engine::mq::box_budget(),
        );
    }
    if let Some(b) = p.fallback.data_bytes {
        rlimit("the memory cap as RLIMIT_DATA", libc::RLIMIT_DATA, b);
    }
    if let Some(n) = p.fallback.nproc {
        rlimit("the process cap as RLIMIT_NPROC", libc::RLIMIT_NPROC, n);
    }
    ops
}

fn prctl(what: impl Into<String>, args: [i64; 5]) -> Op {
    sys(
        what,
        libc::SYS_prctl,
        args.iter().map(|a| int(*a)).collect(),
    )
}

fn privileges(p: &Posture) -> Vec<Op> {
    let keep = &p.keep_caps;
    let mut ops = Vec::new();
    // EINVAL: past the kernel's last capability.
    for cap in (0..64).filter(|c| !keep.contains(c)) {
        ops.push(tolerating(
            sys(
                format!("drop capability {cap} from the bounding set"),
                libc::SYS_prctl,
                vec![int(libc::PR_CAPBSET_DROP), int(cap)],
            ),
            &[libc::EINVAL],
        ));
    }
    ops.push(prctl(
        "clear the ambient capabilities",
        [
            libc::PR_CAP_AMBIENT.into(),
            libc::PR_CAP_AMBIENT_CLEAR_ALL.into(),
            0,
            0,
            0,
        ],
    ));
    if let Some(u) = &p.user {
        // A switch away from uid 0 empties the permitted set unless told to keep it.
        if !keep.is_empty() {
            ops.push(prctl(
                "keep the capabilities across the switch of uid",
                [libc::PR_SET_KEEPCAPS.into(), 1, 0, 0, 0],
            ));
        }
        let who = format!("become uid {} gid {}", u.uid, u.gid);
        if let Some(groups) = &u.groups {
            let list: Vec<u8> = groups.iter().flat_map(|g| g.to_ne_bytes()).collect();
            ops.push(sys(
                format!("{who}: setgroups"),
                libc::SYS_setgroups,
                vec![int(groups.len() as i64), bytes(&list)],
            ));
        }
        let g = i64::from(u.gid);
        ops.push(sys(
            format!("{who}: setresgid"),
            libc::SYS_setresgid,
            vec![int(g), int(g), int(g)],
        ));
        let id = i64::from(u.uid);
        ops.push(sys(
            format!("{who}: setresuid"),
            libc::SYS_setresuid,
            vec![int(id), int(id), int(id)],
        ));
    }
    ops.push(prctl(
        "no_new_privs",
        [libc::PR_SET_NO_NEW_PRIVS.into(), 1, 0, 0, 0],
    ));
    // Effective, permitted and inheritable to exactly `keep` (the v3 layout: two words).
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&LINUX_CAPABILITY_VERSION_3.to_ne_bytes());
    let mut data = [[0u32; 3]; 2];
    for &c in keep.iter().filter(|c| **c < 64) {
        let (word, bit) = ((c / 32) as usize, 1u32 << (c % 32));
        for set in &mut data[word] {
            *set |= bit;
        }
    }
    let data: Vec<u8> = data
        .iter()
        .flatten()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let what = if keep.is_empty() {
        "empty every capability set"
    } else {
        "keep only the capabilities capDrop leaves"
    };
    ops.push(sys(
        what,
        libc::SYS_capset,
        vec![bytes(&header), bytes(&data)],
    ));
    // An account other than root carries capabilities across exec only in the ambient set;
    // box root gets the bounding set's, capped by no_new_privs at what it holds now.
    if p.user.as_ref().is_some_and(|u| u.uid != 0) {
        for &c in keep {
            ops.push(prctl(
                format!("keep capability {c} across exec (ambient)"),
                [
                    libc::PR_CAP_AMBIENT.into(),
                    libc::PR_CAP_AMBIENT_RAISE.into(),
                    c.into(),
                    0,
                    0,
                ],
            ));
        }
    }
    ops
}

fn filters(p: &Posture) -> Vec<Op> {
    let mut ops = Vec::new();
    if p.landlock {
        // A domain of its own that handles only MakeBlock and has no rule (`landlock`), where
        // the kernel has Landlock (the call's kern said so if it has none).
        const LANDLOCK_ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
        ops.push(tolerating(
            saving(
                sys(
                    "a Landlock ruleset",
                    libc::SYS_landlock_create_ruleset,
                    vec![
                        bytes(&LANDLOCK_ACCESS_FS_MAKE_BLOCK.to_ne_bytes()),
                        int(8),
                        int(0),
                    ],
                ),
                "landlock",
            ),
            &[libc::ENOSYS, libc::EOPNOTSUPP],
        ));
        // Skipped where the kernel made no ruleset (`Arg::Var`).
        ops.push(sys(
            "enter the Landlock domain",
            libc::SYS_landlock_restrict_self,
            vec![Arg::Var("landlock".into()), int(0)],
        ));
        ops.push(sys(
            "close the ruleset",
            libc::SYS_close,
            vec![Arg::Var("landlock".into())],
        ));
    }
    // Every workload: no set-id bit from a box, ever (see `setid`).
    let filter = |what: &str, program: &[u64], flags: u32| {
        sys(
            what,
            libc::SYS_seccomp,
            vec![
                int(libc::SECCOMP_SET_MODE_FILTER),
                int(flags),
                fprog(program),
            ],
        )
    };
    ops.push(filter(
        "enter the set-id seccomp filter",
        &crate::engine::setid::program().0,
        0,
    ));
    if let Some(u) = &p.untrusted {
        ops.push(filter(
            "enter the untrusted seccomp profile: the allowlist",
            &u.allow,
            0,
        ));
        ops.push(saving(
            filter(
                "enter the untrusted seccomp profile: the notify filter",
                &u.notify,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32,
            ),
            LISTENER,
        ));
    }
    ops
}
