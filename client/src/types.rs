//! What the client API hands out: credentials, attributes, entries, layouts.

use shoal_proto::msg::ObjectRecord;
use shoal_proto::{Handle, ObjectKind};

/// Who makes a request: ownership of new objects and, on the servers,
/// permission checks (uid, gid and supplementary groups).
pub use shoal_proto::Cred;

/// The kind of a namespace object as users see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    Directory,
    File,
    Symlink,
}

impl FileKind {
    /// A file is a metafile, or a datafile named directly by its entry (a
    /// file of a no_metafile directory, seed 002).
    pub fn from_object(kind: ObjectKind) -> Option<FileKind> {
        match kind {
            ObjectKind::Directory => Some(FileKind::Directory),
            ObjectKind::Metafile | ObjectKind::Datafile => Some(FileKind::File),
            ObjectKind::Symlink => Some(FileKind::Symlink),
            _ => None,
        }
    }

    /// The S_IFMT bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Directory => libc::S_IFDIR,
            FileKind::File => libc::S_IFREG,
            FileKind::Symlink => libc::S_IFLNK,
        }
    }
}

/// POSIX attributes of a file, directory or symlink. Times in ns since the epoch.
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
    pub nlink: u32,
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
                FileKind::File => 0,
            },
            atime_ns: a.atime_ns,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
            // Directories report 1 like btrfs: "subdirectory count unknown",
            // so tools such as find never skip a directory on a link count.
            nlink: 1,
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
