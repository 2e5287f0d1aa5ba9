//! Shoal's wire protocol and the definitions both sides of the wire share.
//!
//! Open `shoal.proto` first: it is the schema, its messages generated into
//! [`msg`]. This crate adds the frame layout
//! ([`frame`]), the operation table ([`op`]), POSIX errors ([`error`]), the handle
//! space ([`handle`]), striping arithmetic ([`dist`]), the byte extents of the
//! gathering path ([`extents`]), directory hints
//! ([`hints`]), name validation ([`names`]), the cluster file ([`cluster`]),
//! the cluster secret ([`secret`]), the authentication handshake ([`auth`]), who a request acts for
//! ([`cred`]), the user credentials a node's broker issues ([`credential`]), the data rights a file's server grants ([`capability`]) and
//! the rules of POSIX record locks ([`record_locks`]).
//! It holds the wire only: the socket's sending side and free ports are in
//! `shoal-net`, the syscalls that read a process's credentials in the client.

pub mod auth;
pub mod capability;
pub mod cluster;
pub mod crash_points;
pub mod cred;
pub mod credential;
pub mod dist;
pub mod durability;
pub mod error;
pub mod extents;
pub mod frame;
pub mod handle;
pub mod hints;
pub mod msg;
pub mod names;
pub mod op;
pub mod partitions;
pub mod record_locks;
pub mod secret;
pub mod time;

pub use cred::Cred;
pub use error::{Errno, ShoalError};
pub use handle::Handle;
pub use msg::ObjectKind;
pub use op::{ops, Op, Operation};

/// Crash points: places where a crash matters for consistency (between a
/// change and its sync, between steps of a multi-server operation). Each is
/// a failpoint of the `fail` crate; with `FAILPOINTS="name=return"` (or
/// `name=1*return` for the first time only) in a process's environment, that
/// process aborts on the spot when it gets there, exactly as if it had been
/// killed with SIGKILL. Without `FAILPOINTS` it costs one check of an empty
/// registry. The names in use are in [`crash_points`].
#[macro_export]
macro_rules! crash_point {
    ($name:expr) => {
        $crate::fail::fail_point!($name, |_| std::process::abort())
    };
}

pub use fail;
