//! Jupyter kernels the image provides (`kernel({ jupyter })`): the protocol's wire form, the
//! kernelspec and connection file, and the mapping of a cell's messages onto a result. The
//! kernel's box and sockets are `session::kernel::jupyter`.

pub mod cell;
pub mod kernelspec;
pub mod wire;
pub mod zmtp;
