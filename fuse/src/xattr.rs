//! Extended attributes: the kernel's size-probe protocol, and the names
//! Shoal refuses.
//!
//! Refused with EOPNOTSUPP, so that tools fall back or stop asking:
//! - `system.*`: the kernel's own attributes (POSIX ACLs above all), with a
//!   meaning Shoal does not implement. Stored as plain bytes they would be
//!   worse than refused: `cp -a` would "set" an ACL instead of calling chmod,
//!   and the copy would keep the restrictive mode it was created with.
//! - `security.selinux`: SELinux labels FUSE files from its policy
//!   (genfscon), never from the file system, so a request reaching us means
//!   SELinux is off and the label has no use. Refused, `ls -l` stops asking
//!   for it after the first file instead of paying a server round trip per
//!   file (which also let the kernel's 100 ms attribute cache expire midway).
//! - `security.capability`: file capabilities (what `setcap` sets) are not
//!   stored on Shoal, as on NFS: a program that needs them belongs on a local
//!   disk. Before the first write to a file whose attributes it refreshed, the
//!   kernel asks for this attribute, to strip the capabilities of a modified
//!   program; answering that here, without a server, makes a small write one
//!   message instead of two (a same-run A/B: writes 1.63x faster in
//!   smallfile). Stored, it could also not be trusted: a mount that had seen
//!   it absent would miss another mount's `setcap` for as long as it
//!   remembered, and a write there would keep capabilities the kernel should
//!   have stripped. Refused, `exec` grants no file capabilities from Shoal.

use std::ffi::OsStr;

use fuser::ReplyXattr;
use shoal_proto::error::{Errno, Result, ShoalError};

/// Whether `name` is in a namespace the mount refuses (see above).
pub fn refused(name: &str) -> bool {
    name.starts_with("system.") || name == "security.selinux" || name == "security.capability"
}

pub fn refusal(name: &str) -> ShoalError {
    ShoalError::new(
        Errno::ENOTSUP,
        format!(
            "{name}: POSIX ACLs, SELinux labels and file capabilities are not supported by Shoal"
        ),
    )
}

/// An xattr name from the kernel, if the mount accepts it: UTF-8 (Shoal's
/// names are strings) and not in a refused namespace.
pub fn xattr_name(name: &OsStr) -> Result<String> {
    let name = name
        .to_str()
        .ok_or_else(|| ShoalError::invalid("xattr name is not UTF-8"))?;
    if refused(name) {
        return Err(refusal(name));
    }
    Ok(name.to_owned())
}

/// Answers a getxattr/listxattr request: `size == 0` asks for the length,
/// a buffer too small gets ERANGE, otherwise the bytes.
pub fn reply_value(reply: ReplyXattr, size: u32, value: &[u8]) {
    let Ok(len) = u32::try_from(value.len()) else {
        reply.error(fuser::Errno::E2BIG);
        return;
    };
    if size == 0 {
        reply.size(len);
    } else if len > size {
        reply.error(fuser::Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

/// The listxattr format: every name followed by a NUL. Refused names stored
/// by other clients are left out, as their get would fail.
pub fn name_list(names: &[String]) -> Vec<u8> {
    let shown = || names.iter().filter(|n| !refused(n));
    let mut out = Vec::with_capacity(shown().map(|n| n.len() + 1).sum());
    for n in shown() {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_nul_terminated() {
        assert_eq!(
            name_list(&["user.a".into(), "user.bc".into()]),
            b"user.a\0user.bc\0"
        );
        assert!(name_list(&[]).is_empty());
        let with_acl = ["system.posix_acl_access".into(), "user.x".into()];
        assert_eq!(name_list(&with_acl), b"user.x\0");
        assert!(refused("system.posix_acl_default") && refused("security.selinux"));
        assert!(refused("security.capability"));
        assert!(!refused("user.system.") && !refused("security.capability2"));
        assert!(!refused("user.security.capability") && !refused("trusted.x"));
    }
}
