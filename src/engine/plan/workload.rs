//! The workload's posture: what the process that runs untrusted code takes on before its exec
//! (a fresh box's, `init::exec_workload`) or before its cell (a zygote's fork, `lang/zygote.py`).
//!
//! In four phases, in this order, because a fresh box's workload does something of its own
//! between them (its terminal after the new session, its descriptors before the user switch,
//! its AppArmor profile and signal dispositions before the filters); a zygote's fork runs them
//! back to back (`Workload::into_ops`).

use super::{bytes, fprog, int, s, saving, sys, tolerating, Arg, Op};
use crate::engine::boxside::seccomp::Programs;
use crate::engine::shared::handoff::Fallback;
use crate::engine::shared::spec::BoxSpec;

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
            crate::engine::shared::mq::box_budget(),
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
        // A domain of its own (`landlock`), where the kernel has Landlock (the call's kern said
        // so if it has none). It handles MakeBlock, with no rule: denied, which a box can't do
        // anyway. And Refer, granted beneath `/`: a domain denies moving or linking a file to
        // another directory unless a rule grants Refer there (the kernel's rule for every
        // domain, handled or not), which turned each such rename(2) in a box into EXDEV. A
        // kernel without Refer (Landlock ABI 1, before 5.19) refuses the ruleset (EINVAL): no
        // domain there, as without Landlock, rather than one that breaks renames.
        const LANDLOCK_ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
        const LANDLOCK_ACCESS_FS_REFER: u64 = 1 << 13;
        const LANDLOCK_RULE_PATH_BENEATH: i64 = 1;
        ops.push(tolerating(
            saving(
                sys(
                    "a Landlock ruleset",
                    libc::SYS_landlock_create_ruleset,
                    vec![
                        bytes(
                            &(LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_REFER)
                                .to_ne_bytes(),
                        ),
                        int(8),
                        int(0),
                    ],
                ),
                "landlock",
            ),
            &[libc::ENOSYS, libc::EOPNOTSUPP, libc::EINVAL],
        ));
        ops.push(saving(
            sys(
                "open / for the Landlock rule",
                libc::SYS_openat,
                vec![
                    int(libc::AT_FDCWD),
                    s("/"),
                    int(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC),
                    int(0),
                ],
            ),
            "landlock-root",
        ));
        // Skipped where the kernel made no ruleset (`Arg::Var`).
        ops.push(sys(
            "grant Refer beneath /",
            libc::SYS_landlock_add_rule,
            vec![
                Arg::Var("landlock".into()),
                int(LANDLOCK_RULE_PATH_BENEATH),
                Arg::Beneath {
                    allowed: LANDLOCK_ACCESS_FS_REFER,
                    fd: "landlock-root".into(),
                },
                int(0),
            ],
        ));
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
        ops.push(sys(
            "close /",
            libc::SYS_close,
            vec![Arg::Var("landlock-root".into())],
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
        &crate::engine::boxside::setid::program().0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::shared::spec::BoxUser;

    fn spec() -> BoxSpec {
        BoxSpec::for_tests()
    }

    fn of(spec: &BoxSpec, fallback: &Fallback, uid_now: u32) -> Workload {
        Workload::of(&Posture::of_box(spec, fallback, uid_now))
    }

    fn int_at(op: &Op, i: usize) -> Option<i64> {
        match op {
            Op::Sys { args, .. } => match args.get(i) {
                Some(Arg::Int(v)) => Some(*v),
                _ => None,
            },
            Op::Write { .. } => None,
        }
    }

    fn arg(op: &Op, i: usize) -> Option<&Arg> {
        match op {
            Op::Sys { args, .. } => args.get(i),
            Op::Write { .. } => None,
        }
    }

    fn position(ops: &[Op], f: impl Fn(&Op) -> bool) -> usize {
        ops.iter().position(f).expect("the step is in the plan")
    }

    fn is_prctl(op: &Op, option: libc::c_int) -> bool {
        op.nr() == Some(libc::SYS_prctl) && int_at(op, 0) == Some(option.into())
    }

    /// The capabilities the plan's capset leaves in (effective, permitted, inheritable).
    fn capset_keeps(ops: &[Op]) -> [u64; 3] {
        let at = position(ops, |o| o.nr() == Some(libc::SYS_capset));
        let Some(Arg::Bytes(data)) = arg(&ops[at], 1) else {
            panic!("capset data is a buffer")
        };
        assert_eq!(data.len(), 24, "two v3 words of three sets");
        let word = |i: usize| u32::from_ne_bytes(data[i * 4..i * 4 + 4].try_into().expect("4"));
        [0, 1, 2].map(|set| u64::from(word(set)) | (u64::from(word(3 + set)) << 32))
    }

    fn dropped_from_bounding_set(ops: &[Op]) -> Vec<i64> {
        ops.iter()
            .filter(|o| is_prctl(o, libc::PR_CAPBSET_DROP))
            .filter_map(|o| int_at(o, 1))
            .collect()
    }

    #[test]
    fn the_default_box_keeps_no_capability_and_ends_in_the_set_id_filter() {
        let w = of(&spec(), &Fallback::default(), 0);
        let all: Vec<i64> = (0..64).collect();
        assert_eq!(dropped_from_bounding_set(&w.privileges), all);
        assert_eq!(capset_keeps(&w.privileges), [0, 0, 0]);
        assert!(w
            .privileges
            .iter()
            .any(|o| is_prctl(o, libc::PR_CAP_AMBIENT)
                && int_at(o, 1) == Some(libc::PR_CAP_AMBIENT_CLEAR_ALL.into())));
        // No user switch, no ambient capability raised.
        assert!(!w.privileges.iter().any(|o| {
            [
                libc::SYS_setresuid,
                libc::SYS_setresgid,
                libc::SYS_setgroups,
            ]
            .contains(&o.nr().unwrap_or(-1))
                || (is_prctl(o, libc::PR_CAP_AMBIENT)
                    && int_at(o, 1) == Some(libc::PR_CAP_AMBIENT_RAISE.into()))
        }));
        let ops = w.clone().into_ops();
        let last = ops.last().expect("a plan");
        assert_eq!(last.nr(), Some(libc::SYS_seccomp));
        assert_eq!(last.what(), "enter the set-id seccomp filter");
        assert_eq!(
            arg(last, 2),
            Some(&super::super::fprog(
                &crate::engine::boxside::setid::program().0
            ))
        );
        // The filters phase holds every filter, and nothing else comes after no_new_privs but
        // the capability sets and the filters.
        let nnp = position(&ops, |o| is_prctl(o, libc::PR_SET_NO_NEW_PRIVS));
        let first_filter = position(&ops, |o| {
            [libc::SYS_seccomp, libc::SYS_landlock_restrict_self].contains(&o.nr().unwrap_or(-1))
        });
        assert!(nnp < first_filter, "no_new_privs before any filter");
        assert_eq!(w.session.len(), 1, "setsid only: PID 1 joined the keyring");
        assert_eq!(w.session[0].nr(), Some(libc::SYS_setsid));
    }

    #[test]
    fn the_landlock_domain_denies_make_block_grants_refer_and_is_best_effort() {
        let w = of(&spec(), &Fallback::default(), 0);
        let f = &w.filters;
        let create = position(f, |o| o.nr() == Some(libc::SYS_landlock_create_ruleset));
        let restrict = position(f, |o| o.nr() == Some(libc::SYS_landlock_restrict_self));
        let seccomp = position(f, |o| o.nr() == Some(libc::SYS_seccomp));
        assert!(create < restrict && restrict < seccomp);
        let Op::Sys {
            args,
            tolerate,
            save,
            ..
        } = &f[create]
        else {
            panic!("a syscall")
        };
        // handled_access_fs = MAKE_BLOCK | REFER, nothing else; a kernel without Refer
        // (EINVAL) gets no domain.
        assert_eq!(
            args[0],
            Arg::Bytes(((1u64 << 11) | (1u64 << 13)).to_ne_bytes().to_vec())
        );
        assert_eq!(args[1], Arg::Int(8));
        assert_eq!(
            tolerate,
            &vec![libc::ENOSYS, libc::EOPNOTSUPP, libc::EINVAL]
        );
        assert_eq!(save.as_deref(), Some("landlock"));
        // One rule: Refer beneath /, before the domain is entered; MakeBlock stays denied.
        let rules: Vec<usize> = (0..f.len())
            .filter(|&i| f[i].nr() == Some(libc::SYS_landlock_add_rule))
            .collect();
        assert_eq!(rules.len(), 1);
        assert!(create < rules[0] && rules[0] < restrict);
        assert_eq!(
            arg(&f[rules[0]], 2),
            Some(&Arg::Beneath {
                allowed: 1 << 13,
                fd: "landlock-root".into()
            })
        );
        assert_eq!(arg(&f[restrict], 0), Some(&Arg::Var("landlock".into())));
        // A zygote's own box has none (its forks mount); each call's workload has its own.
        let zygote = BoxSpec {
            serves_zygote: true,
            ..spec()
        };
        assert!(!of(&zygote, &Fallback::default(), 0)
            .filters
            .iter()
            .any(|o| o.nr() == Some(libc::SYS_landlock_create_ruleset)));
        let call = Workload::of(&Posture::of_call(&Fallback::default()));
        assert!(call
            .filters
            .iter()
            .any(|o| o.nr() == Some(libc::SYS_landlock_create_ruleset)));
    }

    #[test]
    fn the_untrusted_profile_comes_last_and_saves_its_listener() {
        let programs = crate::engine::boxside::seccomp::untrusted()
            .expect("compiles")
            .clone();
        let s = BoxSpec {
            seccomp: Some(programs.clone()),
            ..spec()
        };
        let ops = of(&s, &Fallback::default(), 0).into_ops();
        let n = ops.len();
        let whats: Vec<&str> = ops[n - 3..].iter().map(Op::what).collect();
        assert_eq!(
            whats,
            [
                "enter the set-id seccomp filter",
                "enter the untrusted seccomp profile: the allowlist",
                "enter the untrusted seccomp profile: the notify filter",
            ]
        );
        assert_eq!(
            arg(&ops[n - 2], 2),
            Some(&super::super::fprog(&programs.allow))
        );
        assert_eq!(int_at(&ops[n - 2], 1), Some(0));
        assert_eq!(
            arg(&ops[n - 1], 2),
            Some(&super::super::fprog(&programs.notify))
        );
        assert_eq!(
            int_at(&ops[n - 1], 1),
            Some(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as i64)
        );
        assert!(matches!(&ops[n - 1], Op::Sys { save: Some(l), .. } if l == LISTENER));
    }

    #[test]
    fn rlimits_follow_the_fallback_and_a_zygote_box_leaves_the_per_namespace_ones() {
        let fallback = Fallback {
            data_bytes: Some(256 << 20),
            nproc: Some(64),
        };
        let limit = |ops: &[Op], res: u32| -> Option<u64> {
            let op = ops.iter().find(|o| int_at(o, 1) == Some(res.into()))?;
            let Some(Arg::Bytes(b)) = arg(op, 2) else {
                panic!("rlimit is a buffer")
            };
            let cur = u64::from_ne_bytes(b[..8].try_into().expect("8"));
            assert_eq!(&b[..8], &b[8..], "soft = hard");
            Some(cur)
        };
        let w = of(&spec(), &fallback, 0);
        assert!(w.limits.iter().all(|o| o.nr() == Some(libc::SYS_prlimit64)));
        assert_eq!(limit(&w.limits, libc::RLIMIT_CORE), Some(0));
        assert_eq!(
            limit(&w.limits, libc::RLIMIT_MSGQUEUE),
            Some(crate::engine::shared::mq::box_budget())
        );
        assert_eq!(limit(&w.limits, libc::RLIMIT_DATA), Some(256 << 20));
        assert_eq!(limit(&w.limits, libc::RLIMIT_NPROC), Some(64));
        let zygote = BoxSpec {
            serves_zygote: true,
            ..spec()
        };
        let z = of(&zygote, &fallback, 0);
        assert_eq!(limit(&z.limits, libc::RLIMIT_DATA), Some(256 << 20));
        assert_eq!(limit(&z.limits, libc::RLIMIT_NPROC), None);
        assert_eq!(limit(&z.limits, libc::RLIMIT_MSGQUEUE), None);
        let none = of(&spec(), &Fallback::default(), 0);
        assert_eq!(limit(&none.limits, libc::RLIMIT_DATA), None);
        assert_eq!(limit(&none.limits, libc::RLIMIT_NPROC), None);
    }

    #[test]
    fn a_user_with_kept_capabilities_switches_after_the_bounding_set_and_before_nnp() {
        const NET_BIND_SERVICE: u32 = 10;
        let s = BoxSpec {
            user: Some(BoxUser {
                uid: 1000,
                gid: 1001,
                groups: vec![1001, 27],
            }),
            keep_caps: vec![NET_BIND_SERVICE],
            ..spec()
        };
        let p = of(&s, &Fallback::default(), 0).privileges;
        let kept = i64::from(NET_BIND_SERVICE);
        assert!(!dropped_from_bounding_set(&p).contains(&kept));
        assert_eq!(dropped_from_bounding_set(&p).len(), 63);
        let last_drop = p
            .iter()
            .rposition(|o| is_prctl(o, libc::PR_CAPBSET_DROP))
            .expect("drops");
        let keepcaps = position(&p, |o| is_prctl(o, libc::PR_SET_KEEPCAPS));
        let groups = position(&p, |o| o.nr() == Some(libc::SYS_setgroups));
        let gid = position(&p, |o| o.nr() == Some(libc::SYS_setresgid));
        let uid = position(&p, |o| o.nr() == Some(libc::SYS_setresuid));
        let nnp = position(&p, |o| is_prctl(o, libc::PR_SET_NO_NEW_PRIVS));
        let capset = position(&p, |o| o.nr() == Some(libc::SYS_capset));
        let raise = position(&p, |o| {
            is_prctl(o, libc::PR_CAP_AMBIENT)
                && int_at(o, 1) == Some(libc::PR_CAP_AMBIENT_RAISE.into())
        });
        assert!(last_drop < keepcaps && keepcaps < groups && groups < gid && gid < uid);
        assert!(uid < nnp && nnp < capset && capset < raise);
        assert_eq!(int_at(&p[raise], 2), Some(kept));
        let bit = 1u64 << kept;
        assert_eq!(capset_keeps(&p), [bit, bit, bit]);
        assert_eq!(int_at(&p[uid], 0), Some(1000));
        assert_eq!(int_at(&p[gid], 0), Some(1001));
        assert_eq!(int_at(&p[groups], 0), Some(2));
        let list: Vec<u8> = [1001u32, 27].iter().flat_map(|g| g.to_ne_bytes()).collect();
        assert_eq!(arg(&p[groups], 1), Some(&Arg::Bytes(list)));
        // Already that uid (a single mapped id): no setgroups, which is denied there.
        let already = of(&s, &Fallback::default(), 1000).privileges;
        assert!(!already.iter().any(|o| o.nr() == Some(libc::SYS_setgroups)));
    }

    #[test]
    fn a_zygote_call_joins_its_own_keyring_and_runs_the_phases_back_to_back() {
        let w = Workload::of(&Posture::of_call(&Fallback::default()));
        assert_eq!(w.session.len(), 2);
        assert_eq!(w.session[1].nr(), Some(libc::SYS_keyctl));
        let ops = w.clone().into_ops();
        let phases = [w.session, w.limits, w.privileges, w.filters].concat();
        assert_eq!(ops, phases);
        assert_eq!(capset_keeps(&ops), [0, 0, 0]);
    }
}
