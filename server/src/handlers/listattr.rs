//! Readdirplus listattr ([Carns 2009], section III-E): the records of many objects
//! held by this server in one request, plus the sizes of those objects'
//! datafiles that live here, so a client lists a directory with one request
//! per server instead of one getattr per entry.
//!
//! Objects that no longer exist (removed since the client read the entries)
//! are left out, and so are datafiles that disappear while the reply is
//! built: the client then asks for those sizes separately and treats a file
//! whose datafile is gone as removed.

use std::collections::HashMap;

use prost::Message;
use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::frame::MAX_BODY;
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::ObjectKind;

use crate::request::{Request, Result};
use crate::service::{require, Reply, Service};

/// Most handles one listattr request may name (a readdir batch is at most 4096).
pub const MAX_LISTATTR_HANDLES: usize = 16384;
/// A reply larger than this is refused with E2BIG (long symlink targets or
/// wide distributions); the client then asks for the handles in halves.
const MAX_REPLY_BYTES: usize = MAX_BODY - (64 << 10);

pub fn listattr(s: &Service, r: &Request, q: ListAttrRequest) -> Result<Reply<ListAttrReply>> {
    require(s.config.settings.readdirplus, "readdirplus")?;
    if q.handles.len() > MAX_LISTATTR_HANDLES {
        return Err(ShoalError::invalid(format!(
            "listattr of {} handles is over the limit of {MAX_LISTATTR_HANDLES}",
            q.handles.len()
        ))
        .into());
    }
    for &h in &q.handles {
        s.check_handle(h)?;
        s.meta.check_owned(h)?;
    }
    // Two reads of the store in all: the objects, then their datafiles
    // that live here.
    let objects = s.meta.try_get_many(r, &q.handles)?;
    let local: Vec<Handle> = objects
        .iter()
        .flatten()
        .filter(|o| o.kind() == ObjectKind::Metafile)
        .flat_map(|o| o.dist.iter().flat_map(|d| &d.datafiles))
        .copied()
        .filter(|d| server_of(*d) == s.id)
        .collect();
    let datafiles: HashMap<Handle, ObjectRecord> = s
        .meta
        .try_get_many(r, &local)?
        .into_iter()
        .flatten()
        .map(|r| (r.handle, r))
        .collect();
    let mut reply = ListAttrReply::default();
    let mut bytes = 0usize;
    for mut object in objects.into_iter().flatten() {
        match object.kind() {
            // A datafile named directly (a no_metafile entry): its size is
            // its own, filled in as getattr does.
            ObjectKind::Datafile => match s.data.size_of(&object) {
                Ok((size, mtime)) => {
                    object.size = size;
                    object.data_mtime_ns = mtime;
                }
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e.into()),
            },
            ObjectKind::Metafile => {
                let dist = object.dist.as_ref().map(|d| d.datafiles.as_slice());
                for d in dist.unwrap_or_default() {
                    if let Some(size) = local_size(s, datafiles.get(d))? {
                        r.offer(size.handle, object.handle);
                        bytes += size.encoded_len() + 2;
                        reply.sizes.push(size);
                    }
                }
            }
            _ => {}
        }
        bytes += object.encoded_len() + 3;
        if bytes > MAX_REPLY_BYTES {
            return Err(ShoalError::new(
                Errno::E2BIG,
                format!(
                    "listattr reply of {} handles is over {MAX_REPLY_BYTES} bytes; ask for fewer",
                    q.handles.len()
                ),
            )
            .into());
        }
        r.offer(object.handle, object.handle);
        reply.objects.push(object);
    }
    Ok(Reply::new(reply))
}

/// Size of a local datafile (its record, if it still exists), or None if it
/// no longer exists.
fn local_size(s: &Service, rec: Option<&ObjectRecord>) -> Result<Option<DatafileSize>, ShoalError> {
    let Some(rec) = rec.filter(|r| r.kind() == ObjectKind::Datafile) else {
        return Ok(None);
    };
    match s.data.size_of(rec) {
        Ok((size, mtime_ns)) => Ok(Some(DatafileSize {
            handle: rec.handle,
            size,
            mtime_ns,
        })),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A datafile removed between reading its record and its local file.
fn gone(e: &ShoalError) -> bool {
    e.errno == Errno::ENOENT
}
