//! The mount's own permission checks, made instead of the kernel's.
//!
//! The mount does not ask for `default_permissions`. With it, the kernel
//! checks every path step and open against the attributes it caches, and
//! because each create or unlink marks the directory's attributes stale
//! (`fuse_dir_changed`), the next create or unlink there first costs a
//! GETATTR round trip: one FUSE request of five per create, one of two per
//! unlink (bench/results/changes.md: 1.17x creates and
//! 1.27x unlinks without it). Without it the kernel checks nothing itself
//! but that a file to execute has some x bit, so what the servers cannot
//! see is checked here, with [`Cred::may`], the servers' own rule:
//!
//! - opens, answered by the mount: read or write as the access mode asks,
//!   execute for an execve;
//! - opendir (read), access(2) and chdir (the bits asked);
//! - a truncate, unless through a descriptor open for writing (whose open
//!   was checked): by path, or O_TRUNC (which arrives as one, without a
//!   handle);
//! - a hard link to another user's file, under `protected_hardlinks`;
//! - changes of `user.*` extended attributes (write) and reads of them
//!   (read), some of which the client answers itself (the per-file write
//!   threshold, the mount's statistics);
//! - search along a path: a walk over cached entries never reaches the
//!   mount, so the entries of a directory that not every user may search
//!   are given to the kernel for no time ([`kernel_may_keep_entries`]):
//!   every step through one is a LOOKUP, which the client answers per
//!   caller (its caches are per credential) or asks the servers.
//!
//! Namespace changes, setattr and lookups reach the servers, which check
//! them (docs/permissions.md). Not checked by anyone: the opens of FIFOs and
//! UNIX sockets, for which the kernel asks the mount nothing (devices are
//! not opened at all: the mount is nodev).

use shoal_client::{Attr, Client, FileKind};
use shoal_proto::cred::rights_name;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Cred;

/// Rights asked for, as in each class of a mode.
pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// The flag the kernel adds to the open of a file execve runs
/// (`__FMODE_EXEC`, include/linux/fs.h).
const FMODE_EXEC: i32 = 0x20;

/// The rights an open with `flags` needs: execute for execve (which reads
/// the file without needing the read right), else read and write as the
/// access mode says. (O_TRUNC never arrives here: without
/// FUSE_ATOMIC_O_TRUNC the kernel sends it as a setattr of the size.)
pub fn open_wants(flags: i32) -> u32 {
    if flags & FMODE_EXEC != 0 {
        return X;
    }
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY => R,
        libc::O_WRONLY => W,
        _ => R | W,
    }
}

/// `cred` as the servers see it, for the mount's checks: root squashed if
/// the cluster of `c` squashes.
pub fn as_servers_see(cred: Cred, c: &Client) -> Cred {
    if c.config().settings.root_squash {
        cred.squashed()
    } else {
        cred
    }
}

/// The caller `c` acts for, as the servers see it.
pub fn caller_of(c: &Client) -> Cred {
    as_servers_see(c.cred(), c)
}

/// EACCES unless `cred` has every right in `want` on the object of `a`;
/// `doing` names the request in the message.
pub fn require(cred: &Cred, a: &Attr, want: u32, doing: &str) -> Result<()> {
    let is_dir = a.kind == FileKind::Directory;
    if cred.may(a.mode & 0o7777, a.uid, a.gid, is_dir, want) {
        return Ok(());
    }
    Err(ShoalError::new(
        Errno::EACCES,
        format!(
            "{doing} of {:#x}: uid {} lacks {} (mode {:04o}, owner {}:{})",
            a.handle,
            cred.uid,
            rights_name(want, is_dir),
            a.mode & 0o7777,
            a.uid,
            a.gid
        ),
    ))
}

/// The right an extended attribute `name` needs (read, or write to change
/// it), if the mount must check it: `user.*` ones, by the object's mode, as
/// Linux; the kernel checks the other namespaces itself (trusted.* and
/// security.* by capability), and the servers check what reaches them.
pub fn xattr_wants(name: &str, change: bool) -> Option<u32> {
    name.starts_with("user.")
        .then_some(if change { W } else { R })
}

/// EPERM unless `cred` may give the file of `a` another name under
/// `protected_hardlinks` (fs/namei.c `may_linkat`): its owner and root may;
/// anyone else only for a regular file that is neither setuid nor setgid
/// and executable, and that they may read and write. (The kernel makes the
/// other half of that check, but its read-and-write part asks the mount's
/// permission, which it no longer has.)
pub fn require_hardlink(cred: &Cred, a: &Attr) -> Result<()> {
    let mode = a.mode & 0o7777;
    let safe_source = a.kind == FileKind::File
        && mode & 0o4000 == 0
        && mode & 0o2010 != 0o2010
        && cred.may(mode, a.uid, a.gid, false, R | W);
    if cred.is_root() || cred.uid == a.uid || safe_source {
        return Ok(());
    }
    Err(ShoalError::new(
        Errno::EPERM,
        format!(
            "link to {:#x}: uid {} neither owns it nor may read and write it              (mode {mode:04o}, owner {}; fs.protected_hardlinks is on)",
            a.handle, cred.uid, a.uid
        ),
    ))
}

/// Whether the kernel asks for hard links to be protected
/// (`fs.protected_hardlinks`, on by default on Debian).
pub fn hardlinks_protected() -> bool {
    std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").is_ok_and(|v| v.trim() == "1")
}

/// Whether the kernel may keep entries of directory `dir` between walks:
/// only if every user may search it, since a walk over the kernel's cached
/// entries is checked by nobody.
pub fn kernel_may_keep_entries(dir: &Attr) -> bool {
    dir.mode & 0o111 == 0o111
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: FileKind, mode: u32) -> Attr {
        Attr {
            handle: 7,
            kind,
            mode,
            uid: 1001,
            gid: 1001,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            nlink: 1,
            rdev: 0,
        }
    }

    #[test]
    fn an_open_asks_for_what_its_flags_do() {
        assert_eq!(open_wants(libc::O_RDONLY), R);
        assert_eq!(open_wants(libc::O_WRONLY | libc::O_APPEND), W);
        assert_eq!(open_wants(libc::O_RDWR), R | W);
        assert_eq!(open_wants(libc::O_RDONLY | FMODE_EXEC), X);
    }

    #[test]
    fn the_owner_of_a_read_only_file_may_not_write_it_but_root_may() {
        let a = attr(FileKind::File, 0o100444);
        let alice = Cred::new(1001, 1001);
        assert!(require(&alice, &a, R, "open").is_ok());
        let e = require(&alice, &a, W, "open").unwrap_err();
        assert_eq!(e.errno, Errno::EACCES);
        assert!(e.to_string().contains("lacks write"), "{e}");
        assert!(require(&Cred::ROOT, &a, R | W, "open").is_ok());
        assert!(require(&Cred::ROOT, &a, X, "open").is_err());
    }

    #[test]
    fn a_hard_link_to_another_users_file_needs_read_and_write() {
        let bob = Cred::new(1002, 1002);
        let alice = Cred::new(1001, 1001);
        assert!(require_hardlink(&alice, &attr(FileKind::File, 0o100600)).is_ok());
        assert!(require_hardlink(&Cred::ROOT, &attr(FileKind::File, 0o100600)).is_ok());
        let e = require_hardlink(&bob, &attr(FileKind::File, 0o100644)).unwrap_err();
        assert_eq!(e.errno, Errno::EPERM);
        assert!(require_hardlink(&bob, &attr(FileKind::File, 0o100666)).is_ok());
        assert!(require_hardlink(&bob, &attr(FileKind::File, 0o104666)).is_err());
        assert!(require_hardlink(&bob, &attr(FileKind::File, 0o102676)).is_err());
        assert!(require_hardlink(&bob, &attr(FileKind::Fifo, 0o10666)).is_err());
    }

    #[test]
    fn only_user_xattrs_are_the_mounts_to_check() {
        assert_eq!(xattr_wants("user.shoal.write_threshold", true), Some(W));
        assert_eq!(xattr_wants("user.note", false), Some(R));
        assert_eq!(xattr_wants("trusted.x", true), None);
    }

    #[test]
    fn only_directories_everyone_may_search_keep_their_entries() {
        assert!(kernel_may_keep_entries(&attr(FileKind::Directory, 0o40755)));
        assert!(kernel_may_keep_entries(&attr(FileKind::Directory, 0o41711)));
        assert!(!kernel_may_keep_entries(&attr(
            FileKind::Directory,
            0o40750
        )));
        assert!(!kernel_may_keep_entries(&attr(
            FileKind::Directory,
            0o40700
        )));
    }
}
