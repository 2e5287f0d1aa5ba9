//! Request handlers, one module per family of operations. Each handler decodes
//! its body, checks its arguments, changes the stores, and for a modifying
//! request waits on the commit queue before it replies.

mod access;
mod admin;
mod attrs;
mod caps;
mod hints;
mod io;
mod links;
mod listattr;
mod namespace;
mod precreate;
mod scan;

use shoal_proto::error::Result;
use shoal_proto::{crash_points, ops, Op, Operation};

use crate::meta_store::Txn;
use crate::service::{Encoded, Reply, Request, Service};

/// The server's side of the operation table (`shoal_proto::op`), one row
/// per operation: its handler, whether the handler reads the request body
/// (`decoded`: it gets the body as its operation's request message, and
/// must return its reply message, so a handler wired to the wrong operation
/// does not compile), and whether it stays in memory (see
/// [`stays_in_memory`]): `always`, `never`, or `(a check of the request)`.
/// Both matches are exhaustive: an operation added to the table and missing
/// here does not compile.
macro_rules! handlers {
    ($($op:ident => $handler:path, $body:ident, $memory:tt;)*) => {
        /// Runs request `r`'s handler.
        pub fn dispatch(s: &Service, r: &Request) -> Result<Encoded> {
            match r.header.op {
                $(Op::$op => handlers!(@call $body, $handler, $op, s, r),)*
            }
        }

        /// Whether request `r` only reads or changes memory: the KV store's
        /// reads and its in-memory table (no sync: writes of file data are
        /// durable on fsync only), not local files, syncs or other servers. A
        /// read or write of a datafile whose bytes are in the KV store
        /// qualifies, unless the write would move them to a local file.
        pub fn stays_in_memory(s: &Service, r: &Request) -> bool {
            match r.header.op {
                $(Op::$op => handlers!(@memory $memory, s, r),)*
            }
        }
    };
    (@call decoded, $handler:path, $op:ident, $s:ident, $r:ident) => {{
        let reply: Reply<<ops::$op as Operation>::Reply> =
            $handler($s, $r, $r.decode::<ops::$op>()?)?;
        Ok(reply.encode())
    }};
    (@call unread, $handler:path, $op:ident, $s:ident, $r:ident) => {{
        let reply: Reply<<ops::$op as Operation>::Reply> = $handler($s)?;
        Ok(reply.encode())
    }};
    (@memory always, $s:ident, $r:ident) => {
        true
    };
    (@memory never, $s:ident, $r:ident) => {
        false
    };
    (@memory ($check:path), $s:ident, $r:ident) => {
        $check($s, $r)
    };
}

handlers! {
    Ping => admin::ping, unread, always;
    Lookup => namespace::lookup, decoded, always;
    GetAttr => attrs::getattr, decoded, always;
    SetAttr => attrs::setattr, decoded, never;
    CreateObject => namespace::create_object, decoded, never;
    CreateDatafiles => namespace::create_datafiles, decoded, never;
    SetDist => namespace::set_dist, decoded, never;
    CrDirEnt => namespace::crdirent, decoded, never;
    RmDirEnt => namespace::rmdirent, decoded, never;
    RenameEntry => namespace::rename_entry, decoded, never;
    Readdir => namespace::readdir, decoded, always;
    Remove => namespace::remove, decoded, never;
    RmdirPrepare => namespace::rmdir_prepare, decoded, never;
    RmdirAbort => namespace::rmdir_abort, decoded, never;
    SetParent => namespace::set_parent, decoded, never;
    Read => io::read, decoded, (io::reads_in_memory);
    Write => io::write, decoded, (io::writes_in_memory);
    Truncate => io::truncate, decoded, never;
    Fsync => io::fsync, decoded, never;
    GetSizes => io::get_sizes, decoded, never;
    SetXattr => attrs::setxattr, decoded, never;
    GetXattr => attrs::getxattr, decoded, always;
    ListXattr => attrs::listxattr, decoded, always;
    RemoveXattr => attrs::removexattr, decoded, never;
    Statfs => admin::statfs, unread, never;
    Stats => admin::stats, unread, always;
    CreateFile => precreate::create_file, decoded, never;
    Unstuff => precreate::unstuff, decoded, never;
    ListAttr => listattr::listattr, decoded, never;
    Rendezvous => io::rendezvous, decoded, always;
    Scan => scan::scan, decoded, never;
    Link => links::link, decoded, never;
}

/// Runs `build` under the store lock to read what it needs and fill a
/// transaction, applies it, then (lock released) waits until it is durable.
/// Returns what `build` returned and the syncs it took (with commit
/// coalescing, 0 when another request's sync covered this change).
///
/// `make_durable` is where the request leaves the commit queue's scheduling
/// queue (its changes are applied) and decides to sync now or defer; it must
/// run after `apply` and without the store lock, so that requests applying
/// behind this one can join the same sync.
pub(crate) fn change<T>(
    s: &Service,
    build: impl FnOnce(&mut Txn) -> Result<T>,
) -> Result<(T, u64)> {
    let guard = s.meta.lock();
    let mut txn = Txn::default();
    let out = build(&mut txn)?;
    s.meta.apply(txn)?;
    drop(guard);
    shoal_proto::crash_point!(crash_points::COMMIT_AFTER_APPLY);
    let syncs = s.commit.make_durable(&s.meta, &s.stats)?;
    Ok((out, syncs))
}

/// ENOTSUP unless the technique `name` is switched on in this cluster.
pub(crate) fn require(on: bool, name: &str) -> Result<()> {
    if on {
        Ok(())
    } else {
        Err(shoal_proto::ShoalError::new(
            shoal_proto::Errno::ENOTSUP,
            format!("{name} is switched off in this cluster"),
        ))
    }
}

/// Checks that `h` can name an object somewhere in the cluster.
pub(crate) fn check_handle(s: &Service, h: shoal_proto::Handle) -> Result<()> {
    if shoal_proto::handle::is_valid(h, s.config.num_servers()) {
        Ok(())
    } else {
        Err(shoal_proto::ShoalError::invalid(format!(
            "invalid handle {h:#x}"
        )))
    }
}
