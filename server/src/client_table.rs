//! The clients a server answered before their changes were durable
//! (`sync = "replay"`): after a crash, these are the clients that may hold
//! changes it lost, and its recovery waits for them (`recovery`).
//!
//! A client enters the table, durably, with its first such change: that
//! change is made durable before its reply, with the client's `K` key, so
//! the table on disk always names every client that holds a change the disk
//! lacks. It leaves when its last connection closes (a process that ends
//! takes what it kept with it; one that reconnects enters again with its
//! next change, and its kept changes are durable with the sync that makes
//! its leaving durable), or after [`IDLE`] without a change: every change
//! it made is long durable by then.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shoal_proto::error::Result;

use crate::keys;
use crate::kv::KvEngine;
use crate::meta_store::Txn;

/// How long a client stays in the table after its last change.
pub const IDLE: Duration = Duration::from_secs(10 * 60);

#[derive(Default)]
pub struct ClientTable {
    /// Each client in the table, and when its last change was answered.
    known: Mutex<HashMap<u64, Instant>>,
    /// Open connections per client (every client, in the table or not).
    connections: Mutex<HashMap<u64, u32>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientTable {
    /// The table the store `kv` holds.
    pub fn open(kv: &dyn KvEngine) -> Result<ClientTable> {
        let now = Instant::now();
        let known = kv
            .scan(&[keys::CLIENT], None, usize::MAX)?
            .iter()
            .filter_map(|(k, _)| keys::handle_of(k))
            .map(|c| (c, now))
            .collect();
        Ok(ClientTable {
            known: Mutex::new(known),
            connections: Mutex::default(),
        })
    }

    /// The clients in the table.
    pub fn clients(&self) -> Vec<u64> {
        lock(&self.known).keys().copied().collect()
    }

    /// Whether `client` is in the table (durably); notes its change now.
    pub fn knows(&self, client: u64) -> bool {
        match lock(&self.known).get_mut(&client) {
            Some(seen) => {
                *seen = Instant::now();
                true
            }
            None => false,
        }
    }

    /// Puts `client` into the table in `txn`; once `txn` is durable, the
    /// caller says so with [`ClientTable::entered`].
    pub fn enter(&self, txn: &mut Txn, client: u64) {
        txn.batch.put(keys::client(client), Vec::new());
    }

    pub fn entered(&self, client: u64) {
        lock(&self.known).insert(client, Instant::now());
    }

    /// A connection sent its first request from `client`.
    pub fn connected(&self, client: u64) {
        *lock(&self.connections).entry(client).or_default() += 1;
    }

    /// A connection that carried requests from `client` closed; whether it
    /// was the client's last one and the client is in the table.
    pub fn disconnected(&self, client: u64) -> bool {
        let mut connections = lock(&self.connections);
        let Some(n) = connections.get_mut(&client) else {
            return false;
        };
        *n -= 1;
        if *n > 0 {
            return false;
        }
        connections.remove(&client);
        drop(connections);
        lock(&self.known).contains_key(&client)
    }

    /// Takes `client` out of the table in `txn`.
    pub fn forget(&self, txn: &mut Txn, client: u64) {
        lock(&self.known).remove(&client);
        txn.batch.delete(keys::client(client));
    }

    /// Takes the clients idle for [`IDLE`] out of the table in `txn`.
    pub fn expire(&self, txn: &mut Txn) {
        let mut known = lock(&self.known);
        known.retain(|client, seen| {
            let keep = seen.elapsed() < IDLE;
            if !keep {
                txn.batch.delete(keys::client(*client));
            }
            keep
        });
    }
}
