//! The on-disk engine: redb, a crash-safe copy-on-write B-tree in pure Rust
//! (choice and measurement: bench/results/kv-engine.md).
//!
//! `apply` commits with `Durability::None` (visible, not yet on disk); `sync`
//! commits an empty transaction with `Durability::Immediate`, which makes every
//! earlier non-durable commit durable with one fsync. After a crash redb opens at
//! the last durable commit.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use shoal_proto::error::{Result, ShoalError};

use super::engine::{prefix_end, Batch, BatchOp, KvEngine, Pair};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("shoal");

pub struct RedbEngine {
    db: Database,
}

/// A redb error as a Shoal error: an I/O error keeps its errno (a full disk is
/// ENOSPC to the caller, not EIO); anything else is EIO.
fn kv_err(e: impl Into<redb::Error>) -> ShoalError {
    match e.into() {
        redb::Error::Io(io) => ShoalError::from(io).context("metadata store"),
        other => ShoalError::io(format!("metadata store: {other}")),
    }
}

impl RedbEngine {
    /// Opens (or creates) the store `meta.redb` inside `dir`.
    pub fn open(dir: &Path) -> Result<RedbEngine> {
        std::fs::create_dir_all(dir)
            .map_err(|e| ShoalError::from(e).context(format!("creating {}", dir.display())))?;
        let path = dir.join("meta.redb");
        if !path.exists() {
            create_atomically(dir, &path)?;
        }
        let db = Database::builder()
            .set_cache_size(256 << 20)
            .create(&path)
            .map_err(|e| kv_err(e).context(path.display()))?;
        Ok(RedbEngine { db })
    }
}

/// Creates a new store under a temporary name and renames it into place once
/// it is complete and on disk, so a crash while creating it leaves either no
/// store or a whole one — never a half-written file that will not open.
fn create_atomically(dir: &Path, path: &Path) -> Result<()> {
    let tmp = dir.join("meta.redb.creating");
    let _ = std::fs::remove_file(&tmp);
    {
        let db = Database::create(&tmp).map_err(|e| kv_err(e).context(tmp.display()))?;
        let txn = db.begin_write().map_err(kv_err)?;
        txn.open_table(TABLE).map_err(kv_err)?;
        txn.commit().map_err(kv_err)?;
    }
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

impl KvEngine for RedbEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read().map_err(kv_err)?;
        let table = txn.open_table(TABLE).map_err(kv_err)?;
        Ok(table.get(key).map_err(kv_err)?.map(|v| v.value().to_vec()))
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let txn = self.db.begin_read().map_err(kv_err)?;
        let table = txn.open_table(TABLE).map_err(kv_err)?;
        keys.iter()
            .map(|k| Ok(table.get(*k).map_err(kv_err)?.map(|v| v.value().to_vec())))
            .collect()
    }

    fn scan(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Pair>> {
        let txn = self.db.begin_read().map_err(kv_err)?;
        let table = txn.open_table(TABLE).map_err(kv_err)?;
        let start = after.unwrap_or(prefix);
        let end = prefix_end(prefix);
        let range = match &end {
            Some(end) => table.range::<&[u8]>(start..end.as_slice()),
            None => table.range::<&[u8]>(start..),
        }
        .map_err(kv_err)?;
        let mut out = Vec::new();
        for item in range {
            let (k, v) = item.map_err(kv_err)?;
            let key = k.value();
            if after == Some(key) {
                continue;
            }
            if out.len() == limit {
                break;
            }
            out.push((key.to_vec(), v.value().to_vec()));
        }
        Ok(out)
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(kv_err)?;
        txn.set_durability(Durability::None).map_err(kv_err)?;
        {
            let mut table = txn.open_table(TABLE).map_err(kv_err)?;
            for op in &batch.ops {
                match op {
                    BatchOp::Put(k, v) => {
                        table.insert(k.as_slice(), v.as_slice()).map_err(kv_err)?;
                    }
                    BatchOp::Delete(k) => {
                        table.remove(k.as_slice()).map_err(kv_err)?;
                    }
                }
            }
        }
        txn.commit().map_err(kv_err)
    }

    fn sync(&self) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(kv_err)?;
        txn.set_durability(Durability::Immediate).map_err(kv_err)?;
        txn.commit().map_err(kv_err)
    }
}
