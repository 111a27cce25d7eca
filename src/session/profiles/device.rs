//! A `vgpio` device as written in kern.toml, resolved on the host to the character device it
//! names, and where it appears in the box.

use crate::engine::shared::spec::DeviceSpec;
use nix::sys::stat::{fstat, SFlag};
use std::path::Path;

/// Names the box's own `/dev` holds; a device may not appear at or under one of them.
const BOX_DEV: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout", "stderr", "ptmx",
    "pts", "shm",
];

/// Device and inode, widened (narrower types on some 32-bit targets).
#[allow(clippy::unnecessary_cast)]
fn ids(st: &nix::sys::stat::FileStat) -> (u64, u64, u64) {
    (st.st_dev as u64, st.st_ino as u64, st.st_rdev as u64)
}

/// Resolves one `vgpio` device path to the real node and checks it, or says why not.
pub(super) fn check_device(written: &str) -> std::result::Result<DeviceSpec, String> {
    let canon = std::fs::canonicalize(written).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "device {written:?} does not exist on the host; check the path (is the device \
                 attached and its driver loaded?)"
            )
        } else {
            format!(
                "device {written:?} cannot be resolved ({e}); check the path and its permissions"
            )
        }
    })?;
    let shown = if canon.as_os_str() == written {
        String::new()
    } else {
        format!(" (which resolves to {})", canon.display())
    };
    // Open what canonicalize named, with no symlink allowed: what we record is what we checked.
    let fd = crate::fsx::open_no_symlinks(&canon).map_err(|e| {
        format!("device {written:?}{shown} cannot be opened ({e}); keep it in place and try again")
    })?;
    let st = fstat(&fd).map_err(|e| format!("device {written:?}{shown}: fstat failed ({e})"))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFCHR {
        return Err(format!(
            "device {written:?}{shown} is not a character device; a vgpio profile grants device \
             nodes such as /dev/gpiochip0, /dev/i2c-1 or /dev/spidev0.0"
        ));
    }
    let (dev, ino, rdev) = ids(&st);
    // /dev/mem, /dev/kmem and /dev/port: the host's memory and I/O ports, never hardware access.
    if nix::sys::stat::major(rdev) == 1 && [1, 2, 4].contains(&nix::sys::stat::minor(rdev)) {
        return Err(format!(
            "device {written:?}{shown} is the host's physical memory or I/O ports (1:{}), which \
             no box is given; list the GPIO/I2C/SPI device nodes instead",
            nix::sys::stat::minor(rdev)
        ));
    }
    let target = match written.strip_prefix("/dev/") {
        Some(rel) => format!("/dev/{rel}"),
        None => format!(
            "/dev/{}",
            Path::new(written)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
    };
    let first = target["/dev/".len()..]
        .split('/')
        .next()
        .unwrap_or_default();
    if BOX_DEV.contains(&first) {
        return Err(format!(
            "device {written:?} would be {target} in the box, where the box has its own /dev/{first}; \
             vgpio grants hardware, not the box's standard nodes"
        ));
    }
    Ok(DeviceSpec {
        source: canon,
        target,
        dev,
        ino,
        rdev,
    })
}
