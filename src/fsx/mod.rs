//! The one place a path under a root directory, or an absolute path from `/`, is opened.
//!
//! Everything kern opens on a path something untrusted could have shaped (a workspace a box
//! writes, an image layer from a registry, an image's or a box's root, a bind source a caller
//! names) goes through [`open_beneath`] with one of the few [`Resolve`] modes it needs, through
//! [`open_no_symlinks`] (an absolute path from `/`), or [`read_in_root`] (a small file of an
//! image or box root). The kernel's `openat2` does the resolution; nothing here resolves a
//! symlink itself. A stream that must not run past a size is read through [`Capped`]. A whole
//! tree is walked with [`walk`], which opens each directory relative to its parent's fd and
//! never follows a symlink.
//!
//! # Kernels without `openat2` (Linux < 5.6): one policy
//!
//! - A mode that follows **no** symlink ([`Resolve::Strict`], [`Resolve::NoSymlinks`]) is
//!   emulated: one `O_NOFOLLOW` component at a time, each relative to the previous one's fd,
//!   every step `fstat`ed (a symlink is `ELOOP`, a non-directory `ENOTDIR`, a different
//!   `st_dev` `EXDEV` where mounts may not be crossed). That is as race-free as the kernel's
//!   check: nothing is ever resolved through a name a racer can swap after it was checked.
//! - A mode that **follows** symlinks inside the root ([`Resolve::Beneath`],
//!   [`Resolve::InRoot`]) is not emulated: doing it safely means a userspace symlink resolver
//!   with its own `..` and race handling. It fails with the typed
//!   [`OpenError::NeedsOpenat2`] ("openat2 is not available (Linux 5.6 or later is needed)").
//!   Kern's boxes need newer kernels anyway (idmapped mounts 5.12, Landlock 5.13), so this only
//!   names the problem clearly on a host kern cannot serve.
//!
//! `EAGAIN` from `openat2` (a concurrent rename raced its `..` checks) is retried up to 16 times.
//!
//! # Why not the `pathrs` crate
//!
//! `pathrs` (libpathrs, 0.2.x) resolves in a root with `openat2` and has an emulated userspace
//! resolver for old kernels, which would cover the two following modes above. Not taken: it is
//! MPL-2.0 OR LGPL-3.0-or-later (this crate is MIT) and would add itself plus `itertools` and
//! `static_assertions` to Cargo.lock; it has no `RESOLVE_NO_XDEV` equivalent (the workspace
//! file API refuses to cross mounts); and the callers' creating side (fd-relative `mkdirat`
//! with owners and modes, `O_EXCL` temp files renamed into place, layer whiteouts) stays our
//! own code either way, so it would replace only the few lines of flag building kept here. The
//! emulation it offers matters only on kernels kern does not run boxes on.

mod capped;
mod open;
pub mod walk;

pub use capped::{Cap, Capped, OverCap};
pub(crate) use open::{child_dir, open_via, Via};
pub use open::{
    open_beneath, open_no_symlinks, probe_openat2, read_in_root, OpenError, ReadError, Resolve,
};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod walk_tests;
