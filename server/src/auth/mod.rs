//! Who may do what: the POSIX permission rules (`perms`, pure functions of
//! a caller and a record), the capabilities that carry a file's rights from
//! its metafile server to its datafiles' servers (`caps`), and the checks
//! that need the record of an object another server may hold (`access`).
//! The handlers apply them; nothing here depends on a handler. What a
//! connection opened with a user credential may send (`user_peers`) the
//! listener asks before any handler runs. How clients and servers prove
//! the cluster secret or a credential is the wire's business
//! (`shoal_proto::auth`).

pub(crate) mod access;
pub(crate) mod caps;
pub mod perms;
pub(crate) mod user_peers;
