//! Shoal's native client library: the system interface every other front end
//! (FUSE mount, `shoal` CLI, C ABI) is built on.
//!
//! A [`Client`] holds one multiplexed connection per server (`pool`), name and
//! attribute caches with a short TTL ([`cache`]), and implements the namespace
//! (`namespace`), attribute (`attrs`) and striped data (`io`) operations,
//! whose data requests carry the capabilities the servers grant (`caps`).
//! Clones are cheap and share everything; [`Client::with_cred`] gives a view
//! that acts as another user (the servers check each request against the
//! user it names).
//!
//! Other crates see the [`Client`] and its types, [`cache::TtlCache`] (the
//! mount keeps callers' groups in one), [`fsck`]'s report and [`mounts`] (how
//! a path under a live mount names its cluster); the rest is private.

mod client;
mod consistency;
mod data;
pub mod fsck;
mod locks;
pub mod mounts;
mod namespace;
mod transport;
mod types;
mod wiring;

pub use client::{Client, TableSize};
pub use consistency::cache;
pub use consistency::delegations::MAX_UNSETTLED;
pub use consistency::lease_ledger::RecallHook;
pub use data::uncommitted_writes::MAX_RESEND_BYTES;
pub use data::write::{WritePaths, THRESHOLD_XATTR};
pub use data::write_behind::AUTO_BUFFERS_UNDER;
pub use locks::{LockAsk, LockConflict, LockGrant, LockKind};
pub use namespace::fetched_ahead::ReadAhead;
pub use namespace::open_files::OpenFiles;
pub use shoal_proto::error::{Errno, ShoalError};
pub use transport::conn::Recalled;
pub use transport::landing::{Landing, ReadData};
pub use types::*;
