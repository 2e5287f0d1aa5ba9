//! Shoal's wire protocol and the definitions both sides of the wire share.
//!
//! Open `shoal.proto` first: it is the schema. This crate adds the frame layout
//! ([`frame`]), the operation table ([`op`]), POSIX errors ([`error`]), the handle
//! space ([`handle`]), striping arithmetic ([`dist`]), directory hints
//! ([`hints`]), name validation ([`names`]), the cluster file ([`cluster`]),
//! the authentication handshake ([`auth`]) and
//! the sending side of a connection ([`sink`]).

pub mod auth;
pub mod cluster;
pub mod dist;
pub mod error;
pub mod frame;
pub mod handle;
pub mod hints;
pub mod names;
pub mod op;
pub mod sink;
pub mod time;

/// The protobuf messages generated from `shoal.proto`.
pub mod msg {
    include!(concat!(env!("OUT_DIR"), "/shoal.rs"));
}

pub use error::{Errno, ShoalError};
pub use handle::Handle;
pub use msg::ObjectKind;
pub use op::Op;
