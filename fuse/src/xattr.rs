//! Extended attributes: the kernel's size-probe protocol, and a short-lived
//! memory of files that have no `security.capability`.
//!
//! Why the memory: before every write() the kernel asks the file system for
//! `security.capability` (to drop file capabilities on modification). Without
//! it each write would pay a second round trip to a metadata server. The
//! answer "absent" is kept for the attribute TTL, like any cached attribute,
//! and dropped at once when this mount sets or removes that attribute.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fuser::ReplyXattr;
use shoal_proto::Handle;

pub const CAPABILITY: &str = "security.capability";

/// Entries kept before the memory is emptied and starts again.
const MAX_ENTRIES: usize = 100_000;

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

/// The listxattr format: every name followed by a NUL.
pub fn name_list(names: &[String]) -> Vec<u8> {
    let mut out = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
    for n in names {
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
        assert_eq!(name_list(&["user.a".into(), "user.bc".into()]), b"user.a\0user.bc\0");
        assert!(name_list(&[]).is_empty());
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
