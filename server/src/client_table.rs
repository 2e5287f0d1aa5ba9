//! The clients a server answered before their changes were durable
//! (`sync = "replay"`): after a crash, these are the clients that may hold
//! changes it lost, and its recovery waits for them (`recovery`).
//!
//! A client enters the table, durably, with its first such change: that
//! change is made durable before its reply, with the client's `K` key, so
//! the table on disk always names every client that holds a change the disk
//! lacks. It leaves once every change it made is durable and it made none
//! for a whole group flush ([`ClientTable::retire`], at the next flush): a
//! client that went idle, or away, then costs a restart nothing, and its
//! next change enters it again (one sync). Entering, changing and leaving
//! all happen under the store lock, so a change is never answered as kept
//! for a client whose key a later transaction deletes.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use shoal_proto::error::Result;

use crate::keys;
use crate::kv::KvEngine;
use crate::meta_store::Txn;

#[derive(Default)]
pub struct ClientTable {
    /// Each client in the table, and the commit sequence of its last change.
    known: Mutex<HashMap<u64, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientTable {
    /// The table the store `kv` holds.
    pub fn open(kv: &dyn KvEngine) -> Result<ClientTable> {
        let known = kv
            .scan(&[keys::CLIENT], None, usize::MAX)?
            .iter()
            .filter_map(|(k, _)| keys::handle_of(k))
            .map(|c| (c, 0))
            .collect();
        Ok(ClientTable {
            known: Mutex::new(known),
        })
    }

    /// The clients in the table.
    pub fn clients(&self) -> Vec<u64> {
        lock(&self.known).keys().copied().collect()
    }

    /// Whether `client` is in the table (durably). The caller holds the
    /// store lock.
    pub fn knows(&self, client: u64) -> bool {
        lock(&self.known).contains_key(&client)
    }

    /// Puts `client` into the table in `txn`; once `txn` is durable, the
    /// caller says so with [`ClientTable::changed`].
    pub fn enter(&self, txn: &mut Txn, client: u64) {
        txn.batch.put(keys::client(client), Vec::new());
    }

    /// `client`'s change `seq` was applied (the caller holds the store lock).
    pub fn changed(&self, client: u64, seq: u64) {
        lock(&self.known).insert(client, seq);
    }

    /// Takes out of the table, in `txn`, every client whose last change is
    /// at or before `durable` (the caller holds the store lock, and makes
    /// `txn` durable soon: until then a restart still waits for them).
    pub fn retire(&self, txn: &mut Txn, durable: u64) {
        lock(&self.known).retain(|client, last| {
            let keep = *last > durable;
            if !keep {
                txn.batch.delete(keys::client(*client));
            }
            keep
        });
    }
}
