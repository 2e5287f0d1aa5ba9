//! Attributes and extended attributes of any object. Extended attributes
//! named `user.shoal.<hint>` are a directory's hints ([Kuhn 2008]) and are
//! handled by `hints`, which keeps them in the directory's record.
//!
//! Reading attributes needs no permission (search permission on the path
//! was checked by the lookups); a file's attributes come with the caller's
//! capability for its data (`caps`). Changes follow `perms::check_setattr`,
//! extended attributes `perms::check_xattr`.

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::hints::Hint;
use shoal_proto::msg::*;
use shoal_proto::time::now_ns;
use shoal_proto::ObjectKind;

use super::hints;
use crate::auth::caps;
use crate::auth::perms;
use crate::keys;
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// Longest xattr name and value, as Linux allows.
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 64 << 10;

pub fn getattr(s: &Service, r: &Request, q: GetAttrRequest) -> Result<Reply<GetAttrReply>> {
    Ok(Reply::new(attributes(s, r, s.meta.get(r, q.handle)?)?))
}

/// What a stat of `object` for request `r` needs from this server: its
/// record (a datafile's with its current size), so that a stuffed file's
/// stat is one message the sizes of its datafiles that live here, and the
/// caller's capability for the file's data. Offers `r`'s client a lease on
/// each.
pub(crate) fn attributes(
    s: &Service,
    r: &Request,
    mut object: ObjectRecord,
) -> Result<GetAttrReply, ShoalError> {
    if object.kind() == ObjectKind::Datafile {
        let (size, mtime) = s.data.size_of(&object)?;
        object.size = size;
        object.data_mtime_ns = mtime;
    }
    let sizes = if s.config.settings.stuffing {
        s.data.local_sizes(&s.meta, &object)?
    } else {
        Vec::new()
    };
    offer_object(r, &object, &sizes);
    Ok(GetAttrReply {
        cap: caps::grant(s, &r.cred, &object),
        object: Some(object),
        sizes,
    })
}

/// Offers a lease on `object` as `r`'s answer describes it, and on each
/// of its datafiles whose size the answer carries (recalled as the object).
fn offer_object(r: &Request, object: &ObjectRecord, sizes: &[DatafileSize]) {
    r.offer(object.handle, object.handle);
    for size in sizes {
        r.offer(size.handle, object.handle);
    }
}

pub fn setattr(s: &Service, r: &Request, q: SetAttrRequest) -> Result<Reply<SetAttrReply>> {
    let has = |bit: SetAttrBits| q.mask & bit as u32 != 0;
    let (object, syncs) = s.change(r, |txn| {
        let mut rec = s.meta.get(r, q.handle)?;
        let mode = perms::check_setattr(&r.cred, &rec, &q)?;
        let mut a = rec.attrs.unwrap_or_default();
        a.mode = mode;
        if has(SetAttrBits::SetUid) {
            a.uid = q.uid;
        }
        if has(SetAttrBits::SetGid) {
            a.gid = q.gid;
        }
        if has(SetAttrBits::SetAtime) {
            a.atime_ns = q.atime_ns;
        }
        let now = now_ns();
        if has(SetAttrBits::SetAtimeNow) {
            a.atime_ns = now;
        }
        if has(SetAttrBits::SetMtime) || has(SetAttrBits::SetMtimeNow) {
            a.mtime_ns = if has(SetAttrBits::SetMtime) {
                q.mtime_ns
            } else {
                now
            };
            rec.mtime_set_ns = now;
        }
        a.ctime_ns = now;
        rec.attrs = Some(a);
        txn.put_object(&rec);
        Ok(rec)
    })?;
    Ok(Reply::new(SetAttrReply {
        object: Some(object),
    })
    .with_syncs(syncs))
}

/// Checks that the caller may read (`write` false) or change the extended
/// attribute `name` of object `h` (`perms::check_xattr`).
fn xattr_access(s: &Service, r: &Request, h: u64, name: &str, write: bool) -> Result<()> {
    let rec = s.meta.get(r, h)?;
    Ok(perms::check_xattr(&r.cred, &rec, name, write)?)
}

fn check_xattr_name(name: &str) -> Result<(), ShoalError> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX || name.contains('\0') {
        return Err(ShoalError::new(
            Errno::ERANGE,
            format!("xattr name must be 1..={XATTR_NAME_MAX} bytes without NUL"),
        ));
    }
    Ok(())
}

pub fn setxattr(s: &Service, r: &Request, q: SetXattrRequest) -> Result<Reply<Empty>> {
    check_xattr_name(&q.name)?;
    xattr_access(s, r, q.handle, &q.name, true)?;
    if let Some(hint) = Hint::from_xattr(&q.name) {
        return hints::set(
            s,
            r,
            q.handle,
            hint?,
            &q.value,
            q.create_only,
            q.replace_only,
        );
    }
    if q.value.len() > XATTR_SIZE_MAX {
        return Err(ShoalError::new(Errno::E2BIG, "xattr value over 64 KiB").into());
    }
    let key = keys::xattr(q.handle, &q.name);
    let ((), syncs) = s.change(r, |txn| {
        s.meta.get(r, q.handle)?;
        let exists = s.meta.kv().get(&key)?.is_some();
        if q.create_only && exists {
            return Err(ShoalError::new(Errno::EEXIST, format!("xattr {} exists", q.name)).into());
        }
        if q.replace_only && !exists {
            return Err(ShoalError::new(Errno::ENODATA, format!("no xattr {}", q.name)).into());
        }
        txn.batch.put(key, q.value.to_vec());
        txn.record_reply(&Empty {});
        Ok(())
    })?;
    Ok(Reply::default().with_syncs(syncs))
}

pub fn getxattr(s: &Service, r: &Request, q: GetXattrRequest) -> Result<Reply<GetXattrReply>> {
    check_xattr_name(&q.name)?;
    xattr_access(s, r, q.handle, &q.name, false)?;
    if let Some(hint) = Hint::from_xattr(&q.name) {
        let value = hints::get(s, r, q.handle, hint?)?;
        return Ok(Reply::new(GetXattrReply {
            value: value.into(),
        }));
    }
    s.meta.get(r, q.handle)?;
    let value = s
        .meta
        .kv()
        .get(&keys::xattr(q.handle, &q.name))?
        .ok_or_else(|| ShoalError::new(Errno::ENODATA, format!("no xattr {}", q.name)))?;
    Ok(Reply::new(GetXattrReply {
        value: value.into(),
    }))
}

pub fn listxattr(s: &Service, r: &Request, q: ListXattrRequest) -> Result<Reply<ListXattrReply>> {
    let rec = s.meta.get(r, q.handle)?;
    let mut names = hints::names(&rec);
    names.extend(
        s.meta
            .kv()
            .scan(&keys::xattrs(q.handle), None, usize::MAX)?
            .into_iter()
            .map(|(k, _)| keys::xattr_name_of(&k)),
    );
    Ok(Reply::new(ListXattrReply { names }))
}

pub fn removexattr(s: &Service, r: &Request, q: RemoveXattrRequest) -> Result<Reply<Empty>> {
    check_xattr_name(&q.name)?;
    xattr_access(s, r, q.handle, &q.name, true)?;
    if let Some(hint) = Hint::from_xattr(&q.name) {
        return hints::unset(s, r, q.handle, hint?);
    }
    let key = keys::xattr(q.handle, &q.name);
    let ((), syncs) = s.change(r, |txn| {
        s.meta.get(r, q.handle)?;
        if s.meta.kv().get(&key)?.is_none() {
            return Err(ShoalError::new(Errno::ENODATA, format!("no xattr {}", q.name)).into());
        }
        txn.batch.delete(key);
        txn.record_reply(&Empty {});
        Ok(())
    })?;
    Ok(Reply::default().with_syncs(syncs))
}
