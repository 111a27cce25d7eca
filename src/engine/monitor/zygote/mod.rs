//! The zygote (issue 21): a python driver started once per Sandbox, in a box of its own, that
//! never runs a cell and forks each call's workload, which then enters that call's own
//! namespaces, mounts, cgroup and posture before any code of the call runs. A call then pays a
//! fork and the namespaces, not an interpreter's start and the driver's import.
//!
//! The zygote is a fork server's template: the messages on a call's socket are
//! `shared::protocol::fork`'s and every step a fork takes is a plan (`engine::plan`), so
//! another template that never ran untrusted code (a runner of plans in another language)
//! would take the same calls here.
//!
//! Who does what, for one call (`runCode`, python). Steps 1–4 happen before the call, while
//! the kern that will run it waits as a spare (so the fork, the cgroup move and the box's setup
//! are off the call's path); step 5 is the call.
//!
//! 1. The addon makes a socketpair, sends one end to the zygote over its channel (SCM_RIGHTS)
//!    and starts a spare kern with the other (`launch::Kern::spawn_zygote`), with the caps and
//!    what the box is made from (`engine::plan::Inputs`: the Sandbox's scratch mounts and hostname).
//! 2. kern moves into the call's cgroup as any spare does. The zygote (Z) forks C, which sends
//!    its credentials on the socket (SCM_CREDENTIALS: the kernel gives kern C's host pid); kern
//!    moves C into the call's cgroup (as a fresh box is born in it) and answers with the three
//!    plans (`engine::plan`) and the box's stdout and stderr (SCM_RIGHTS) (`call::arrange`).
//! 3. C runs the `call` plan (a user namespace of its own, then mount, PID, network, IPC, UTS
//!    and cgroup namespaces) and forks P, PID 1 of the call's PID namespace. P sends its
//!    credentials (kern opens a pidfd on it: its end is the box's end, and a SIGKILL to it ends
//!    every process of the call), runs the `pid1` plan (`plan::pid1`'s steps, as a fresh box's
//!    PID 1: a fresh `/proc`, masked, fresh scratch mounts, hostname, loopback), forks W, and from then on only reaps, and
//!    reports W's end in `Pid1Msg` lines as a fresh box's PID 1 does. C waits for P and
//!    sends P's status.
//! 4. W runs the `workload` plan (the fresh box's `init::exec_workload` posture: session,
//!    keyring, rlimits, capabilities, no_new_privs, Landlock, the set-id filter), says it is
//!    ready, and waits for the call.
//! 5. The call's spec reaches the spare kern, which sends W the call's channel (`call::run`). W
//!    closes every fd but its stdio and the channel, and goes on as the driver it was forked
//!    from: it reads the cell, runs it, and exits. kern watches P to its end (or kills it at the
//!    deadline, or when the caller goes) and concludes as for a fresh box. A spare whose call
//!    never comes (the Sandbox closed) kills its box unused.
//!
//! What holds the calls apart: each W has its own user, mount, PID, network, IPC, UTS and cgroup
//! namespaces and cgroup; its `/proc` shows its own PID namespace only, so neither Z nor another
//! call is visible or signalable; Z's memory is copied on write, never shared writable; every
//! descriptor of Z's is closed before the cell; Z never runs a cell, so no call's state is in it.
//! Python reseeds `random` at fork (`os.register_at_fork` in the random module), `os.urandom`,
//! `secrets` and `uuid.uuid4` read the kernel's generator at each call, and OpenSSL reseeds on a
//! pid change.
//!
//! What calls of one zygote share, being forks of one process without an exec: the string hash
//! secret (`PYTHONHASHSEED`'s), fixed at interpreter start (a call may learn it, and with it
//! predict set iteration order in a later call of the same Sandbox), and the memory layout and
//! AT_RANDOM (the stack canary, the pointer guard): a call learns the zygote's and its PID 1's,
//! which parse nothing a call sends. PID 1's memory belongs to the zygote box's user namespace,
//! whose root is the call's uid: the call can list `/proc/1/fd` and write PID 1's
//! `oom_score_adj`, which a fresh box refuses; that reaches only its own call.
//!
//! The zygote never runs anything a box could have written (`lang/zygote.py`, `session::zygote`):
//! its python starts outside the workspace, with no path of the caller's or of a box in its
//! environment, only read-only directories on `sys.path`, and refuses to serve if a module it
//! loaded came from a writable mount; what a fresh box's python takes from those places each call
//! takes in its own box, after its posture. So its box may be weaker than a call's where no call
//! reaches it: it has no Landlock domain (a domain refuses the mounts its forks make), keeps
//! CAP_SETFCAP and admits `MAX_CALLS` user namespaces (each fork makes one, whose workload admits
//! none: P sets the limit to 0 in it). Its `/proc` is masked as a call's; the kernel mounts a
//! call's own `/proc` only where one is fully visible, so it keeps one more, unmasked, under a
//! directory of mode 000 on its read-only root (`mounts::unmasked_proc_out_of_reach`), which
//! neither it nor a call's workload can enter. None of it is a call's to use: a call's processes are
//! in their own user, PID and mount namespaces, under a `/proc` of their own and on top of the
//! zygote's mounts, which are locked under them; the zygote and a call's C and P run only our
//! code and the plans (`attack/zygote.test.js` plants modules, bytecode, .pth files and a
//! `python3` in a workspace before `open()`, and points `env` at them). Every call lives in the
//! zygote box's PID namespace: if that box ends, the running calls end too.

pub mod call;

/// The user namespaces a zygote's box admits (`/proc/sys/user/max_user_namespaces` in it): one
/// per call running at once, each of which admits none.
pub const MAX_CALLS: u32 = 4096;
