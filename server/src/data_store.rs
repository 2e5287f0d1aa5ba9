//! Datafile bytes. A datafile of at most `inline_max` bytes keeps them in the KV
//! store under `B<handle>` (one write, no local inode per small file); a write that
//! takes it past that moves the bytes to a local file `files/<shard>/<handle>`
//! under the data directory. A datafile never written has no bytes anywhere.
//!
//! For a file-backed datafile the local file's length and mtime are the
//! datafile's size and data mtime, so large writes touch no metadata.
//!
//! A full disk: data writes stop short of filling the data directory's file
//! system. They fail with ENOSPC once less than [`reserve_for`] bytes would
//! be left, so that the KV store, which shares that file system, always has
//! room to commit: creates, stats and the deletes that free space keep
//! working. (A KV commit that itself hits ENOSPC fails the store until the
//! server restarts, so data must never be what fills the disk.)

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{counter_of, server_of, Handle};
use shoal_proto::msg::{DatafileSize, ObjectRecord};
use shoal_proto::time::{now_ns, to_ns};
use shoal_proto::ObjectKind;

use crate::delegations::{Reader, ServerItself};
use crate::disk;
use crate::keys;
use crate::local_file::LocalFile;
use crate::meta_store::{MetaStore, Txn};

/// Largest offset + length a datafile accepts (a datafile never outgrows the
/// file it belongs to).
pub const MAX_DATAFILE_SIZE: u64 = shoal_proto::dist::MAX_FILE_SIZE;
/// Local files held open for reuse.
const OPEN_FILES_MAX: usize = 512;
/// Bounds of the free space data writes leave for the KV store.
const RESERVE_MIN: u64 = 1 << 20;
const RESERVE_MAX: u64 = 256 << 20;

/// Free bytes data writes leave on a file system of `total` bytes: 1/64 of
/// it, at least 1 MiB and at most 256 MiB, and never over 1/8 of it.
pub fn reserve_for(total: u64) -> u64 {
    (total / 64).clamp(RESERVE_MIN, RESERVE_MAX).min(total / 8)
}

pub struct DataStore {
    files_dir: PathBuf,
    inline_max: u64,
    /// Reads of at least this many bytes of a local file do not stay in
    /// the page cache (`LocalFile::read_upto`); 0: every read does.
    uncached_reads: u64,
    open: Mutex<HashMap<Handle, Arc<LocalFile>>>,
    /// Bytes of data writes under way (admitted by `room_for`, not done).
    writing: AtomicU64,
}

/// Bytes admitted by [`DataStore::room_for`]; given back on drop.
struct Admitted<'a> {
    writing: &'a AtomicU64,
    bytes: u64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.writing.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

impl DataStore {
    pub fn new(data_dir: &Path, inline_max: u64, uncached_reads: u64) -> Result<DataStore> {
        let files_dir = data_dir.join("files");
        std::fs::create_dir_all(&files_dir).map_err(|e| {
            ShoalError::from(e).context(format!("creating {}", files_dir.display()))
        })?;
        Ok(DataStore {
            files_dir,
            inline_max,
            uncached_reads,
            open: Mutex::new(HashMap::new()),
            writing: AtomicU64::new(0),
        })
    }

    /// Admits a data write of `len` bytes, or ENOSPC if it (with the writes
    /// already under way) would leave less than the reserve free. If the free
    /// space cannot be read the write is admitted: it fails by itself if the
    /// file system is broken.
    fn room_for(&self, len: u64) -> Result<Admitted<'_>> {
        let writing = self.writing.fetch_add(len, Ordering::SeqCst) + len;
        let admitted = Admitted {
            writing: &self.writing,
            bytes: len,
        };
        let Ok(disk::Space { total, avail, .. }) = disk::space(&self.files_dir) else {
            return Ok(admitted);
        };
        let reserve = reserve_for(total);
        if avail < writing.saturating_add(reserve) {
            return Err(ShoalError::new(
                Errno::ENOSPC,
                format!(
                    "no space left for data in {}: {avail} bytes free, {reserve} reserved for \
                     metadata, {writing} being written",
                    self.files_dir.display()
                ),
            ));
        }
        Ok(admitted)
    }

    fn shard_dir(&self, h: Handle) -> PathBuf {
        self.files_dir.join(format!("{:02x}", counter_of(h) & 0xff))
    }

    pub fn path_of(&self, h: Handle) -> PathBuf {
        self.shard_dir(h).join(format!("{h:016x}"))
    }

    fn file(&self, h: Handle, create: bool) -> Result<Arc<LocalFile>> {
        if let Some(f) = self.open.lock().unwrap().get(&h) {
            return Ok(f.clone());
        }
        let path = self.path_of(h);
        if create {
            std::fs::create_dir_all(self.shard_dir(h))?;
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(&path)
            .map_err(|e| ShoalError::from(e).context(format!("datafile {}", path.display())))?;
        let f = Arc::new(LocalFile::new(f));
        let mut open = self.open.lock().unwrap();
        if open.len() >= OPEN_FILES_MAX {
            open.clear();
        }
        open.insert(h, f.clone());
        Ok(f)
    }

    /// Datafiles up to this many bytes keep them in the KV store.
    pub fn inline_max(&self) -> u64 {
        self.inline_max
    }

    /// Size and data mtime of a datafile.
    pub fn size_of(&self, rec: &ObjectRecord) -> Result<(u64, i64)> {
        if !rec.in_file {
            return Ok((rec.size, rec.data_mtime_ns));
        }
        let md = self.file(rec.handle, false)?.metadata()?;
        let mtime = md.modified().map(to_ns).unwrap_or(rec.data_mtime_ns);
        Ok((md.len(), mtime))
    }

    pub fn read(
        &self,
        meta: &MetaStore,
        rec: &ObjectRecord,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        let (size, _) = self.size_of(rec)?;
        if offset >= size || len == 0 {
            return Ok(Bytes::new());
        }
        let len = len.min(size - offset) as usize;
        if !rec.in_file {
            let bytes = meta.kv().get(&keys::bytes(rec.handle))?.unwrap_or_default();
            let mut out = vec![0u8; len];
            let start = offset as usize;
            if start < bytes.len() {
                let n = (bytes.len() - start).min(len);
                out[..n].copy_from_slice(&bytes[start..start + n]);
            }
            return Ok(Bytes::from(out));
        }
        let uncached = self.uncached_reads != 0 && len as u64 >= self.uncached_reads;
        let out = self
            .file(rec.handle, false)?
            .read_upto(offset, len, uncached)?;
        Ok(Bytes::from(out))
    }

    /// Writes `data` at `offset`; returns the bytes written.
    pub fn write(&self, meta: &MetaStore, handle: Handle, offset: u64, data: &[u8]) -> Result<u64> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= MAX_DATAFILE_SIZE)
            .ok_or_else(|| {
                ShoalError::new(
                    Errno::EFBIG,
                    format!("write past {MAX_DATAFILE_SIZE} bytes"),
                )
            })?;
        let rec = datafile(meta, &ServerItself, handle)?;
        // Inline bytes are rewritten whole in the KV store, and a promotion
        // moves them to a file: count them too.
        let moved = if rec.in_file {
            0
        } else {
            rec.size.min(self.inline_max)
        };
        let _room = self.room_for(data.len() as u64 + moved)?;
        if rec.in_file {
            self.file(handle, false)?.write_all_at(data, offset)?;
            return Ok(data.len() as u64);
        }
        let _guard = meta.lock();
        // Re-read under the lock: another writer may have changed or promoted it.
        let mut rec = datafile(meta, &ServerItself, handle)?;
        if rec.in_file {
            self.file(handle, false)?.write_all_at(data, offset)?;
            return Ok(data.len() as u64);
        }
        let mut bytes = meta.kv().get(&keys::bytes(handle))?.unwrap_or_default();
        let new_size = rec.size.max(end);
        bytes.resize(rec.size as usize, 0);
        if new_size <= self.inline_max {
            bytes.resize(new_size as usize, 0);
            bytes[offset as usize..end as usize].copy_from_slice(data);
            rec.size = new_size;
            rec.data_mtime_ns = now_ns();
            let mut txn = Txn::default();
            txn.batch.put(keys::bytes(handle), bytes);
            txn.put_object(&rec);
            meta.apply(txn)?;
        } else {
            let file = self.promote(meta, &mut rec, &bytes)?;
            file.write_all_at(data, offset)?;
        }
        Ok(data.len() as u64)
    }

    /// Moves an inline datafile's bytes to a local file. The file is made durable
    /// before the record says so, so bytes that were durable inline stay durable.
    fn promote(
        &self,
        meta: &MetaStore,
        rec: &mut ObjectRecord,
        bytes: &[u8],
    ) -> Result<Arc<LocalFile>> {
        let file = self.file(rec.handle, true)?;
        file.set_len(0)?;
        file.write_all_at(bytes, 0)?;
        file.sync_all()?;
        File::open(self.shard_dir(rec.handle))?.sync_all()?;
        rec.in_file = true;
        rec.size = 0;
        let mut txn = Txn::default();
        txn.batch.delete(keys::bytes(rec.handle));
        txn.put_object(rec);
        meta.apply(txn)?;
        Ok(file)
    }

    pub fn truncate(&self, meta: &MetaStore, handle: Handle, size: u64) -> Result<()> {
        if size > MAX_DATAFILE_SIZE {
            return Err(ShoalError::new(
                Errno::EFBIG,
                format!("size {size} too large"),
            ));
        }
        let _guard = meta.lock();
        let mut rec = datafile(meta, &ServerItself, handle)?;
        if !rec.in_file {
            let mut bytes = meta.kv().get(&keys::bytes(handle))?.unwrap_or_default();
            bytes.resize(rec.size as usize, 0);
            if size > self.inline_max {
                self.promote(meta, &mut rec, &bytes)?;
            } else {
                bytes.resize(size as usize, 0);
                rec.size = size;
                rec.data_mtime_ns = now_ns();
                let mut txn = Txn::default();
                if bytes.is_empty() {
                    txn.batch.delete(keys::bytes(handle));
                } else {
                    txn.batch.put(keys::bytes(handle), bytes);
                }
                txn.put_object(&rec);
                return meta.apply(txn);
            }
        }
        self.file(handle, false)?.set_len(size)?;
        Ok(())
    }

    /// Makes a datafile's bytes durable (the KV part is synced by the caller).
    pub fn fsync(&self, rec: &ObjectRecord) -> Result<()> {
        if rec.in_file {
            self.file(rec.handle, false)?.sync_data()?;
        }
        Ok(())
    }

    /// Removes the local files of datafiles a transaction deleted
    /// (`MetaStore::remove_object`), once it is applied. A failure is
    /// reported as EIO: the change it follows stands, and a client takes
    /// any other errno for a refusal that changed nothing (the files left
    /// are fsck's orphans).
    pub fn remove_files(&self, gone: &[ObjectRecord]) -> Result<()> {
        for df in gone {
            self.remove_file(df).map_err(|e| {
                ShoalError::new(
                    Errno::EIO,
                    format!("removing the file of {:#x}: {e}", df.handle),
                )
            })?;
        }
        Ok(())
    }

    /// Whether object `rec` (a datafile, or a file's metafile with its
    /// datafiles here) keeps bytes in a local file. A failed read counts as
    /// yes.
    pub fn keeps_local_files(&self, meta: &MetaStore, rec: &ObjectRecord) -> bool {
        match rec.kind() {
            ObjectKind::Datafile => rec.in_file,
            ObjectKind::Metafile => rec.dist.as_ref().is_some_and(|d| {
                d.datafiles
                    .iter()
                    .filter(|h| server_of(**h) == meta.server_id())
                    .any(|h| {
                        meta.try_get(&ServerItself, *h)
                            .map_or(true, |df| df.is_some_and(|df| df.in_file))
                    })
            }),
            _ => false,
        }
    }

    /// The sizes of the datafiles of `file` (a metafile) that live on this
    /// server, for its getattr reply.
    pub fn local_sizes(&self, meta: &MetaStore, file: &ObjectRecord) -> Result<Vec<DatafileSize>> {
        if file.kind() != ObjectKind::Metafile {
            return Ok(Vec::new());
        }
        let Some(dist) = &file.dist else {
            return Ok(Vec::new());
        };
        let mut sizes = Vec::new();
        for h in dist
            .datafiles
            .iter()
            .filter(|h| server_of(**h) == meta.server_id())
        {
            if let Some(rec) = meta.try_get(&ServerItself, *h)? {
                if rec.kind() == ObjectKind::Datafile {
                    let (size, mtime_ns) = self.size_of(&rec)?;
                    sizes.push(DatafileSize {
                        handle: *h,
                        size,
                        mtime_ns,
                    });
                }
            }
        }
        Ok(sizes)
    }

    /// Deletes a datafile's local file, if it has one.
    fn remove_file(&self, rec: &ObjectRecord) -> Result<()> {
        self.open.lock().unwrap().remove(&rec.handle);
        if rec.in_file {
            match std::fs::remove_file(self.path_of(rec.handle)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }
}

/// The record of `handle`, which must be a datafile, read for `by`. This
/// module reads its datafiles for itself (`ServerItself`): a datafile is
/// never delegated, and a request that names one has read it for itself
/// first.
pub fn datafile<R: Reader>(
    meta: &MetaStore,
    by: &R,
    handle: Handle,
) -> Result<ObjectRecord, R::Error> {
    let rec = meta.get(by, handle)?;
    if rec.kind() != ObjectKind::Datafile {
        return Err(ShoalError::invalid(format!("object {handle:#x} is not a datafile")).into());
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemEngine;

    fn setup(inline_max: u64) -> (tempfile::TempDir, MetaStore, DataStore, Handle) {
        let dir = tempfile::tempdir().unwrap();
        let meta = MetaStore::open(Arc::new(MemEngine::default()), 1).unwrap();
        let uncached = shoal_proto::cluster::Settings::default().uncached_reads;
        let data = DataStore::new(dir.path(), inline_max, uncached.into()).unwrap();
        let mut txn = Txn::default();
        let h = meta.alloc(&mut txn);
        txn.insert_object(&ObjectRecord {
            handle: h,
            kind: ObjectKind::Datafile as i32,
            ..Default::default()
        });
        meta.apply(txn).unwrap();
        (dir, meta, data, h)
    }

    fn read_all(meta: &MetaStore, data: &DataStore, h: Handle) -> Vec<u8> {
        let rec = meta.get(&ServerItself, h).unwrap();
        data.read(meta, &rec, 0, u64::MAX).unwrap().to_vec()
    }

    #[test]
    fn small_writes_stay_inline_and_large_ones_move_to_a_file() {
        let (_d, meta, data, h) = setup(16);
        data.write(&meta, h, 4, b"abcd").unwrap();
        assert_eq!(read_all(&meta, &data, h), b"\0\0\0\0abcd");
        assert!(!meta.get(&ServerItself, h).unwrap().in_file);
        assert!(!data.path_of(h).exists());

        data.write(&meta, h, 10, b"0123456789").unwrap();
        let rec = meta.get(&ServerItself, h).unwrap();
        assert!(rec.in_file);
        assert_eq!(data.size_of(&rec).unwrap().0, 20);
        assert_eq!(read_all(&meta, &data, h), b"\0\0\0\0abcd\0\x000123456789");
        assert_eq!(meta.kv().get(&keys::bytes(h)).unwrap(), None);
    }

    #[test]
    fn truncate_shrinks_grows_and_promotes() {
        let (_d, meta, data, h) = setup(16);
        data.write(&meta, h, 0, b"hello world").unwrap();
        data.truncate(&meta, h, 5).unwrap();
        assert_eq!(read_all(&meta, &data, h), b"hello");
        data.truncate(&meta, h, 8).unwrap();
        assert_eq!(read_all(&meta, &data, h), b"hello\0\0\0");
        data.truncate(&meta, h, 100).unwrap();
        assert!(meta.get(&ServerItself, h).unwrap().in_file);
        let all = read_all(&meta, &data, h);
        assert_eq!(all.len(), 100);
        assert_eq!(&all[..5], b"hello");
    }

    #[test]
    fn data_writes_leave_a_reserve_for_metadata() {
        assert_eq!(reserve_for(16 << 20), 1 << 20);
        assert_eq!(reserve_for(4 << 20), 512 << 10);
        assert_eq!(reserve_for(1 << 40), 256 << 20);
        assert_eq!(reserve_for(0), 0);
        let (_d, _meta, data, _h) = setup(16);
        let err = data.room_for(u64::MAX / 2).err().unwrap();
        assert_eq!(err.errno, Errno::ENOSPC);
        assert_eq!(
            data.writing.load(Ordering::SeqCst),
            0,
            "refused bytes given back"
        );
        {
            let _a = data.room_for(4096).unwrap();
            assert_eq!(data.writing.load(Ordering::SeqCst), 4096);
        }
        assert_eq!(data.writing.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn writes_past_the_limit_are_efbig() {
        let (_d, meta, data, h) = setup(16);
        let err = data.write(&meta, h, MAX_DATAFILE_SIZE, b"x").unwrap_err();
        assert_eq!(err.errno, Errno::EFBIG);
        assert_eq!(
            data.write(&meta, h, u64::MAX, b"x").unwrap_err().errno,
            Errno::EFBIG
        );
    }
}
