//! The seccomp filter every workload runs under, whatever its profile: no set-id mode bit can
//! be set from a box.
//!
//! A file the box writes in the workspace or a `"rw"` mount is a file on the host. Through the
//! idmapped workspace it is owned by the workspace's owner (root, when kern runs as root), so a
//! box that could `chmod u+s` one would leave a set-uid program on the host for any local account
//! to run, and it would be live while the call runs, before any sweep after it. So the mode
//! arguments are checked where the bits are set, and a mode with `S_ISUID`/`S_ISGID` answers
//! `EPERM`:
//!
//! * `chmod`, `fchmod`, `fchmodat`, `fchmodat2`: the mode;
//! * `open`, `openat`, `creat` with `O_CREAT` or `O_TMPFILE`, `mkdir`, `mkdirat`, `mknod`,
//!   `mknodat` (a regular file can be made with `mknod`): the mode they create with;
//! * `openat2` (its mode sits in a struct the filter cannot read) and `io_uring_setup` (its
//!   `OPENAT` requests never pass a filter) answer `ENOSYS`, so libc and libuv fall back to the
//!   calls above, as on an older kernel.
//!
//! Written by hand, about 60 instructions, because `seccompiler` builds a program for one
//! architecture and kills every other: this one must also check 32-bit `int 0x80` calls (i386
//! numbers, which x86_64 kernels run) and x32 ones (`0x4000_0000 | nr`) the same way, and let
//! everything else through untouched. The untrusted profile's filters stack on top of it.
//! Measured here (`npm run bench:syscalls`, in a box): `chmod` 755 -> 803 ns, `getppid` 167 ->
//! 170 ns; per box within noise (BENCHMARKS.md).

use serde::{Deserialize, Serialize};

/// `S_ISUID | S_ISGID`.
const SETID: u32 = 0o6000;
/// `O_CREAT | __O_TMPFILE`: the flags under which `open`'s mode argument is used.
const CREATING: u32 = 0o100 | 0o20_000_000;
/// x32 syscalls come with this bit on the x86_64 architecture.
const X32_BIT: u32 = 0x4000_0000;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;

/// Where the mode sits in a syscall's arguments, and which argument holds `open`'s flags.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// The mode is always used (`chmod`, `mkdir`, `mknod`, `creat`…).
    Mode(u32),
    /// `open`/`openat`: the mode (second) counts only when the flags (first) create.
    Creating(u32, u32),
    /// Answer ENOSYS.
    Missing,
}

/// (syscall number, shape) for one architecture.
type Table = &'static [(u32, Shape)];

#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = AUDIT_ARCH_X86_64;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = AUDIT_ARCH_AARCH64;

#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const NATIVE: Table = &[
    (libc::SYS_chmod as u32, Shape::Mode(1)),
    (libc::SYS_fchmod as u32, Shape::Mode(1)),
    (libc::SYS_fchmodat as u32, Shape::Mode(2)),
    (libc::SYS_fchmodat2 as u32, Shape::Mode(2)),
    (libc::SYS_creat as u32, Shape::Mode(1)),
    (libc::SYS_open as u32, Shape::Creating(1, 2)),
    (libc::SYS_openat as u32, Shape::Creating(2, 3)),
    (libc::SYS_mkdir as u32, Shape::Mode(1)),
    (libc::SYS_mkdirat as u32, Shape::Mode(2)),
    (libc::SYS_mknod as u32, Shape::Mode(1)),
    (libc::SYS_mknodat as u32, Shape::Mode(2)),
    (libc::SYS_openat2 as u32, Shape::Missing),
    (libc::SYS_io_uring_setup as u32, Shape::Missing),
];

#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
const NATIVE: Table = &[
    (libc::SYS_fchmod as u32, Shape::Mode(1)),
    (libc::SYS_fchmodat as u32, Shape::Mode(2)),
    (libc::SYS_fchmodat2 as u32, Shape::Mode(2)),
    (libc::SYS_openat as u32, Shape::Creating(2, 3)),
    (libc::SYS_mkdirat as u32, Shape::Mode(2)),
    (libc::SYS_mknodat as u32, Shape::Mode(2)),
    (libc::SYS_openat2 as u32, Shape::Missing),
    (libc::SYS_io_uring_setup as u32, Shape::Missing),
];

/// i386 numbers (arch/x86/entry/syscalls/syscall_32.tbl), for `int 0x80` on an x86_64 kernel.
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const COMPAT: Option<(u32, Table)> = Some((AUDIT_ARCH_I386, &[
    (15, Shape::Mode(1)),          // chmod
    (94, Shape::Mode(1)),          // fchmod
    (306, Shape::Mode(2)),         // fchmodat
    (452, Shape::Mode(2)),         // fchmodat2
    (8, Shape::Mode(1)),           // creat
    (5, Shape::Creating(1, 2)),    // open
    (295, Shape::Creating(2, 3)),  // openat
    (39, Shape::Mode(1)),          // mkdir
    (296, Shape::Mode(2)),         // mkdirat
    (14, Shape::Mode(1)),          // mknod
    (297, Shape::Mode(2)),         // mknodat
    (437, Shape::Missing),         // openat2
    (425, Shape::Missing),         // io_uring_setup
]));
/// 32-bit ARM tasks on arm64 are not checked here, so they are killed (below).
#[cfg(target_arch = "aarch64")]
const COMPAT: Option<(u32, Table)> = None;

/// The program, packed as `engine::boxside::seccomp::Programs` packs them (plain data in the spec).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Program(pub Vec<u64>);

// Classic BPF, as linux/filter.h spells it.
const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// The low 32 bits of argument `i` (little-endian; the kernel reads modes and flags as 32 bits).
fn off_arg(i: u32) -> u32 {
    16 + 8 * i
}

/// Where a jump goes: the next instruction, or a label resolved when the program is done.
#[derive(Clone, Copy)]
enum To {
    Next,
    L(usize),
}

enum Ins {
    Stmt(u16, u32),
    Jump(u16, u32, To, To),
}

#[derive(Default)]
struct Asm {
    code: Vec<Ins>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn here(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }
    fn stmt(&mut self, code: u16, k: u32) {
        self.code.push(Ins::Stmt(code, k));
    }
    fn jump(&mut self, code: u16, k: u32, t: To, f: To) {
        self.code.push(Ins::Jump(code, k, t, f));
    }
    /// Resolves the labels (forward only, as classic BPF jumps are; the program is short enough
    /// that every offset fits in a byte, which the tests check by running it).
    fn finish(self) -> Vec<u64> {
        let labels = self.labels;
        let offset = |at: usize, to: To| -> u8 {
            match to {
                To::Next => 0,
                To::L(l) => {
                    let target = labels[l].unwrap_or(at + 1);
                    u8::try_from(target.saturating_sub(at + 1)).unwrap_or(u8::MAX)
                }
            }
        };
        self.code
            .iter()
            .enumerate()
            .map(|(at, ins)| match *ins {
                Ins::Stmt(code, k) => (u64::from(code) << 48) | u64::from(k),
                Ins::Jump(code, k, t, f) => {
                    (u64::from(code) << 48)
                        | (u64::from(offset(at, t)) << 40)
                        | (u64::from(offset(at, f)) << 32)
                        | u64::from(k)
                }
            })
            .collect()
    }
}

/// One architecture's dispatch: the syscall number, then its shape's check.
fn arch_block(a: &mut Asm, table: Table, mask_x32: bool, allow: usize, deny: usize) {
    a.stmt(LD_W_ABS, OFF_NR);
    if mask_x32 {
        a.stmt(ALU_AND_K, !X32_BIT);
    }
    let checks: Vec<usize> = table.iter().map(|_| a.label()).collect();
    for ((nr, _), l) in table.iter().zip(&checks) {
        a.jump(JEQ_K, *nr, To::L(*l), To::Next);
    }
    a.stmt(RET_K, libc::SECCOMP_RET_ALLOW);
    for ((_, shape), l) in table.iter().zip(&checks) {
        a.here(*l);
        match *shape {
            Shape::Missing => a.stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
            Shape::Mode(m) => {
                a.stmt(LD_W_ABS, off_arg(m));
                a.jump(JSET_K, SETID, To::L(deny), To::L(allow));
            }
            Shape::Creating(f, m) => {
                a.stmt(LD_W_ABS, off_arg(f));
                a.jump(JSET_K, CREATING, To::Next, To::L(allow));
                a.stmt(LD_W_ABS, off_arg(m));
                a.jump(JSET_K, SETID, To::L(deny), To::L(allow));
            }
        }
    }
}

/// Builds the program.
pub fn program() -> Program {
    let mut a = Asm::default();
    let (native, compat, kill) = (a.label(), a.label(), a.label());
    let (allow, deny) = (a.label(), a.label());
    a.stmt(LD_W_ABS, OFF_ARCH);
    a.jump(JEQ_K, NATIVE_ARCH, To::L(native), To::Next);
    match COMPAT {
        Some((arch, _)) => a.jump(JEQ_K, arch, To::L(compat), To::L(kill)),
        None => a.jump(JEQ_K, 0, To::L(kill), To::L(kill)),
    }
    a.here(native);
    arch_block(
        &mut a,
        NATIVE,
        NATIVE_ARCH == AUDIT_ARCH_X86_64,
        allow,
        deny,
    );
    a.here(compat);
    if let Some((_, table)) = COMPAT {
        arch_block(&mut a, table, false, allow, deny);
    }
    // An architecture this filter can't read is one it can't vouch for.
    a.here(kill);
    a.stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS);
    a.here(deny);
    a.stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    a.here(allow);
    a.stmt(RET_K, libc::SECCOMP_RET_ALLOW);
    Program(a.finish())
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Runs the program on one syscall as the kernel would (the few opcodes it uses).
    fn run(p: &Program, arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let prog = crate::engine::boxside::seccomp::unpack(&p.0);
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    let o = i.k as usize;
                    acc = u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
                }
                ALU_AND_K => acc &= i.k,
                JEQ_K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
                JSET_K => pc += usize::from(if acc & i.k != 0 { i.jt } else { i.jf }),
                RET_K => return i.k,
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

    #[test]
    fn setid_modes_are_refused_on_every_abi() {
        let p = program();
        assert!(p.0.len() < 200);
        let x64 = AUDIT_ARCH_X86_64;
        let chmod = libc::SYS_chmod as u32;
        assert_eq!(run(&p, x64, chmod, [0, 0o4755, 0, 0, 0, 0]), EPERM);
        assert_eq!(run(&p, x64, chmod, [0, 0o2755, 0, 0, 0, 0]), EPERM);
        assert_eq!(run(&p, x64, chmod, [0, 0o1777, 0, 0, 0, 0]), ALLOW);
        // High bits of a 64-bit register are not the mode: the kernel reads an umode_t.
        assert_eq!(run(&p, x64, chmod, [0, 0o755 | 1 << 40, 0, 0, 0, 0]), ALLOW);
        assert_eq!(
            run(&p, x64, X32_BIT | chmod, [0, 0o4755, 0, 0, 0, 0]),
            EPERM
        );
        let openat = libc::SYS_openat as u32;
        let creat_flags = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
        assert_eq!(
            run(&p, x64, openat, [0, 0, creat_flags, 0o4755, 0, 0]),
            EPERM
        );
        assert_eq!(
            run(&p, x64, openat, [0, 0, creat_flags, 0o644, 0, 0]),
            ALLOW
        );
        // Without O_CREAT the mode argument is whatever was in the register.
        assert_eq!(run(&p, x64, openat, [0, 0, 0, 0o4755, 0, 0]), ALLOW);
        let tmpfile = libc::O_TMPFILE as u64 | libc::O_RDWR as u64;
        assert_eq!(run(&p, x64, openat, [0, 0, tmpfile, 0o6755, 0, 0]), EPERM);
        let mknod = libc::SYS_mknodat as u32;
        let reg = u64::from(libc::S_IFREG);
        assert_eq!(run(&p, x64, mknod, [0, 0, reg | 0o4755, 0, 0, 0]), EPERM);
        assert_eq!(run(&p, x64, libc::SYS_openat2 as u32, [0; 6]), ENOSYS);
        assert_eq!(
            run(&p, x64, libc::SYS_io_uring_setup as u32, [0; 6]),
            ENOSYS
        );
        assert_eq!(
            run(&p, x64, libc::SYS_write as u32, [1, 0, 0o4755, 0, 0, 0]),
            ALLOW
        );
        // int 0x80: i386 numbers.
        let i386 = AUDIT_ARCH_I386;
        assert_eq!(run(&p, i386, 15, [0, 0o4755, 0, 0, 0, 0]), EPERM);
        assert_eq!(run(&p, i386, 15, [0, 0o755, 0, 0, 0, 0]), ALLOW);
        assert_eq!(run(&p, i386, 5, [0, 0o100, 0o4700, 0, 0, 0]), EPERM);
        assert_eq!(run(&p, i386, 306, [0, 0, 0o6000, 0, 0, 0]), EPERM);
        // i386 `chmod` is 15 but x86_64's 15 is rt_sigreturn: never confused.
        assert_eq!(run(&p, x64, 15, [0, 0o4755, 0, 0, 0, 0]), ALLOW);
        assert_eq!(
            run(&p, 0x1234, chmod, [0; 6]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }
}
