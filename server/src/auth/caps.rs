//! Capabilities on the server (`shoal_proto::capability`): a file's metafile
//! server, which holds its mode and owner, grants the caller one in its
//! replies; the servers holding the file's datafiles, which hold neither,
//! check it on every data request, except from root, whose rights do not
//! depend on the mode. A file without a metafile (no_metafile)
//! needs none: its datafile's record holds its attributes and is checked
//! directly. A cluster without a secret can sign nothing: there data
//! requests are not checked (scratch clusters serve anyone who can connect
//! anyway).

use std::time::Duration;

use shoal_proto::capability::{self, rights_name};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::msg::{Capability, ObjectRecord};
use shoal_proto::time::now_ns;
use shoal_proto::{Cred, ObjectKind};

use crate::auth::perms;
use crate::service::Service;

fn now_ms() -> i64 {
    now_ns() / 1_000_000
}

/// Whether datafile `rec` is a file of its own (made in a no_metafile
/// directory): such a record names the directory whose entry names it,
/// while a datafile of a striped file has no parent.
fn is_own_file(rec: &ObjectRecord) -> bool {
    rec.kind() == ObjectKind::Datafile && rec.parent != 0
}

/// The capability `cred` gets for `file` (a metafile with its datafiles):
/// the rights its mode gives now (`perms::data_rights`), for the cluster's
/// `capability_ttl_s`. None for other objects, for root (who needs none),
/// and on a cluster without a secret.
pub(crate) fn grant(s: &Service, cred: &Cred, file: &ObjectRecord) -> Option<Capability> {
    let secret = s.secret.as_ref()?;
    if file.kind() != ObjectKind::Metafile || cred.is_root() {
        return None;
    }
    let dist = file.dist.as_ref().filter(|d| !d.datafiles.is_empty())?;
    Some(capability::issue(
        secret,
        file.handle,
        &dist.datafiles,
        cred.uid,
        perms::data_rights(cred, file),
        now_ms(),
        Duration::from_secs(s.config.settings.capability_ttl_s as u64),
    ))
}

/// Checks that `cred` may use datafile `rec` for `need` (a right, or
/// `capability::ANY`), with the capability the request carried. EACCES
/// naming the datafile and what is missing otherwise.
pub(crate) fn check(
    s: &Service,
    cred: &Cred,
    rec: &ObjectRecord,
    cap: Option<&Capability>,
    need: u32,
) -> Result<()> {
    // Root may read and write anything: a capability would say so.
    if cred.is_root() {
        return Ok(());
    }
    if is_own_file(rec) {
        let rights = perms::data_rights(cred, rec);
        if rights & need == need {
            return Ok(());
        }
        let a = rec.attrs.unwrap_or_default();
        return Err(ShoalError::new(
            Errno::EACCES,
            format!(
                "file {:#x}: uid {} may not {} it (mode {:04o}, owner {}:{})",
                rec.handle,
                cred.uid,
                rights_name(need),
                a.mode,
                a.uid,
                a.gid
            ),
        ));
    }
    match &s.secret {
        Some(secret) => capability::check(secret, cap, cred.uid, rec.handle, need, now_ms()),
        None => Ok(()),
    }
}
