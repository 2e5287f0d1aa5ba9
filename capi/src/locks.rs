//! fcntl(2) record locks and flock(2) on libshoal's descriptors, for the
//! whole cluster (`Client::lock`): a lock taken here excludes processes on
//! every other client, the mount's included.
//!
//! Owners, as Linux has them: a POSIX lock (F_SETLK, F_SETLKW, F_GETLK) is
//! the process's, and a close of any of its descriptors of the file lets
//! all of them go; an OFD lock (F_OFD_*) is the open file's, shared by its
//! duplicates, and goes at its last close. flock(2) is a whole-file lock of
//! the open file, kept apart from fcntl locks as Linux keeps them (neither
//! meets the other), and meets the mount's flock locks of the same file.

use std::sync::Arc;

use shoal_client::{LockAsk, LockConflict, LockKind};

use crate::error::{about, err, Result};
use crate::files::{self, OpenFile};
use crate::lock_wait;
use crate::session;

/// The end of a lock "to the end of the file", as the kernel writes it
/// (OFFSET_MAX), so that the mount's locks and these agree.
const TO_END: u64 = i64::MAX as u64;

/// Owners of OFD and flock locks: the open file's address with this bit,
/// never a pid.
const OPEN_FILE_OWNER: u64 = 1 << 63;

/// Who owns a lock of `cmd` taken through `file`.
fn owner_of(cmd: i32, file: &Arc<OpenFile>) -> u64 {
    match cmd {
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => open_file_owner(file),
        _ => u64::from(std::process::id()),
    }
}

fn open_file_owner(file: &Arc<OpenFile>) -> u64 {
    Arc::as_ptr(file) as u64 | OPEN_FILE_OWNER
}

/// fcntl(2) of a lock command: F_GETLK, F_SETLK, F_SETLKW and their OFD
/// forms, on `lock` as fcntl takes it.
pub fn fcntl(fd: i32, cmd: i32, lock: &mut libc::flock) -> Result<()> {
    let file = files::get(fd)?;
    let kind = match i32::from(lock.l_type) {
        libc::F_RDLCK => LockKind::LockRead,
        libc::F_WRLCK => LockKind::LockWrite,
        libc::F_UNLCK => LockKind::LockUnlock,
        t => return Err(err(libc::EINVAL, format!("{fd}: lock type {t}"))),
    };
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    if ofd && lock.l_pid != 0 {
        return Err(err(libc::EINVAL, format!("{fd}: OFD lock with l_pid set")));
    }
    let (start, end) = range(&file, lock)?;
    let ask = LockAsk {
        owner: owner_of(cmd, &file),
        kind,
        start,
        end,
        pid: std::process::id(),
        flock: false,
    };
    let s = session::current()?;
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        if kind == LockKind::LockUnlock {
            return Err(err(libc::EINVAL, format!("{fd}: F_GETLK of F_UNLCK")));
        }
        let found = s
            .run(s.client.test_lock(file.handle, ask))
            .map_err(about(&file.path))?;
        report(lock, found);
        return Ok(());
    }
    let (allowed, mode) = match kind {
        LockKind::LockRead => (file.readable, "reading"),
        LockKind::LockWrite => (file.writable, "writing"),
        LockKind::LockUnlock => (true, ""),
    };
    if !allowed {
        return Err(err(libc::EBADF, format!("{fd}: not open for {mode}")));
    }
    let taken = if matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW) {
        lock_wait::lock(&s, file.handle, ask)
    } else {
        s.run(s.client.lock(file.handle, ask, false))
    };
    taken.map_err(about(&file.path))?;
    granted(&file, kind);
    Ok(())
}

/// After a lock is granted, what this process read ahead of the file goes:
/// the last holder may have written it.
fn granted(file: &Arc<OpenFile>, kind: LockKind) {
    if kind != LockKind::LockUnlock {
        files::data_changed(file.handle, Some(file));
    }
}

/// flock(2): LOCK_SH, LOCK_EX (with LOCK_NB: EWOULDBLOCK rather than a
/// wait) and LOCK_UN, over the whole file.
pub fn flock(fd: i32, op: i32) -> Result<()> {
    let file = files::get(fd)?;
    let kind = match op & !libc::LOCK_NB {
        libc::LOCK_SH => LockKind::LockRead,
        libc::LOCK_EX => LockKind::LockWrite,
        libc::LOCK_UN => LockKind::LockUnlock,
        _ => return Err(err(libc::EINVAL, format!("{fd}: flock operation {op}"))),
    };
    let ask = LockAsk {
        owner: open_file_owner(&file),
        kind,
        start: 0,
        end: TO_END,
        pid: std::process::id(),
        flock: true,
    };
    let s = session::current()?;
    let taken = if op & libc::LOCK_NB == 0 {
        lock_wait::lock(&s, file.handle, ask)
    } else {
        s.run(s.client.lock(file.handle, ask, false))
    };
    taken.map_err(about(&file.path))?;
    granted(&file, kind);
    Ok(())
}

/// What a close of `file` lets go: the process's POSIX locks on it, and,
/// at the open file's last close (`last`), its OFD and flock locks.
pub fn closed(file: &Arc<OpenFile>, last: bool) -> Result<()> {
    let s = session::current()?;
    if !s.client.holds_locks(file.handle) {
        return Ok(());
    }
    let h = file.handle;
    s.run(
        s.client
            .unlock_owner(h, u64::from(std::process::id()), false),
    )?;
    if last {
        s.run(s.client.unlock_owner(h, open_file_owner(file), false))?;
        s.run(s.client.unlock_owner(h, open_file_owner(file), true))?;
    }
    Ok(())
}

/// The bytes `lock` names (l_whence, l_start, l_len), as (start, end
/// included).
fn range(file: &OpenFile, lock: &libc::flock) -> Result<(u64, u64)> {
    let base: i64 = match i32::from(lock.l_whence) {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => file.offset.load(std::sync::atomic::Ordering::SeqCst) as i64,
        libc::SEEK_END => {
            let s = session::current()?;
            s.client.forget(file.handle);
            s.run(s.client.getattr(file.handle))
                .map_err(about(&file.path))?
                .size as i64
        }
        w => return Err(err(libc::EINVAL, format!("lock l_whence {w}"))),
    };
    let invalid = || err(libc::EINVAL, "lock range before the start of the file");
    let start = base.checked_add(lock.l_start).ok_or_else(invalid)?;
    // A negative length locks the bytes before start.
    let (start, end) = match lock.l_len {
        0 => (start, i64::MAX),
        len if len > 0 => (start, start.saturating_add(len - 1)),
        len => (start.checked_add(len).ok_or_else(invalid)?, start - 1),
    };
    if start < 0 || end < start {
        return Err(invalid());
    }
    Ok((start as u64, end as u64))
}

/// Fills `lock` with what F_GETLK found: F_UNLCK, or the lock in the way.
fn report(lock: &mut libc::flock, found: Option<LockConflict>) {
    let Some(c) = found else {
        lock.l_type = libc::F_UNLCK as i16;
        return;
    };
    lock.l_type = match c.kind {
        LockKind::LockWrite => libc::F_WRLCK,
        _ => libc::F_RDLCK,
    } as i16;
    lock.l_whence = libc::SEEK_SET as i16;
    lock.l_start = c.start.min(TO_END) as i64;
    lock.l_len = if c.end >= TO_END {
        0
    } else {
        (c.end - c.start + 1) as i64
    };
    lock.l_pid = c.pid as i32;
}
