//! Granting a directory's delegation (`DelegateDir`; see `delegations`).

use shoal_proto::msg::{DelegateDirReply, DelegateDirRequest};

use super::create_file::writable_dir;
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// The most handles one grant reserves.
pub const MAX_HANDLES: u32 = 4096;

pub fn delegate_dir(
    s: &Service,
    r: &Request,
    q: DelegateDirRequest,
) -> Result<Reply<DelegateDirReply>> {
    let client = r.header.client.client;
    let refused = || Ok(Reply::new(DelegateDirReply::default()));
    if !s.config.settings.delegates_dirs() || !s.leases.can_recall(client) {
        return refused();
    }
    let asking_again = s.meta.delegations.held_by(q.dir) == Some(client) && q.entries_version == 0;
    if !asking_again {
        // Whoever else cached the directory drops it first: from now on it
        // changes without this server hearing of it until the holder sends.
        s.leases.changed(&mut r.leasing(), &[q.dir]);
        let guard = s.meta.lock();
        // A delegation another holds is recalled here (the read meets it).
        let dir = writable_dir(s, r, q.dir, "delegated files")?;
        let current = dir.entries_version == q.entries_version;
        // A split directory's creates go to every server: none is delegated.
        let split = dir.partition_of != 0 || dir.partition_depth > 0 || dir.split_pending != 0;
        if !current
            || split
            || s.leases.held_by_others(q.dir, client)
            || !s.meta.delegations.grant(q.dir, client)
        {
            return refused();
        }
        drop(guard);
        // A read of the directory that began before the grant, and so did
        // not meet it, may be granted a lease after it: stamping the
        // directory again refuses that lease, or recalls it if granted
        // already.
        s.leases.changed(&mut r.leasing(), &[q.dir]);
    }
    let count = q.handles.clamp(1, MAX_HANDLES);
    let reserved = s.meta.reserve_handles(count as u64)?;
    s.meta.delegations.reserve(client, reserved.clone());
    Ok(Reply::new(DelegateDirReply {
        granted: true,
        first_handle: reserved.start,
        handles: count,
    }))
}
