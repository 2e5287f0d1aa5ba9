//! Extended attributes: the kernel's size-probe protocol, the namespaces
//! Shoal refuses, and a short-lived memory of files that have no
//! `security.capability`.
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
//!
//! Why the memory: before every write() the kernel asks the file system for
//! `security.capability` (to drop file capabilities on modification). Without
//! it each write would pay a second round trip to a metadata server. The
//! answer "absent" is kept for the attribute TTL, like any cached attribute,
//! and dropped at once when this mount sets or removes that attribute.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fuser::ReplyXattr;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Handle;

pub const CAPABILITY: &str = "security.capability";

/// Entries kept before the memory is emptied and starts again.
const MAX_ENTRIES: usize = 100_000;

/// Whether `name` is in a namespace the mount refuses (see above).
pub fn refused(name: &str) -> bool {
    name.starts_with("system.") || name == "security.selinux"
}

pub fn refusal(name: &str) -> ShoalError {
    ShoalError::new(
        Errno::ENOTSUP,
        format!("{name}: POSIX ACLs and SELinux labels are not supported by Shoal"),
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

/// Files known, for `ttl`, to have no `security.capability`.
pub struct NoCapability {
    ttl: Duration,
    seen: Mutex<HashMap<Handle, Instant>>,
}

impl NoCapability {
    pub fn new(ttl: Duration) -> Self {
        NoCapability {
            ttl,
            seen: Mutex::new(HashMap::new()),
        }
    }

    pub fn known_absent(&self, h: Handle) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(&h).is_some_and(|at| at.elapsed() < self.ttl)
    }

    pub fn absent(&self, h: Handle) {
        if self.ttl.is_zero() {
            return;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= MAX_ENTRIES {
            seen.clear();
        }
        seen.insert(h, Instant::now());
    }

    pub fn changed(&self, h: Handle) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&h);
    }
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
        assert!(!refused("user.system.") && !refused(CAPABILITY));
    }

    #[test]
    fn absence_expires_and_is_dropped_on_change() {
        let m = NoCapability::new(Duration::from_millis(30));
        assert!(!m.known_absent(3));
        m.absent(3);
        assert!(m.known_absent(3));
        m.changed(3);
        assert!(!m.known_absent(3));
        m.absent(3);
        std::thread::sleep(Duration::from_millis(40));
        assert!(!m.known_absent(3));
        let off = NoCapability::new(Duration::ZERO);
        off.absent(1);
        assert!(!off.known_absent(1));
    }
}
