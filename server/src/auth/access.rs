//! Permission checks of directory entries that need the record of the
//! object an entry names, which may live on another server: the sticky rule
//! (its owner) and moving a directory to another parent (write permission
//! on it). The rules themselves are in `perms`.
//!
//! A record on another server is read through a peer before the store lock
//! is taken ([`Owners::prefetch`]), so that no change waits for a peer with
//! the lock held; under the lock, an entry that names another object by
//! then is ESTALE (the client's request fails; trying again reads anew).

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::handle::server_of;
use shoal_proto::msg::ObjectRecord;
use shoal_proto::Handle;

use crate::auth::perms;
use crate::request::{Request, Result};
use crate::service::Service;

/// The record of object `h`, from this server or from the one holding it,
/// read for request `r`.
pub(crate) fn record_anywhere(s: &Service, r: &Request, h: Handle) -> Result<ObjectRecord> {
    if server_of(h) == s.id {
        s.meta.get(r, h)
    } else {
        Ok(remote_record(s, r, h)?)
    }
}

/// The record of object `h` of another server, read through a peer. The
/// request `r` leaves the scheduling queue first: the requests deferred
/// behind it must not wait for a peer (`Request::leave_scheduling_queue`).
fn remote_record(s: &Service, r: &Request, h: Handle) -> Result<ObjectRecord, ShoalError> {
    r.leave_scheduling_queue();
    s.pools.peers.record(h)
}

fn owner(rec: &ObjectRecord) -> u32 {
    rec.attrs.unwrap_or_default().uid
}

/// Owners of objects on other servers that entries of a sticky directory
/// name, read ahead of a change that may remove or replace those entries.
#[derive(Default)]
pub(crate) struct Owners(Vec<(Handle, u32)>);

impl Owners {
    /// For each of the entries `names` of directory `dir`: if the sticky rule
    /// will need the owner of the object it names (`perms::sticky_applies`,
    /// for `r`'s caller) and that object lives on another server, reads it
    /// now.
    pub fn prefetch(s: &Service, r: &Request, dir: Handle, names: &[&str]) -> Result<Owners> {
        let mut owners = Owners::default();
        match s.meta.try_get(r, dir)? {
            Some(d) if perms::sticky_applies(&r.cred, &d) => {}
            _ => return Ok(owners),
        }
        for name in names {
            if let Some((h, _)) = s.meta.lookup(r, dir, name)? {
                if server_of(h) != s.id {
                    owners.0.push((h, owner(&remote_record(s, r, h)?)));
                }
            }
        }
        Ok(owners)
    }

    /// The sticky rule for `r`'s caller and the entry of `dir` naming `h`
    /// (EPERM when it forbids); run under the store lock.
    pub fn check(
        &self,
        s: &Service,
        r: &Request,
        dir: &ObjectRecord,
        h: Handle,
        doing: &str,
    ) -> Result<()> {
        if !perms::sticky_applies(&r.cred, dir) {
            return Ok(());
        }
        let uid = if server_of(h) == s.id {
            owner(&s.meta.get(r, h)?)
        } else {
            self.0
                .iter()
                .find(|(o, _)| *o == h)
                .map(|(_, uid)| *uid)
                .ok_or_else(|| {
                    ShoalError::new(
                        Errno::ESTALE,
                        format!("{doing}: the entry changed while its owner was read; try again"),
                    )
                })?
        };
        Ok(perms::check_sticky(&r.cred, dir, uid, doing)?)
    }
}
