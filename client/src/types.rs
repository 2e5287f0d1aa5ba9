//! What the client API hands out: credentials, attributes, entries, layouts.

use shoal_proto::msg::ObjectRecord;
use shoal_proto::{Handle, ObjectKind};

/// Who makes a request: ownership of new objects and, on the servers,
/// permission checks (uid, gid and supplementary groups).
pub use shoal_proto::Cred;

/// The credentials of this process: real uid and gid, and its
/// supplementary groups from getgroups(2).
pub fn current_cred() -> Cred {
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Cred::new(uid, gid).with_groups(&process_groups())
}

/// This process's supplementary groups (empty if getgroups fails).
fn process_groups() -> Vec<u32> {
    // SAFETY: with a size of 0, getgroups only returns the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: the buffer holds `n` gids, the size we pass.
    let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    groups.truncate(got.max(0) as usize);
    groups
}

/// The kind of a namespace object as users see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    Directory,
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// A file is a metafile, or a datafile named directly by its entry (a
    /// file of a no_metafile directory, [Kuhn 2008]).
    pub(crate) fn from_object(kind: ObjectKind) -> Option<FileKind> {
        match kind {
            ObjectKind::Directory => Some(FileKind::Directory),
            ObjectKind::Metafile | ObjectKind::Datafile => Some(FileKind::File),
            ObjectKind::Symlink => Some(FileKind::Symlink),
            ObjectKind::Fifo => Some(FileKind::Fifo),
            ObjectKind::Socket => Some(FileKind::Socket),
            ObjectKind::CharDevice => Some(FileKind::CharDevice),
            ObjectKind::BlockDevice => Some(FileKind::BlockDevice),
            ObjectKind::Unspecified => None,
        }
    }

    /// The kind of a special file from the S_IFMT bits of a mode (mknod).
    pub fn special_from_mode(mode: u32) -> Option<FileKind> {
        match mode & libc::S_IFMT {
            libc::S_IFIFO => Some(FileKind::Fifo),
            libc::S_IFSOCK => Some(FileKind::Socket),
            libc::S_IFCHR => Some(FileKind::CharDevice),
            libc::S_IFBLK => Some(FileKind::BlockDevice),
            _ => None,
        }
    }

    /// The object kind that holds a special file of this kind.
    pub(crate) fn special_object(self) -> Option<ObjectKind> {
        match self {
            FileKind::Fifo => Some(ObjectKind::Fifo),
            FileKind::Socket => Some(ObjectKind::Socket),
            FileKind::CharDevice => Some(ObjectKind::CharDevice),
            FileKind::BlockDevice => Some(ObjectKind::BlockDevice),
            _ => None,
        }
    }

    /// The S_IFMT bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Directory => libc::S_IFDIR,
            FileKind::File => libc::S_IFREG,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
    }
}

/// POSIX attributes of a file, directory, symlink or special file. Times in
/// ns since the epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub handle: Handle,
    pub kind: FileKind,
    /// Permission bits (no S_IFMT).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Names: a directory's 2 plus its subdirectories; anything else's
    /// entries (0 once unlinked while open).
    pub nlink: u32,
    /// A device's number.
    pub rdev: u64,
}

impl Attr {
    /// Attributes of an object record; a file's size and data times come from
    /// its datafiles and are filled in by the caller.
    pub(crate) fn from_record(rec: &ObjectRecord, kind: FileKind) -> Attr {
        let a = rec.attrs.unwrap_or_default();
        Attr {
            handle: rec.handle,
            kind,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            size: match kind {
                FileKind::Symlink => rec.target.len() as u64,
                FileKind::Directory => 4096,
                _ => 0,
            },
            atime_ns: a.atime_ns,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
            // POSIX: a directory is named by its entry, its own "." and
            // each subdirectory's "..". A split directory's subdirectories
            // are counted in each partition: 1, as btrfs says of every
            // directory, tells find(1) and the like that the count is not
            // kept (no leaf optimisation).
            nlink: match kind {
                FileKind::Directory if !rec.partitions.is_empty() => 1,
                FileKind::Directory => 2u32.saturating_add(rec.subdirs.min(u32::MAX as u64) as u32),
                _ => rec.links,
            },
            rdev: rec.rdev,
        }
    }
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub handle: Handle,
    pub kind: FileKind,
}

/// Attribute changes; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// A time to set. POSIX tells them apart: anyone who may write a file may
/// set its times to now (`touch`), only its owner to a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// The server's clock.
    Now,
    /// Nanoseconds since the epoch.
    At(i64),
}

/// Aggregate capacity of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub objects: u64,
    pub servers: u32,
}

/// Where a file's bytes live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub strip_size: u64,
    /// Datafile handle and the server holding it, in strip order.
    pub datafiles: Vec<(Handle, u32)>,
    /// The file has no metafile (made in a no_metafile directory): its one
    /// datafile is the file itself and it never stripes.
    pub no_metafile: bool,
}

/// What removing a name (an unlink, a rename over it) left of the object
/// it named, if that is not a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unlinked {
    /// It has other names (hard links).
    Named,
    /// It went with its last name.
    Removed,
    /// It lost its last name and stays, unnamed, because the caller holds it
    /// open: [`crate::client::Client::reclaim`] it at the last close.
    StillOpen(Handle),
}

impl Unlinked {
    /// What is left of an object `h` that stayed with `links` names.
    pub(crate) fn left(h: Handle, links: u32) -> Unlinked {
        if links == 0 {
            Unlinked::StillOpen(h)
        } else {
            Unlinked::Named
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_process_has_its_ids() {
        let c = current_cred();
        // SAFETY: getuid cannot fail.
        assert_eq!(c.uid, unsafe { libc::getuid() });
        assert!(!c.groups().contains(&c.gid));
    }
}
