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
use shoal_proto::{crash_points, Op};

use crate::meta_store::Txn;
use crate::service::{Reply, Request, Service};

pub fn dispatch(s: &Service, r: &Request) -> Result<Reply> {
    match r.header.op {
        Op::Ping => admin::ping(s),
        Op::Statfs => admin::statfs(s),
        Op::Stats => admin::stats(s),
        Op::Lookup => namespace::lookup(s, r),
        Op::CreateObject => namespace::create_object(s, r),
        Op::CreateDatafiles => namespace::create_datafiles(s, r),
        Op::SetDist => namespace::set_dist(s, r),
        Op::CrDirEnt => namespace::crdirent(s, r),
        Op::RmDirEnt => namespace::rmdirent(s, r),
        Op::RenameEntry => namespace::rename_entry(s, r),
        Op::Readdir => namespace::readdir(s, r),
        Op::Remove => namespace::remove(s, r),
        Op::RmdirPrepare => namespace::rmdir_prepare(s, r),
        Op::RmdirAbort => namespace::rmdir_abort(s, r),
        Op::SetParent => namespace::set_parent(s, r),
        Op::GetAttr => attrs::getattr(s, r),
        Op::SetAttr => attrs::setattr(s, r),
        Op::SetXattr => attrs::setxattr(s, r),
        Op::GetXattr => attrs::getxattr(s, r),
        Op::ListXattr => attrs::listxattr(s, r),
        Op::RemoveXattr => attrs::removexattr(s, r),
        Op::Read => io::read(s, r),
        Op::Write => io::write(s, r),
        Op::Truncate => io::truncate(s, r),
        Op::Fsync => io::fsync(s, r),
        Op::GetSizes => io::get_sizes(s, r),
        Op::Rendezvous => io::rendezvous(s, r),
        Op::CreateFile => precreate::create_file(s, r),
        Op::Unstuff => precreate::unstuff(s, r),
        Op::ListAttr => listattr::listattr(s, r),
        Op::Scan => scan::scan(s, r),
        Op::Link => links::link(s, r),
    }
}

/// Whether request `r` only reads or changes memory: the KV store's reads
/// and its in-memory table (no sync: writes of file data are durable on
/// fsync only), not local files, syncs or other servers. A read or write of
/// a datafile whose bytes are in the KV store qualifies, unless the write
/// would move them to a local file.
pub fn stays_in_memory(s: &Service, r: &Request) -> bool {
    match r.header.op {
        Op::Ping
        | Op::Stats
        | Op::Lookup
        | Op::GetAttr
        | Op::GetXattr
        | Op::ListXattr
        | Op::Readdir
        | Op::Rendezvous => true,
        Op::Read => io::reads_in_memory(s, r),
        Op::Write => io::writes_in_memory(s, r),
        _ => false,
    }
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
