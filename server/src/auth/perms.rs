//! POSIX permission rules, applied by the handlers to the caller a request
//! names (`Request::cred`, root-squashed already). Pure functions of a
//! caller and an object record, so every rule is unit-tested here.
//!
//! - Access classes: [`Cred::may`] (the owner's, the group's or the others'
//!   bits; root's exceptions), the rule the mount applies too.
//! - Sticky directories (mode 01000): an entry may be removed or replaced
//!   only by the owner of the object it names, the directory's owner, or
//!   root (EPERM otherwise, as Linux).
//! - Attributes: see [`check_setattr`]; extended attributes: see
//!   [`check_xattr`].
//! - Data: what a capability grants ([`data_rights`]).

use shoal_proto::capability::{READ, WRITE};
use shoal_proto::cred::rights_name;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::msg::{Attributes, ObjectRecord, SetAttrBits, SetAttrRequest};
use shoal_proto::{Cred, ObjectKind};

/// Permission bits asked for, as in each class of a mode.
pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;

fn attrs(rec: &ObjectRecord) -> Attributes {
    rec.attrs.unwrap_or_default()
}

fn is_dir(rec: &ObjectRecord) -> bool {
    rec.kind() == ObjectKind::Directory
}

/// Whether `cred` may access `rec` for every bit of `want` (R, W, X).
pub fn allows(cred: &Cred, rec: &ObjectRecord, want: u32) -> bool {
    let a = attrs(rec);
    cred.may(a.mode, a.uid, a.gid, is_dir(rec), want)
}

fn kind_name(rec: &ObjectRecord) -> &'static str {
    match rec.kind() {
        ObjectKind::Directory => "directory",
        ObjectKind::Symlink => "symlink",
        _ => "file",
    }
}

/// EACCES unless `cred` may access `rec` for `want`; `doing` says what the
/// request was ("create \"a\"").
pub fn require(cred: &Cred, rec: &ObjectRecord, want: u32, doing: &str) -> Result<()> {
    if allows(cred, rec, want) {
        return Ok(());
    }
    let a = attrs(rec);
    Err(ShoalError::new(
        Errno::EACCES,
        format!(
            "{doing}: uid {} has no {} permission on {} {:#x} (mode {:04o}, owner {}:{})",
            cred.uid,
            rights_name(want, is_dir(rec)),
            kind_name(rec),
            rec.handle,
            a.mode,
            a.uid,
            a.gid
        ),
    ))
}

fn owns(cred: &Cred, rec: &ObjectRecord) -> bool {
    cred.uid == attrs(rec).uid
}

fn not_permitted(doing: &str, why: String) -> ShoalError {
    ShoalError::new(Errno::EPERM, format!("{doing}: {why}"))
}

/// Whether removing or replacing an entry of `dir` needs the owner of the
/// object it names: `dir` is sticky and the caller is neither root nor the
/// directory's owner.
pub fn sticky_applies(cred: &Cred, dir: &ObjectRecord) -> bool {
    attrs(dir).mode & S_ISVTX != 0 && !cred.is_root() && !owns(cred, dir)
}

/// The sticky rule for an entry of `dir` naming an object owned by
/// `victim_owner` (EPERM, as Linux, when it forbids).
pub fn check_sticky(cred: &Cred, dir: &ObjectRecord, victim_owner: u32, doing: &str) -> Result<()> {
    if !sticky_applies(cred, dir) || cred.uid == victim_owner {
        return Ok(());
    }
    Err(not_permitted(
        doing,
        format!(
            "directory {:#x} is sticky and uid {} owns neither it nor the entry's object \
             (owned by uid {victim_owner})",
            dir.handle, cred.uid
        ),
    ))
}

/// What a capability for `rec` (a file) grants `cred`: read and write as
/// its mode says. Root, and the file's owner whatever the mode (as NFS
/// servers let the owner), may do both: the mount checks the mode at
/// open, and a file created read-only is written through the descriptor
/// that created it; an owner could chmod anyway.
pub fn data_rights(cred: &Cred, rec: &ObjectRecord) -> u32 {
    if cred.is_root() || owns(cred, rec) {
        return READ | WRITE;
    }
    let mut rights = 0;
    if allows(cred, rec, R) {
        rights |= READ;
    }
    if allows(cred, rec, W) {
        rights |= WRITE;
    }
    rights
}

/// Checks a setattr of `rec` by `cred` and returns the mode it leaves
/// (changes of owner and group clear setuid/setgid, as Linux does).
///
/// - mode: the owner or root. A non-root owner setting setgid on an object
///   whose group is not one of its groups gets it cleared silently. A change
///   that only clears setuid/setgid is also allowed to anyone with write
///   permission: the kernel sends one before a write by a non-owner.
/// - owner: root only (the owner may "change" it to itself).
/// - group: root, or the owner to one of its groups.
/// - times to explicit values: the owner or root (EPERM); to now: also
///   anyone with write permission (EACCES).
pub fn check_setattr(cred: &Cred, rec: &ObjectRecord, q: &SetAttrRequest) -> Result<u32> {
    let has = |bit: SetAttrBits| q.mask & bit as u32 != 0;
    let a = attrs(rec);
    let owner_or_root = cred.is_root() || owns(cred, rec);
    let what = format!("setattr of {} {:#x}", kind_name(rec), rec.handle);
    let mut mode = a.mode;
    if has(SetAttrBits::SetMode) {
        let wanted = q.mode & 0o7777;
        let only_clears_privileges =
            wanted == a.mode & !(S_ISUID | S_ISGID) && allows(cred, rec, W);
        if !owner_or_root && !only_clears_privileges {
            return Err(not_permitted(
                &what,
                format!(
                    "only its owner (uid {}) or root may change its mode, not uid {}",
                    a.uid, cred.uid
                ),
            ));
        }
        mode = wanted;
        let group = if has(SetAttrBits::SetGid) {
            q.gid
        } else {
            a.gid
        };
        if !cred.is_root() && !cred.in_group(group) {
            mode &= !S_ISGID;
        }
    }
    if has(SetAttrBits::SetUid) && !cred.is_root() && !(owns(cred, rec) && q.uid == a.uid) {
        return Err(not_permitted(
            &what,
            format!(
                "only root may change its owner (uid {} asked for uid {})",
                cred.uid, q.uid
            ),
        ));
    }
    if has(SetAttrBits::SetGid)
        && !cred.is_root()
        && !(owns(cred, rec) && (q.gid == a.gid || cred.in_group(q.gid)))
    {
        return Err(not_permitted(
            &what,
            format!(
                "uid {} may not give it group {} (only root, or its owner to one of its groups)",
                cred.uid, q.gid
            ),
        ));
    }
    if (has(SetAttrBits::SetUid) || has(SetAttrBits::SetGid)) && !is_dir(rec) {
        mode &= !S_ISUID;
        if mode & 0o010 != 0 {
            mode &= !S_ISGID;
        }
    }
    if (has(SetAttrBits::SetAtime) || has(SetAttrBits::SetMtime)) && !owner_or_root {
        return Err(not_permitted(
            &what,
            format!(
                "only its owner (uid {}) or root may set its times to a given value",
                a.uid
            ),
        ));
    }
    if (has(SetAttrBits::SetAtimeNow) || has(SetAttrBits::SetMtimeNow)) && !owner_or_root {
        require(cred, rec, W, &format!("{what} (times to now)"))?;
    }
    Ok(mode)
}

/// Checks that `cred` may read (`write` false) or change an extended
/// attribute `name` of `rec`. Namespaces as Linux: `user.*` (and Shoal's
/// `user.shoal.*` hints) by the object's read or write permission;
/// `trusted.*` root only (ENODATA to read, EPERM to change); others may be
/// read by anyone and changed by root only.
pub fn check_xattr(cred: &Cred, rec: &ObjectRecord, name: &str, write: bool) -> Result<()> {
    let doing = format!(
        "{} xattr {name} of {} {:#x}",
        if write { "changing" } else { "reading" },
        kind_name(rec),
        rec.handle
    );
    if name.starts_with("user.") {
        return require(cred, rec, if write { W } else { R }, &doing);
    }
    if cred.is_root() || (!write && !name.starts_with("trusted.")) {
        return Ok(());
    }
    if write {
        Err(not_permitted(&doing, "only root may".into()))
    } else {
        Err(ShoalError::new(Errno::ENODATA, format!("no xattr {name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: ObjectKind, mode: u32, uid: u32, gid: u32) -> ObjectRecord {
        ObjectRecord {
            handle: 0x42,
            kind: kind as i32,
            attrs: Some(Attributes {
                mode,
                uid,
                gid,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn file(mode: u32) -> ObjectRecord {
        rec(ObjectKind::Metafile, mode, 1001, 100)
    }

    const OWNER: Cred = Cred::new(1001, 1001);
    const OTHER: Cred = Cred::new(1002, 1002);

    fn member() -> Cred {
        Cred::new(1002, 1002).with_groups(&[100])
    }

    #[test]
    fn the_class_is_owner_then_group_then_others_and_never_a_union() {
        let f = file(0o640);
        assert!(allows(&OWNER, &f, R | W));
        assert!(allows(&member(), &f, R) && !allows(&member(), &f, W));
        assert!(!allows(&OTHER, &f, R));
        // The owner's class applies even where the others' allow more.
        let f = file(0o047);
        assert!(!allows(&OWNER, &f, R));
        assert!(allows(&member(), &f, R) && !allows(&member(), &f, W));
        assert!(allows(&OTHER, &f, R | W | X));
        // A primary gid counts as much as a supplementary group.
        assert!(allows(&Cred::new(1003, 100), &file(0o040), R));
    }

    #[test]
    fn root_reads_and_writes_anything_and_executes_what_someone_may() {
        let root = Cred::ROOT;
        assert!(allows(&root, &file(0o000), R | W));
        assert!(!allows(&root, &file(0o600), X));
        assert!(allows(&root, &file(0o001), X));
        assert!(allows(
            &root,
            &rec(ObjectKind::Directory, 0o000, 5, 5),
            R | W | X
        ));
    }

    #[test]
    fn refusals_name_the_object_and_the_missing_right() {
        let dir = rec(ObjectKind::Directory, 0o755, 0, 0);
        let e = require(&OTHER, &dir, W | X, "create \"x\"").unwrap_err();
        assert_eq!(e.errno, Errno::EACCES);
        assert!(
            e.message.contains("create \"x\"")
                && e.message.contains("uid 1002")
                && e.message
                    .contains("write and search permission on directory 0x42")
                && e.message.contains("mode 0755"),
            "{}",
            e.message
        );
    }

    #[test]
    fn sticky_directories_let_only_owners_and_root_remove() {
        let tmp = rec(ObjectKind::Directory, 0o1777, 0, 0);
        assert!(check_sticky(&OWNER, &tmp, 1001, "unlink").is_ok());
        let e = check_sticky(&OTHER, &tmp, 1001, "unlink").unwrap_err();
        assert_eq!(e.errno, Errno::EPERM);
        assert!(check_sticky(&Cred::ROOT, &tmp, 1001, "unlink").is_ok());
        let owned = rec(ObjectKind::Directory, 0o1777, 1002, 0);
        assert!(!sticky_applies(&OTHER, &owned), "the directory's owner");
        let plain = rec(ObjectKind::Directory, 0o777, 0, 0);
        assert!(check_sticky(&OTHER, &plain, 1001, "unlink").is_ok());
    }

    #[test]
    fn data_rights_follow_the_mode_except_for_owner_and_root() {
        assert_eq!(data_rights(&OTHER, &file(0o644)), READ);
        assert_eq!(data_rights(&OTHER, &file(0o640)), 0);
        assert_eq!(data_rights(&OTHER, &file(0o606)), READ | WRITE);
        assert_eq!(data_rights(&member(), &file(0o620)), WRITE);
        assert_eq!(data_rights(&OWNER, &file(0o000)), READ | WRITE);
        assert_eq!(data_rights(&Cred::ROOT, &file(0o000)), READ | WRITE);
    }

    fn set(mask: &[SetAttrBits], mode: u32, uid: u32, gid: u32) -> SetAttrRequest {
        SetAttrRequest {
            handle: 0x42,
            mask: mask.iter().fold(0, |m, b| m | *b as u32),
            mode,
            uid,
            gid,
            ..Default::default()
        }
    }

    fn errno(r: Result<u32>) -> Option<Errno> {
        r.err().map(|e| e.errno)
    }

    #[test]
    fn chmod_by_owner_or_root_and_setgid_only_within_ones_groups() {
        use SetAttrBits::*;
        let f = file(0o644);
        assert_eq!(
            check_setattr(&OWNER, &f, &set(&[SetMode], 0o600, 0, 0)).ok(),
            Some(0o600)
        );
        assert_eq!(
            errno(check_setattr(&OTHER, &f, &set(&[SetMode], 0o666, 0, 0))),
            Some(Errno::EPERM)
        );
        assert!(check_setattr(&Cred::ROOT, &f, &set(&[SetMode], 0o7777, 0, 0)).is_ok());
        // Owner 1001 is not in group 100: setgid is dropped, the rest applies.
        assert_eq!(
            check_setattr(&OWNER, &f, &set(&[SetMode], 0o2755, 0, 0)).ok(),
            Some(0o755)
        );
        let in_group = Cred::new(1001, 1001).with_groups(&[100]);
        assert_eq!(
            check_setattr(&in_group, &f, &set(&[SetMode], 0o2755, 0, 0)).ok(),
            Some(0o2755)
        );
        // Clearing setuid before a write: allowed to a writer only.
        let suid = file(0o4666);
        assert_eq!(
            check_setattr(&OTHER, &suid, &set(&[SetMode], 0o666, 0, 0)).ok(),
            Some(0o666)
        );
        assert_eq!(
            errno(check_setattr(
                &OTHER,
                &file(0o4644),
                &set(&[SetMode], 0o644, 0, 0)
            )),
            Some(Errno::EPERM)
        );
    }

    #[test]
    fn chown_by_root_only_and_chgrp_by_owner_to_its_groups() {
        use SetAttrBits::*;
        let f = file(0o6755);
        assert_eq!(
            errno(check_setattr(&OWNER, &f, &set(&[SetUid], 0, 1002, 0))),
            Some(Errno::EPERM)
        );
        assert!(
            check_setattr(&OWNER, &f, &set(&[SetUid], 0, 1001, 0)).is_ok(),
            "to itself"
        );
        // Root may; setuid goes, and setgid too as the group may execute.
        assert_eq!(
            check_setattr(&Cred::ROOT, &f, &set(&[SetUid], 0, 1002, 0)).ok(),
            Some(0o755)
        );
        let owner = Cred::new(1001, 1001).with_groups(&[200]);
        assert_eq!(
            check_setattr(&owner, &f, &set(&[SetGid], 0, 0, 200)).ok(),
            Some(0o755)
        );
        assert_eq!(
            errno(check_setattr(&owner, &f, &set(&[SetGid], 0, 0, 300))),
            Some(Errno::EPERM)
        );
        assert_eq!(
            errno(check_setattr(&member(), &f, &set(&[SetGid], 0, 0, 100))),
            Some(Errno::EPERM)
        );
        // Directories keep their setgid bit.
        let d = rec(ObjectKind::Directory, 0o2775, 1001, 100);
        assert_eq!(
            check_setattr(&owner, &d, &set(&[SetGid], 0, 0, 200)).ok(),
            Some(0o2775)
        );
    }

    #[test]
    fn times_to_now_need_write_and_given_times_need_ownership() {
        use SetAttrBits::*;
        let f = file(0o646);
        let now = set(&[SetAtimeNow, SetMtimeNow], 0, 0, 0);
        let given = set(&[SetAtime, SetMtime], 0, 0, 0);
        assert!(check_setattr(&OTHER, &f, &now).is_ok(), "others may write");
        assert_eq!(errno(check_setattr(&OTHER, &f, &given)), Some(Errno::EPERM));
        assert!(check_setattr(&OWNER, &file(0o444), &given).is_ok());
        assert_eq!(
            errno(check_setattr(&member(), &f, &now)),
            Some(Errno::EACCES)
        );
    }

    #[test]
    fn xattrs_by_namespace() {
        let f = file(0o640);
        assert!(check_xattr(&member(), &f, "user.a", false).is_ok());
        assert_eq!(
            check_xattr(&member(), &f, "user.a", true)
                .unwrap_err()
                .errno,
            Errno::EACCES
        );
        assert_eq!(
            check_xattr(&OTHER, &f, "user.a", false).unwrap_err().errno,
            Errno::EACCES
        );
        assert_eq!(
            check_xattr(&OWNER, &f, "trusted.a", false)
                .unwrap_err()
                .errno,
            Errno::ENODATA
        );
        assert_eq!(
            check_xattr(&OWNER, &f, "trusted.a", true)
                .unwrap_err()
                .errno,
            Errno::EPERM
        );
        assert!(check_xattr(&OTHER, &f, "security.capability", false).is_ok());
        assert_eq!(
            check_xattr(&OWNER, &f, "security.capability", true)
                .unwrap_err()
                .errno,
            Errno::EPERM
        );
        assert!(check_xattr(&Cred::ROOT, &f, "trusted.a", true).is_ok());
    }
}
