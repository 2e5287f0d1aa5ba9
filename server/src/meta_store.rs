//! Typed access to a server's metadata over its KV store: objects, directory
//! entries, handle allocation and the object count.
//!
//! Changes that read before they write (create an entry unless it exists, ...)
//! hold [`MetaStore::lock`] from the read to the `apply`, so they are atomic
//! with respect to each other. Durability is the commit queue's business.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use prost::Message;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{self, Handle};
use shoal_proto::msg::{Attributes, DirEntry, Distribution, ObjectRecord};
use shoal_proto::time::now_ns;
use shoal_proto::ObjectKind;

use crate::delegations::{Delegations, Reader};
use crate::keys;
use crate::kv::{Batch, BatchOp, KvEngine};
use crate::replay::{self, Kept};

pub struct MetaStore {
    kv: Arc<dyn KvEngine>,
    server_id: u32,
    write_lock: Mutex<()>,
    /// Last handle counter handed out (persisted with each allocation).
    last_counter: AtomicU64,
    /// The counter as this start found it: handles at or below it were
    /// handed out before (see `from_before_this_start`).
    boot_counter: u64,
    objects: AtomicU64,
    /// The commit sequence: transactions applied, and applied before a sync
    /// that ended (durable). Each transaction stores its number (`Ctransno`),
    /// so a restarted server knows the last one that survived, and which of
    /// the changes its clients kept it still has (`recovery`).
    applied_seq: AtomicU64,
    durable_seq: AtomicU64,
    /// Directories delegated to a client: a read of one for another's
    /// request stops it until the delegation is recalled (`delegations`).
    pub delegations: Delegations,
}

/// A batch of changes plus the bookkeeping `apply` persists alongside it.
#[derive(Default)]
pub struct Txn<'a> {
    pub batch: Batch,
    /// The change its request's client keeps until it is durable (`replay`),
    /// if it does: the handles this transaction allocates are then recorded
    /// for the reply, or for a replay are the ones its first copy took.
    kept: Option<&'a Kept>,
    /// The encoded reply of the request this transaction answers, when its
    /// operation's replies are cached (`reply_cache`): `Service::change`
    /// puts it into the same batch.
    pub reply: Option<Vec<u8>>,
    objects_delta: i64,
    allocated: bool,
    /// Objects this transaction stores as new (debug builds:
    /// [`Txn::put_entry_to_new`] checks its entry against them).
    #[cfg(debug_assertions)]
    new_objects: Vec<Handle>,
}

impl<'a> Txn<'a> {
    /// The transaction of a change whose client keeps it as `kept`, if it
    /// does (see the field).
    pub fn new(kept: Option<&'a Kept>) -> Txn<'a> {
        Txn {
            kept,
            ..Txn::default()
        }
    }

    /// The change its client keeps, if it does (see the field).
    pub fn kept(&self) -> Option<&'a Kept> {
        self.kept
    }

    /// The objects whose record, entries, bytes or xattrs this transaction
    /// writes (what leases on them covered), each once.
    pub fn objects_touched(&self) -> Vec<Handle> {
        let mut touched: Vec<Handle> = self
            .batch
            .ops
            .iter()
            .filter_map(|op| match op {
                BatchOp::Put(k, _) | BatchOp::Delete(k) => keys::object_of(k),
            })
            .collect();
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// Says that `reply` answers the request this transaction is for (see
    /// the `reply` field); the handler returns the same message.
    pub fn record_reply(&mut self, reply: &impl prost::Message) {
        self.reply = Some(reply.encode_to_vec());
    }
    pub fn put_object(&mut self, rec: &ObjectRecord) {
        self.batch
            .put(keys::object(rec.handle), rec.encode_to_vec());
    }
    /// Stores a new object (counts it).
    pub fn insert_object(&mut self, rec: &ObjectRecord) {
        self.put_object(rec);
        self.objects_delta += 1;
        #[cfg(debug_assertions)]
        self.new_objects.push(rec.handle);
    }
    /// Deletes an object record (uncounts it); other keys are the caller's.
    pub fn delete_object(&mut self, handle: Handle) {
        self.batch.delete(keys::object(handle));
        self.objects_delta -= 1;
    }
    pub fn put_entry(&mut self, dir: Handle, name: &str, handle: Handle, kind: ObjectKind) {
        self.batch
            .put(keys::entry(dir, name), keys::encode_entry(handle, kind));
    }
    /// Adds the entry of an object this same transaction creates (a create
    /// that makes the object and its entry in one step): asserted in debug
    /// builds, where the test suite runs.
    pub fn put_entry_to_new(&mut self, dir: Handle, name: &str, handle: Handle, kind: ObjectKind) {
        #[cfg(debug_assertions)]
        debug_assert!(
            self.new_objects.contains(&handle),
            "entry {name:?} of {dir:#x} names {handle:#x}, which this transaction does not create"
        );
        self.put_entry(dir, name, handle, kind);
    }
    pub fn delete_entry(&mut self, dir: Handle, name: &str) {
        self.batch.delete(keys::entry(dir, name));
    }

    /// Directory mtime and ctime change when an entry is added, removed or
    /// renamed, its entries_version counts the change (if it is counted), and
    /// `subdirs` its entries naming directories: `added` and `removed` are the
    /// kinds of object the change added and took away an entry for. Every change
    /// of a directory's entries comes through here, under the store's write
    /// lock, so the counts have no gaps. Returns the record as stored, for the
    /// reply.
    pub fn touch_dir(
        &mut self,
        mut dir: ObjectRecord,
        added: Option<ObjectKind>,
        removed: Option<ObjectKind>,
    ) -> ObjectRecord {
        let is_dir = |k: Option<ObjectKind>| u64::from(k == Some(ObjectKind::Directory));
        debug_assert!(
            dir.subdirs + is_dir(added) >= is_dir(removed),
            "directory {:#x} loses a subdirectory it did not count",
            dir.handle
        );
        dir.subdirs = (dir.subdirs + is_dir(added)).saturating_sub(is_dir(removed));
        dir.entry_count = (dir.entry_count + u64::from(added.is_some()))
            .saturating_sub(u64::from(removed.is_some()));
        if let Some(a) = dir.attrs.as_mut() {
            let now = now_ns();
            a.mtime_ns = now;
            a.ctime_ns = now;
        }
        if dir.entries_version > 0 {
            dir.entries_version += 1;
        }
        self.put_object(&dir);
        dir
    }
}

/// A change of an object's status (POSIX: a link count's change, and on
/// Linux file systems a rename) changes its ctime.
pub fn touch_ctime(rec: &mut ObjectRecord) {
    if let Some(a) = rec.attrs.as_mut() {
        a.ctime_ns = now_ns();
    }
}

impl MetaStore {
    /// Opens the store of server `server_id`; server 0 creates the root
    /// directory the first time.
    pub fn open(kv: Arc<dyn KvEngine>, server_id: u32) -> Result<MetaStore> {
        let last = kv
            .get(keys::NEXT_HANDLE)?
            .map(|v| keys::decode_u64(&v))
            .unwrap_or(0);
        let objects = kv
            .get(keys::OBJECT_COUNT)?
            .map(|v| keys::decode_u64(&v))
            .unwrap_or(0);
        let transno = kv
            .get(keys::TRANSNO)?
            .map(|v| keys::decode_u64(&v))
            .unwrap_or(0);
        let store = MetaStore {
            kv,
            server_id,
            write_lock: Mutex::new(()),
            last_counter: AtomicU64::new(last),
            boot_counter: last,
            objects: AtomicU64::new(objects),
            applied_seq: AtomicU64::new(transno),
            durable_seq: AtomicU64::new(transno),
            delegations: Delegations::default(),
        };
        store.check_format()?;
        if server_id == 0 && store.record(handle::ROOT)?.is_none() {
            let _guard = store.lock();
            let mut txn = Txn::default();
            let root = store.alloc(&mut txn);
            assert_eq!(
                root,
                handle::ROOT,
                "the root must be server 0's first handle"
            );
            txn.insert_object(&ObjectRecord {
                handle: root,
                kind: ObjectKind::Directory as i32,
                attrs: Some(new_attrs(0o755, 0, 0)),
                parent: root,
                ..Default::default()
            });
            store.apply(txn)?;
            store.kv.sync()?;
        }
        Ok(store)
    }

    /// Refuses a store whose keys another layout wrote (`keys::FORMAT`);
    /// marks a new one with this layout.
    fn check_format(&self) -> Result<()> {
        match self.kv.get(keys::FORMAT_KEY)? {
            Some(v) if keys::decode_u64(&v) == u64::from(keys::FORMAT) => Ok(()),
            None if self.kv.get(keys::NEXT_HANDLE)?.is_none() => {
                let _guard = self.lock();
                let mut txn = Txn::default();
                txn.batch.put(
                    keys::FORMAT_KEY.to_vec(),
                    keys::encode_u64(keys::FORMAT.into()),
                );
                self.apply(txn)?;
                self.kv.sync()
            }
            found => Err(ShoalError::io(format!(
                "this server's store was written in key layout {}, and this Shoal reads \
                 layout {} only (directory entries sorted by their names' hash): start the \
                 server on an empty data directory, with the files copied over through a mount",
                found.map_or(1, |v| keys::decode_u64(&v)),
                keys::FORMAT
            ))),
        }
    }

    pub fn kv(&self) -> &dyn KvEngine {
        &*self.kv
    }

    pub fn server_id(&self) -> u32 {
        self.server_id
    }

    pub fn lock(&self) -> MutexGuard<'_, ()> {
        self.write_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn object_count(&self) -> u64 {
        self.objects.load(Ordering::Relaxed)
    }

    /// Allocates a fresh handle in this server's range (caller holds the
    /// lock); a replayed request gets the one its first copy got (`replay`).
    pub fn alloc(&self, txn: &mut Txn) -> Handle {
        txn.allocated = true;
        let (low, high) = handle::range_of(self.server_id);
        let fresh = || {
            let counter = self.last_counter.fetch_add(1, Ordering::SeqCst) + 1;
            handle::make(self.server_id, counter)
        };
        let fits = |h: Handle| (low..high).contains(&h) && self.record(h).ok() == Some(None);
        let h = replay::handle(txn.kept, fresh, fits);
        assert!(
            (low..high).contains(&h),
            "handle {h:#x} allocated outside server {}'s range",
            self.server_id
        );
        // A replayed handle may lie past the counter (its first copy's
        // counter was lost): never hand it out again.
        self.last_counter
            .fetch_max(handle::counter_of(h), Ordering::SeqCst);
        h
    }

    /// A handle a client was given beforehand (a delegation's reservation,
    /// which `reserved` says): it must lie in this server's range, have
    /// been handed out (at or below the counter) and name nothing yet. A
    /// replayed request gets the one its first copy got, as in `alloc`.
    pub fn alloc_given(
        &self,
        txn: &mut Txn,
        h: Handle,
        reserved: impl Fn(Handle) -> bool,
    ) -> Result<Handle> {
        let (low, high) = handle::range_of(self.server_id);
        let fits = |h: Handle| {
            (low..high).contains(&h)
                && handle::counter_of(h) <= self.last_counter.load(Ordering::SeqCst)
                && self.record(h).ok() == Some(None)
        };
        if !fits(h) || !reserved(h) {
            return Err(ShoalError::invalid(format!(
                "handle {h:#x} is not one reserved for this client, or is taken"
            )));
        }
        txn.allocated = true;
        Ok(replay::handle(txn.kept, || h, fits))
    }

    /// Whether `h` was handed out before this server started: a
    /// reservation of those (`delegations`) is no longer known here, and
    /// its client's claim to it is taken (a handle that names nothing, in
    /// this server's range, given out once and only to that client).
    pub fn from_before_this_start(&self, h: Handle) -> bool {
        handle::counter_of(h) <= self.boot_counter
    }

    /// Reserves `count` fresh handles, durably (as `skip_handles`): no
    /// allocation hands them out, also after a crash.
    pub fn reserve_handles(&self, count: u64) -> Result<std::ops::Range<Handle>> {
        assert!(count > 0, "an empty reservation");
        let end = self.skip_handles(count)?;
        Ok(handle::make(self.server_id, end - count + 1)..handle::make(self.server_id, end + 1))
    }

    /// Moves the handle counter `gap` ahead, durably: a restarted server
    /// (`sync = "replay"`) then never hands out a handle that a change it
    /// lost had handed out, which its client replays. Returns the counter
    /// after the gap (the gap is the `gap` counters up to it).
    pub fn skip_handles(&self, gap: u64) -> Result<u64> {
        let next = {
            let _guard = self.lock();
            let next = self.last_counter.fetch_add(gap, Ordering::SeqCst) + gap;
            let mut batch = Batch::default();
            batch.put(keys::NEXT_HANDLE.to_vec(), keys::encode_u64(next));
            self.kv.apply(batch)?;
            next
        };
        self.sync()?;
        Ok(next)
    }

    /// The commit sequence: transactions applied so far.
    pub fn applied_seq(&self) -> u64 {
        self.applied_seq.load(Ordering::SeqCst)
    }

    /// The commit sequence made durable so far.
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq.load(Ordering::SeqCst)
    }

    /// Makes every change applied so far durable (one KV sync).
    pub fn sync(&self) -> Result<()> {
        // Read before the sync starts: every transaction up to it has been
        // applied, so the sync covers it.
        let covered = self.applied_seq();
        self.kv.sync()?;
        self.durable_seq.fetch_max(covered, Ordering::SeqCst);
        Ok(())
    }

    /// Checks that `h` is a handle this server owns.
    pub fn check_owned(&self, h: Handle) -> Result<()> {
        if h == 0 || handle::server_of(h) != self.server_id {
            return Err(ShoalError::new(
                Errno::EINVAL,
                format!(
                    "handle {h:#x} does not belong to server {} (it names server {})",
                    self.server_id,
                    handle::server_of(h)
                ),
            ));
        }
        Ok(())
    }

    /// Object `h`'s record, if there is one: the server's own read, which
    /// meets no delegation (the store's bookkeeping, never a request's).
    fn record(&self, h: Handle) -> Result<Option<ObjectRecord>> {
        match self.kv.get(&keys::object(h))? {
            None => Ok(None),
            Some(v) => decode_object(h, &v).map(Some),
        }
    }

    /// Object `h`'s record, if there is one, read for `by`: a read for a
    /// request stops at a directory another client holds the delegation
    /// of (so do the other reads below, of an object or of a directory's
    /// entries).
    pub fn try_get<R: Reader>(&self, by: &R, h: Handle) -> Result<Option<ObjectRecord>, R::Error> {
        by.meet(&self.delegations, h)?;
        Ok(self.record(h)?)
    }

    /// [`try_get`](Self::try_get) of each handle, index-aligned, in one
    /// read of the store.
    pub fn try_get_many<R: Reader>(
        &self,
        by: &R,
        hs: &[Handle],
    ) -> Result<Vec<Option<ObjectRecord>>, R::Error> {
        for h in hs {
            by.meet(&self.delegations, *h)?;
        }
        let keys: Vec<Vec<u8>> = hs.iter().map(|&h| keys::object(h)).collect();
        let asked: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let values = self.kv.get_many(&asked)?;
        let records = hs.iter().zip(values).map(|(h, v)| match v {
            None => Ok(None),
            Some(v) => decode_object(*h, &v).map(Some),
        });
        Ok(records.collect::<Result<_>>()?)
    }

    pub fn get<R: Reader>(&self, by: &R, h: Handle) -> Result<ObjectRecord, R::Error> {
        self.check_owned(h)?;
        self.try_get(by, h)?
            .ok_or_else(|| ShoalError::not_found(format!("object {h:#x}")).into())
    }

    pub fn get_dir<R: Reader>(&self, by: &R, h: Handle) -> Result<ObjectRecord, R::Error> {
        let rec = self.get(by, h)?;
        if rec.kind() != ObjectKind::Directory {
            return Err(ShoalError::new(
                Errno::ENOTDIR,
                format!("object {h:#x} is not a directory"),
            )
            .into());
        }
        Ok(rec)
    }

    pub fn lookup<R: Reader>(
        &self,
        by: &R,
        dir: Handle,
        name: &str,
    ) -> Result<Option<(Handle, ObjectKind)>, R::Error> {
        by.meet(&self.delegations, dir)?;
        let Some(v) = self.kv.get(&keys::entry(dir, name))? else {
            return Ok(None);
        };
        let entry = keys::decode_entry(&v)
            .ok_or_else(|| ShoalError::io(format!("entry {name:?} of {dir:#x} is corrupt")))?;
        Ok(Some(entry))
    }

    /// Up to `max` entries of `dir` after `start_after`, and whether the listing ended.
    pub fn readdir<R: Reader>(
        &self,
        by: &R,
        dir: Handle,
        start_after: &str,
        max: usize,
    ) -> Result<(Vec<DirEntry>, bool), R::Error> {
        by.meet(&self.delegations, dir)?;
        let after = (!start_after.is_empty()).then(|| keys::entry(dir, start_after));
        let pairs = self
            .kv
            .scan(&keys::entries(dir), after.as_deref(), max + 1)?;
        let done = pairs.len() <= max;
        let entries = pairs
            .into_iter()
            .take(max)
            .filter_map(|(k, v)| {
                let (handle, kind) = keys::decode_entry(&v)?;
                Some(DirEntry {
                    name: keys::entry_name_of(&k),
                    handle,
                    kind: kind as i32,
                })
            })
            .collect();
        Ok((entries, done))
    }

    pub fn is_empty_dir<R: Reader>(&self, by: &R, dir: Handle) -> Result<bool, R::Error> {
        by.meet(&self.delegations, dir)?;
        Ok(self.kv.scan(&keys::entries(dir), None, 1)?.is_empty())
    }

    /// Deletes object `rec` in `txn`: its keys and, for a stuffed file, its
    /// one datafile, which lives here too, so removing a stuffed file needs
    /// no other server. Returns the distribution listing the datafiles still
    /// to remove elsewhere, and the deleted datafiles whose local files must
    /// go once the transaction is applied (`DataStore::remove_files`).
    pub fn remove_object(
        &self,
        txn: &mut Txn,
        rec: ObjectRecord,
    ) -> Result<(Option<Distribution>, Vec<ObjectRecord>)> {
        let mut gone = Vec::new();
        let mut dist = rec.dist.clone();
        if let Some(d) = dist.as_mut().filter(|d| d.stuffed) {
            if let Some(df) = d
                .datafiles
                .first()
                .and_then(|h| self.record(*h).ok().flatten())
            {
                self.delete_keys(txn, &df)?;
                d.datafiles.retain(|h| *h != df.handle);
                gone.push(df);
            }
        }
        self.delete_keys(txn, &rec)?;
        if rec.kind() == ObjectKind::Datafile {
            gone.push(rec);
        }
        Ok((dist, gone))
    }

    /// Deletes an object's keys in `txn`: its record, inline bytes and xattrs.
    fn delete_keys(&self, txn: &mut Txn, rec: &ObjectRecord) -> Result<()> {
        if rec.kind() == ObjectKind::Datafile {
            txn.batch.delete(keys::bytes(rec.handle));
        }
        for (k, _) in self.kv.scan(&keys::xattrs(rec.handle), None, usize::MAX)? {
            txn.batch.delete(k);
        }
        txn.delete_object(rec.handle);
        Ok(())
    }

    /// Applies a transaction (caller holds the lock), persisting the handle
    /// counter and object count with it; it takes the next place in the
    /// commit sequence.
    pub fn apply(&self, mut txn: Txn) -> Result<()> {
        if txn.batch.is_empty() && !txn.allocated && txn.objects_delta == 0 {
            return Ok(());
        }
        let seq = self.applied_seq() + 1;
        txn.batch.put(keys::TRANSNO.to_vec(), keys::encode_u64(seq));
        self.apply_batch(txn)?;
        self.applied_seq.store(seq, Ordering::SeqCst);
        Ok(())
    }

    fn apply_batch(&self, mut txn: Txn) -> Result<()> {
        if txn.allocated {
            txn.batch.put(
                keys::NEXT_HANDLE.to_vec(),
                keys::encode_u64(self.last_counter.load(Ordering::SeqCst)),
            );
        }
        if txn.objects_delta != 0 {
            let count =
                (self.objects.load(Ordering::SeqCst) as i64 + txn.objects_delta).max(0) as u64;
            txn.batch
                .put(keys::OBJECT_COUNT.to_vec(), keys::encode_u64(count));
            self.kv.apply(txn.batch)?;
            self.objects.store(count, Ordering::SeqCst);
            return Ok(());
        }
        if txn.batch.is_empty() {
            return Ok(());
        }
        self.kv.apply(txn.batch)
    }
}

/// Attributes of a new object, all times now.
/// An object record as the store holds it (`h` names it in the error).
fn decode_object(h: Handle, v: &[u8]) -> Result<ObjectRecord> {
    ObjectRecord::decode(v).map_err(|e| ShoalError::io(format!("object {h:#x} is corrupt: {e}")))
}

pub fn new_attrs(mode: u32, uid: u32, gid: u32) -> Attributes {
    let now = now_ns();
    Attributes {
        mode: mode & 0o7777,
        uid,
        gid,
        atime_ns: now,
        mtime_ns: now,
        ctime_ns: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delegations::ServerItself;
    use crate::kv::MemEngine;
    use shoal_proto::partitions::name_hash;

    #[test]
    fn server_zero_creates_the_root_once_and_handles_survive_reopen() {
        let kv: Arc<dyn KvEngine> = Arc::new(MemEngine::default());
        let store = MetaStore::open(kv.clone(), 0).unwrap();
        assert_eq!(
            store.get_dir(&ServerItself, handle::ROOT).unwrap().parent,
            handle::ROOT
        );
        let mut txn = Txn::default();
        let h = store.alloc(&mut txn);
        txn.insert_object(&ObjectRecord {
            handle: h,
            kind: ObjectKind::Metafile as i32,
            ..Default::default()
        });
        store.apply(txn).unwrap();
        assert_eq!(store.object_count(), 2);

        let again = MetaStore::open(kv, 0).unwrap();
        assert_eq!(again.object_count(), 2);
        let mut txn = Txn::default();
        assert!(
            again.alloc(&mut txn) > h,
            "handles are never reused after reopen"
        );
    }

    #[test]
    fn readdir_pages_through_entries_in_hash_order() {
        let store = MetaStore::open(Arc::new(MemEngine::default()), 0).unwrap();
        let mut txn = Txn::default();
        for i in 0..10 {
            txn.put_entry(
                handle::ROOT,
                &format!("f{i:02}"),
                100 + i,
                ObjectKind::Metafile,
            );
        }
        store.apply(txn).unwrap();
        let (first, done) = store.readdir(&ServerItself, handle::ROOT, "", 4).unwrap();
        assert_eq!(first.len(), 4);
        assert!(!done);
        let (rest, done) = store
            .readdir(&ServerItself, handle::ROOT, &first[3].name, 100)
            .unwrap();
        assert_eq!(rest.len(), 6);
        assert!(done);
        let hashes: Vec<u64> = first
            .iter()
            .chain(&rest)
            .map(|e| name_hash(&e.name))
            .collect();
        assert!(hashes.windows(2).all(|w| w[0] < w[1]), "{hashes:?}");
        assert!(!store.is_empty_dir(&ServerItself, handle::ROOT).unwrap());
        assert!(
            store.get(&ServerItself, handle::make(1, 5)).is_err(),
            "foreign handles are refused"
        );
    }
}
