//! File data: striped reads and writes (`io`), which path a write takes
//! (`write`: under the write threshold the gathering path, whose writes wait
//! in the `gathering_buffer` and go out through `gathering_send`; else the
//! direct path, with `write_behind`), the automatic threshold (`threshold`),
//! data acknowledged but not yet durable (`uncommitted_writes`), the
//! capabilities data requests carry (`caps`) and the layouts (`dists`).

pub(crate) mod caps;
pub(crate) mod dists;
pub(crate) mod gathering_buffer;
pub(crate) mod gathering_send;
pub(crate) mod io;
pub(crate) mod threshold;
pub(crate) mod uncommitted_writes;
pub(crate) mod write;
pub(crate) mod write_behind;
