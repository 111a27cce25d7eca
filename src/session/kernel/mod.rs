//! Kernels.

pub mod driver;
pub mod jupyter;
