//! The fcntl and flock locks this client holds, per server: what it takes
//! again on a new connection to that server (`Pool::open`). A server drops
//! a client's locks when the connection that carried them ends (the client
//! may have died), and holds none after a restart; a client that is alive
//! takes them back before it sends anything else on its new connection.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use shoal_proto::msg::LockKind;
use shoal_proto::record_locks::{Held, OwnerLocks, Range};
use shoal_proto::Handle;

/// Whose a held lock is: a front end's lock owner, in the file's fcntl or
/// flock table (the server keeps them apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub owner: u64,
    pub flock: bool,
}

/// Per file, per holder, the ranges held.
type Table = HashMap<Handle, HashMap<Holder, OwnerLocks>>;

/// One server's share.
#[derive(Default)]
pub struct HeldLocks {
    held: Mutex<Table>,
}

impl HeldLocks {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `holder`'s request `kind` on `range` of `file` was granted (or is
    /// an unlock, noted before it is sent: a new connection must not take
    /// back what is being let go).
    pub fn set(&self, file: Handle, holder: Holder, kind: LockKind, range: Range) {
        let mut held = self.lock();
        let owners = held.entry(file).or_default();
        let locks = owners.entry(holder).or_default();
        locks.set(kind, range);
        if locks.is_empty() {
            owners.remove(&holder);
        }
        if owners.is_empty() {
            held.remove(&file);
        }
    }

    /// The holders of locks on `file`.
    pub fn holders_of(&self, file: Handle) -> Vec<Holder> {
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

    /// Whether `holder` holds any lock on `file`.
    pub fn holds(&self, file: Handle, holder: Holder) -> bool {
        self.lock()
            .get(&file)
            .is_some_and(|owners| owners.contains_key(&holder))
    }

    /// Everything held, to take again: (file, holder, lock).
    pub fn all(&self) -> Vec<(Handle, Holder, Held)> {
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
    pub fn lost(&self, file: Handle, holder: Holder, held: Held) {
        self.set(file, holder, LockKind::LockUnlock, held.range);
    }
}
