//! The POSIX record locks this client holds, per server: what it takes
//! again on a new connection to that server (`Pool::open`). A server drops
//! a client's locks when the connection that carried them ends (the client
//! may have died), and holds none after a restart; a client that is alive
//! takes them back before it sends anything else on its new connection.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use shoal_proto::msg::LockKind;
use shoal_proto::record_locks::{Held, OwnerLocks, Range};
use shoal_proto::Handle;

/// Per file, per lock owner, the ranges held.
type Table = HashMap<Handle, HashMap<u64, OwnerLocks>>;

/// One server's share.
#[derive(Default)]
pub struct HeldLocks {
    held: Mutex<Table>,
}

impl HeldLocks {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `owner`'s request `kind` on `range` of `file` was granted (or is an
    /// unlock, noted before it is sent: a new connection must not take
    /// back what is being let go).
    pub fn set(&self, file: Handle, owner: u64, kind: LockKind, range: Range) {
        let mut held = self.lock();
        let owners = held.entry(file).or_default();
        let locks = owners.entry(owner).or_default();
        locks.set(kind, range);
        if locks.is_empty() {
            owners.remove(&owner);
        }
        if owners.is_empty() {
            held.remove(&file);
        }
    }

    /// The owners holding locks on `file`.
    pub fn owners_of(&self, file: Handle) -> Vec<u64> {
        self.lock()
            .get(&file)
            .map(|owners| owners.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Whether any owner holds a lock on `file` (every open and close
    /// through the mount asks: no walk of the table).
    pub fn on_file(&self, file: Handle) -> bool {
        self.lock().contains_key(&file)
    }

    /// Whether any lock is held on this server's files.
    pub fn any(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Whether `owner` holds any lock on `file`.
    pub fn holds(&self, file: Handle, owner: u64) -> bool {
        self.lock()
            .get(&file)
            .is_some_and(|owners| owners.contains_key(&owner))
    }

    /// Everything held, to take again: (file, owner, lock).
    pub fn all(&self) -> Vec<(Handle, u64, Held)> {
        self.lock()
            .iter()
            .flat_map(|(f, owners)| {
                owners
                    .iter()
                    .flat_map(move |(o, locks)| locks.held().iter().map(move |h| (*f, *o, *h)))
            })
            .collect()
    }

    /// A lock that could not be taken again (another client took the
    /// range while this one was away) is no longer held.
    pub fn lost(&self, file: Handle, owner: u64, held: Held) {
        self.set(file, owner, LockKind::LockUnlock, held.range);
    }
}
