//! The mount's own permission checks, made instead of the kernel's.
//!
//! The mount does not ask for `default_permissions`. With it, the kernel
//! checks every path step and open against the attributes it caches, and
//! because each create or unlink marks the directory's attributes stale
//! (`fuse_dir_changed`), the next create or unlink there first costs a
//! GETATTR round trip: one FUSE request of five per create, one of two per
//! unlink (bench/results/mount-default-permissions-ab.md: 1.17x creates and
//! 1.27x unlinks without it). Without it the kernel checks nothing itself
//! but that a file to execute has some x bit, so what the servers cannot
//! see is checked here, with [`Cred::may`], the servers' own rule:
//!
//! - opens, answered by the mount: read or write as the access mode and
//!   O_TRUNC ask, execute for an execve;
//! - opendir (read), access(2) and chdir (the bits asked), and a truncate
//!   by path (write; through a descriptor, the open was checked);
//! - search along a path: a walk over cached entries never reaches the
//!   mount, so the entries of a directory that not every user may search
//!   are given to the kernel for no time ([`kernel_may_keep_entries`]):
//!   every step through one is a LOOKUP, which the client answers per
//!   caller (its caches are kept per credential) or asks the servers.
//!
//! Namespace changes, setattr, extended attributes and lookups reach the
//! servers, which check them (docs/permissions.md).

use shoal_client::{Attr, FileKind};
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
/// access mode says, and write for O_TRUNC.
pub fn open_wants(flags: i32) -> u32 {
    if flags & FMODE_EXEC != 0 {
        return X;
    }
    let mode = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => R,
        libc::O_WRONLY => W,
        _ => R | W,
    };
    if flags & libc::O_TRUNC != 0 {
        mode | W
    } else {
        mode
    }
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

fn rights_name(want: u32, is_dir: bool) -> String {
    let x = if is_dir { "search" } else { "execute" };
    [(R, "read"), (W, "write"), (X, x)]
        .into_iter()
        .filter(|(bit, _)| want & bit != 0)
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// Whether the kernel may keep entries of directory `dir` between walks:
/// only if every user may search it, since a walk over kept entries is
/// checked by nobody.
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
        assert_eq!(open_wants(libc::O_RDONLY | libc::O_TRUNC), R | W);
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
