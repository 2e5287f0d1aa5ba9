//! Directory delegations (beyond the papers; CephFS's asynchronous directory
//! operations, NFSv4.1's directory delegations): one client may add files
//! to a directory of this server without asking first, answering its
//! callers itself and sending the creates many to a message later
//! (`CreateFiles` with the handles it was given).
//!
//! What makes that correct is that nobody else sees the directory in the
//! meantime. While a client holds a directory's delegation, any request of
//! another client (or another server) that reads or changes it — its record,
//! a name in it, its listing — first recalls the delegation: the holder
//! sends what it has not sent yet, then answers, and only then is the
//! request served, so it sees every file the holder's callers were told
//! was made. The check sits where the store reads a directory
//! (`MetaStore`): a read of a delegated directory by another fails the
//! request's attempt with [`met`] set, `Service::handle` recalls and runs
//! the request again. So no request waits for a recall while it holds the
//! store's lock, which the holder's own creates need.
//!
//! Handles: the holder answers a create with the file's handle before the
//! file exists (the mount's inode numbers are handles), so the grant
//! reserves handles for it, moved past durably like a restart's gap
//! (`MetaStore::reserve_handles`): no other file ever gets one of them, also
//! after a crash. A `CreateFiles` may name a handle only from its client's
//! reservations. Reservations outlive a connection (a client sends its
//! unsent creates once it is back), but live in memory: a restarted server
//! takes a client's claim to a free handle it handed out before it started
//! (`MetaStore::from_before_this_start`), so unsent creates survive a
//! restart.
//!
//! Bounded: `MAX_RESERVATIONS` reservations held per client, the oldest
//! dropped (the client holds to the same bound), for at most
//! [`MAX_CLIENTS`] clients.
//! Delegations live in memory only and end with the holder's connection.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::MAX_RESERVATIONS as MAX_RESERVED;
use shoal_proto::Handle;

/// Clients whose reservations are held.
pub const MAX_CLIENTS: usize = 4096;

#[derive(Default)]
struct State {
    /// Per delegated directory, its holder.
    holders: HashMap<Handle, u64>,
    /// Per client, the handles reserved for it, oldest first.
    reserved: HashMap<u64, VecDeque<Range<Handle>>>,
}

#[derive(Default)]
pub struct Delegations {
    /// Delegations held: reads skip the table while there are none.
    held: AtomicUsize,
    state: Mutex<State>,
}

thread_local! {
    /// The sender of the request being handled on this thread (see [`Asking`]).
    static ASKING: Cell<Option<u64>> = const { Cell::new(None) };
    /// A delegation the request's attempt met: (directory, holder).
    static MET: Cell<Option<(Handle, u64)>> = const { Cell::new(None) };
}

/// A request being handled on this thread, from `client` (0: a server or
/// an operator); the store's reads check delegations only inside one.
pub struct Asking {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Asking {
    pub fn enter(client: u64) -> Asking {
        ASKING.with(|a| a.set(Some(client)));
        MET.with(|m| m.set(None));
        Asking {
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        ASKING.with(|a| a.set(None));
        MET.with(|m| m.set(None));
    }
}

/// A delegation met: (directory, holder).
pub type Met = (Handle, u64);

/// The delegation the request's last attempt met, which must be recalled
/// before it runs again (taken: asking again says None).
pub fn met() -> Option<Met> {
    MET.with(|m| m.take())
}

/// Whether the request's attempt so far met a delegation (its answer is
/// then thrown away: it runs again).
pub fn meeting() -> bool {
    MET.with(|m| m.get().is_some())
}

impl Delegations {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called as the store reads object `h`: fails if another client holds
    /// `h`'s delegation, noting it for [`met`].
    pub fn check(&self, h: Handle) -> Result<()> {
        if self.held.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        let Some(asking) = ASKING.with(Cell::get) else {
            return Ok(());
        };
        let holder = match self.state().holders.get(&h) {
            Some(&holder) if holder != asking => holder,
            _ => return Ok(()),
        };
        MET.with(|m| m.set(Some((h, holder))));
        Err(ShoalError::new(
            Errno(libc::EAGAIN),
            format!("directory {h:#x} is delegated to client {holder:#x}: recalling it"),
        ))
    }

    /// Gives `dir`'s delegation to `client` (false: another holds it).
    pub fn grant(&self, dir: Handle, client: u64) -> bool {
        let mut st = self.state();
        match st.holders.get(&dir) {
            Some(&holder) => holder == client,
            None => {
                st.holders.insert(dir, client);
                self.held.fetch_add(1, Ordering::SeqCst);
                true
            }
        }
    }

    /// Ends `dir`'s delegation if `client` holds it.
    pub fn end(&self, dir: Handle, client: u64) {
        let mut st = self.state();
        if st.holders.get(&dir) == Some(&client) {
            st.holders.remove(&dir);
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// `client`'s connection ended: its delegations go (not its
    /// reservations: it sends its unsent creates once it is back).
    pub fn client_gone(&self, client: u64) {
        let mut st = self.state();
        let before = st.holders.len();
        st.holders.retain(|_, holder| *holder != client);
        self.held
            .fetch_sub(before - st.holders.len(), Ordering::SeqCst);
    }

    pub fn held_by(&self, dir: Handle) -> Option<u64> {
        self.state().holders.get(&dir).copied()
    }

    /// Notes handles `range` as reserved for `client`.
    pub fn reserve(&self, client: u64, range: Range<Handle>) {
        let mut st = self.state();
        if st.reserved.len() == MAX_CLIENTS && !st.reserved.contains_key(&client) {
            let some = *st.reserved.keys().next().expect("full");
            st.reserved.remove(&some);
        }
        let ranges = st.reserved.entry(client).or_default();
        if ranges.len() == MAX_RESERVED {
            ranges.pop_front();
        }
        ranges.push_back(range);
    }

    /// Whether `h` was reserved for `client`.
    pub fn reserved_for(&self, client: u64, h: Handle) -> bool {
        self.state()
            .reserved
            .get(&client)
            .is_some_and(|ranges| ranges.iter().any(|r| r.contains(&h)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_another_clients_read_meets_a_delegation() {
        let d = Delegations::default();
        assert!(d.check(10).is_ok(), "none held");
        assert!(d.grant(10, 1));
        assert!(d.grant(10, 1), "a holder may ask again");
        assert!(!d.grant(10, 2));
        assert!(d.check(10).is_ok(), "outside a request");
        {
            let _a = Asking::enter(1);
            assert!(d.check(10).is_ok(), "the holder's own");
            assert!(met().is_none());
        }
        {
            let _a = Asking::enter(2);
            assert!(d.check(11).is_ok());
            let e = d.check(10).unwrap_err();
            assert_eq!(e.errno, Errno(libc::EAGAIN));
            assert_eq!(met(), Some((10, 1)));
            assert_eq!(met(), None, "taken");
        }
        d.end(10, 2);
        assert_eq!(d.held_by(10), Some(1), "only its holder ends it");
        d.client_gone(1);
        assert_eq!(d.held_by(10), None);
        assert!(d.grant(10, 2));
    }

    #[test]
    fn reservations_are_their_clients_and_bounded() {
        let d = Delegations::default();
        d.reserve(1, 100..110);
        assert!(d.reserved_for(1, 105));
        assert!(!d.reserved_for(2, 105));
        assert!(!d.reserved_for(1, 110));
        for i in 0..MAX_RESERVED as u64 {
            d.reserve(1, 1000 + i..1001 + i);
        }
        assert!(!d.reserved_for(1, 105), "the oldest went");
        assert!(d.reserved_for(1, 1000 + MAX_RESERVED as u64 - 1));
    }
}
