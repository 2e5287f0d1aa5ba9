//! Attribute changes held back and sent as one: `tar -x`, `cp -p` and
//! `rsync` follow each file they create with futimens, fchown and fchmod on
//! its descriptor, three durable round trips where one carries all three.
//!
//! A change through a descriptor whose open created the file is held while
//! the library knows exactly what the file is: from the create until a
//! change to it is sent (held or not). It is held when it can only set
//! times or widen access: a chmod that adds permission bits (never setuid,
//! setgid or sticky), a chown that changes neither id, any utimens; and only
//! by the file's owner or root, so that the server cannot refuse it. Held
//! changes to one file merge (the later value wins) and are sent as one
//! setattr before this process's next call of any other kind (`ffi::call`
//! sends them first), at `shoal_flush`, at exit(3) and (through the preload
//! library) at exec; not at `_exit(2)`. So this process sees its changes at
//! once, and another one sees them one call later; until then it sees the
//! file as its creator made it, never more open than the creator asked. A
//! change that would narrow access, or that the server might refuse, is sent
//! at once, as are all changes through other descriptors.
//!
//! If sending a held change fails, the call that sent it fails with that
//! error (a close still closes), as a write-back error reaches a later call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use shoal_client::{Attr, Cred, FileKind, SetAttr};

use crate::error::Result;
use crate::files::OpenFile;
use crate::session;

/// The change held, to one file (a change to another sends it first).
pub struct Held {
    file: Arc<OpenFile>,
    /// The file's attributes as they will be once `set` is applied.
    attr: Attr,
    set: SetAttr,
    /// The process that held it: a forked child does not send its parent's.
    pid: u32,
}

static HELD: Mutex<Option<Held>> = Mutex::new(None);
/// Whether HELD may hold something: lets every call skip the lock.
static HOLDING: AtomicBool = AtomicBool::new(false);

pub fn lock() -> MutexGuard<'static, Option<Held>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `set` on a file with attributes `a`, by `cred`, can only set
/// times or widen access, and the server will accept it.
fn holdable(a: &Attr, cred: Cred, set: &SetAttr) -> bool {
    const SPECIAL: u32 = 0o7000;
    let owner_or_root = cred.is_root() || cred.uid == a.uid;
    let mode_widens = set
        .mode
        .is_none_or(|m| m & SPECIAL == 0 && a.mode & SPECIAL == 0 && m & a.mode == a.mode);
    let ids_same = set.uid.is_none_or(|u| u == a.uid) && set.gid.is_none_or(|g| g == a.gid);
    a.kind == FileKind::File && owner_or_root && set.size.is_none() && mode_widens && ids_same
}

/// Holds `set` on `file` if it may be (see the module's rules); false if the
/// caller must send it now. A change held for another file is sent first.
pub fn hold(file: Arc<OpenFile>, cred: Cred, set: &SetAttr) -> Result<bool> {
    let Some(created) = &file.created else {
        return Ok(false);
    };
    let pid = std::process::id();
    let mut held = lock();
    if held
        .as_ref()
        .is_some_and(|h| h.file.handle != file.handle || h.pid != pid)
    {
        let other = held.take();
        drop(held);
        send(other)?;
        held = lock();
    }
    let attr = held.as_ref().map_or(created, |h| &h.attr);
    if !file.fresh.load(Ordering::Acquire) || !holdable(attr, cred, set) {
        return Ok(false);
    }
    let h = held.get_or_insert_with(|| Held {
        attr: created.clone(),
        file: file.clone(),
        set: SetAttr::default(),
        pid,
    });
    h.set.mode = set.mode.or(h.set.mode);
    h.set.uid = set.uid.or(h.set.uid);
    h.set.gid = set.gid.or(h.set.gid);
    h.set.atime = set.atime.or(h.set.atime);
    h.set.mtime = set.mtime.or(h.set.mtime);
    if let Some(m) = set.mode {
        h.attr.mode = m;
    }
    HOLDING.store(true, Ordering::Release);
    Ok(true)
}

/// Whether a change is held.
pub fn holding() -> bool {
    HOLDING.load(Ordering::Acquire)
}

/// Sends the held change, if any.
pub fn flush() -> Result<()> {
    if !HOLDING.load(Ordering::Acquire) {
        return Ok(());
    }
    let mut held = lock();
    if held.as_ref().is_some_and(|h| h.pid != std::process::id()) {
        // A forked child's copy (the parent sends it), or a vfork child
        // sharing the parent's memory: left where it is.
        return Ok(());
    }
    let held = held.take();
    HOLDING.store(false, Ordering::Release);
    send(held)
}

fn send(held: Option<Held>) -> Result<()> {
    let Some(h) = held else { return Ok(()) };
    if h.pid != std::process::id() {
        return Ok(()); // a forked child's copy of its parent's change
    }
    // Sent: from now on the server says what the file is.
    h.file.fresh.store(false, Ordering::Release);
    let s = session::current()?;
    s.run(s.client.setattr(h.file.handle, &h.set)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_client::SetTime;

    fn file(mode: u32, uid: u32) -> Attr {
        Attr {
            handle: 1,
            kind: FileKind::File,
            mode,
            uid,
            gid: uid,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            nlink: 1,
            rdev: 0,
        }
    }

    fn mode(m: u32) -> SetAttr {
        SetAttr {
            mode: Some(m),
            ..Default::default()
        }
    }

    #[test]
    fn only_changes_that_set_times_or_widen_access_are_held() {
        let user = Cred::new(1000, 1000);
        let root = Cred::new(0, 0);
        let a = file(0o600, 1000);
        assert!(holdable(&a, user, &mode(0o644)), "adds read bits");
        assert!(holdable(&a, user, &mode(0o600)), "changes nothing");
        assert!(!holdable(&a, user, &mode(0o400)), "narrows");
        assert!(!holdable(&a, user, &mode(0o4644)), "setuid");
        assert!(
            !holdable(&file(0o2600, 1000), user, &mode(0o2644)),
            "setgid stays"
        );
        assert!(
            !holdable(&a, Cred::new(1001, 1001), &mode(0o644)),
            "not the owner"
        );
        assert!(holdable(&a, root, &mode(0o644)), "root");
        let chown = |uid, gid| SetAttr {
            uid: Some(uid),
            gid: Some(gid),
            ..Default::default()
        };
        assert!(holdable(&a, user, &chown(1000, 1000)), "the same ids");
        assert!(!holdable(&a, root, &chown(0, 0)), "gives the file away");
        let times = SetAttr {
            mtime: Some(SetTime::At(5)),
            atime: Some(SetTime::Now),
            ..Default::default()
        };
        assert!(holdable(&a, user, &times));
        let size = SetAttr {
            size: Some(0),
            ..Default::default()
        };
        assert!(!holdable(&a, user, &size), "a truncate is data");
        let mut dir = file(0o700, 1000);
        dir.kind = FileKind::Directory;
        assert!(!holdable(&dir, user, &mode(0o755)), "files only");
    }
}
