//! Shoal attributes in the form the kernel caches them.

use fuser::{FileAttr, FileType, INodeNo};
use shoal_client::{Attr, FileKind};
use shoal_proto::time::from_ns;

/// Block size reported by `stat` when the cluster's strip size is unusable.
const DEFAULT_BLKSIZE: u32 = 1 << 20;

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Directory => FileType::Directory,
        FileKind::File => FileType::RegularFile,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// `st_blksize` for the mount: the strip size, because tools such as `cp` and
/// `cat` size their buffers from it and a strip is the unit one server stores.
/// Clamped to 4 KiB..=16 MiB (the kernel's largest FUSE request).
pub fn blksize_for(strip_size: u64) -> u32 {
    if strip_size == 0 {
        return DEFAULT_BLKSIZE;
    }
    strip_size.clamp(4096, 16 << 20) as u32
}

/// The kernel's view of `a`. Handles are inode numbers (root handle 1 is
/// FUSE_ROOT_ID), so no mapping table is needed.
pub fn file_attr(a: &Attr, blksize: u32) -> FileAttr {
    let ctime = from_ns(a.ctime_ns);
    FileAttr {
        ino: INodeNo(a.handle),
        size: a.size,
        // Shoal does not report allocation; a file is taken to be fully
        // allocated so that `du` agrees with `ls -l`.
        blocks: a.size.div_ceil(512),
        atime: from_ns(a.atime_ns),
        mtime: from_ns(a.mtime_ns),
        ctime,
        crtime: ctime,
        kind: file_type(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // The kernel's dev_t is 32 bits in FUSE's attributes.
        rdev: a.rdev as u32,
        blksize,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: FileKind, size: u64) -> Attr {
        Attr {
            handle: 42,
            kind,
            mode: 0o104755,
            uid: 7,
            gid: 8,
            size,
            atime_ns: 1_500_000_000_123_456_789,
            mtime_ns: -5,
            ctime_ns: 0,
            nlink: 1,
            rdev: 0,
        }
    }

    #[test]
    fn converts_every_field() {
        let f = file_attr(&attr(FileKind::File, 1025), 1 << 20);
        assert_eq!(f.ino, INodeNo(42));
        assert_eq!(f.size, 1025);
        assert_eq!(f.blocks, 3);
        assert_eq!(f.kind, FileType::RegularFile);
        assert_eq!(f.perm, 0o4755);
        assert_eq!((f.uid, f.gid, f.nlink), (7, 8, 1));
        assert_eq!(f.atime, from_ns(1_500_000_000_123_456_789));
        assert_eq!(f.mtime, from_ns(-5));
        assert_eq!(f.blksize, 1 << 20);
        assert_eq!(
            file_attr(&attr(FileKind::Symlink, 0), 4096).kind,
            FileType::Symlink
        );
        assert_eq!(file_attr(&attr(FileKind::Directory, 0), 4096).blocks, 0);
    }

    #[test]
    fn blksize_stays_in_range() {
        assert_eq!(blksize_for(0), 1 << 20);
        assert_eq!(blksize_for(512), 4096);
        assert_eq!(blksize_for(1 << 20), 1 << 20);
        assert_eq!(blksize_for(1 << 30), 16 << 20);
    }
}
