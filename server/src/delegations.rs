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
//! (`MetaStore`, for a [`Reader`]): a read of a delegated directory for
//! another client's request stops the request's attempt with the delegation
//! it met ([`Stop::Met`], a value that `?` carries up through the handler
//! like an error, and that no handler turns into an answer), and
//! `Service::handle` recalls it and runs the request again. So no request
//! waits for a recall while it holds the store's lock, which the holder's
//! own creates need.
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

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use shoal_proto::error::{Result, ShoalError};
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

/// A delegation a request met: another client, `holder`, holds directory
/// `dir`'s. The request's attempt stops there, and runs again once the
/// delegation is recalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Met {
    pub dir: Handle,
    pub holder: u64,
}

/// Why a request's attempt stopped before its handler's reply: it failed
/// (the error is its answer), or it met a delegation (it has no answer:
/// it runs again once the delegation is recalled).
#[derive(Debug)]
pub enum Stop {
    Failed(ShoalError),
    Met(Met),
}

impl From<ShoalError> for Stop {
    fn from(e: ShoalError) -> Stop {
        Stop::Failed(e)
    }
}

impl From<Met> for Stop {
    fn from(met: Met) -> Stop {
        Stop::Met(met)
    }
}

impl Stop {
    /// The error this stop is, for an answer that reports it as a value
    /// (one name of a batch refused while the others are made); a
    /// delegation met is no refusal, and stops the whole attempt: Err.
    pub fn refusal(self) -> Result<ShoalError, Met> {
        match self {
            Stop::Failed(e) => Ok(e),
            Stop::Met(met) => Err(met),
        }
    }
}

/// Whom the store reads for, as delegations see it: a request being
/// handled meets the delegations other clients hold (`request::Request`),
/// the server reading for itself meets none ([`ServerItself`]).
pub trait Reader {
    /// How a read for this reader fails: a request's attempt may stop at
    /// a delegation ([`Stop`]), the server's own reads only fail.
    type Error: From<ShoalError>;

    /// Ok unless object `h` is a directory whose delegation another client
    /// holds, and this reader meets delegations.
    fn meet(&self, delegations: &Delegations, h: Handle) -> Result<(), Self::Error>;
}

/// The server reading for itself: records it keeps (a datafile's, a file
/// whose gathered bytes it writes out), never a directory a request named.
/// It meets no delegation.
pub struct ServerItself;

impl Reader for ServerItself {
    type Error = ShoalError;

    fn meet(&self, _: &Delegations, _: Handle) -> Result<()> {
        Ok(())
    }
}

impl Delegations {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called as the store reads object `h` for a request from `asking`
    /// (0: a server or an operator): the delegation it meets, if another
    /// client holds `h`'s.
    pub fn check(&self, asking: u64, h: Handle) -> Result<(), Met> {
        if self.held.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        match self.state().holders.get(&h) {
            Some(&holder) if holder != asking => Err(Met { dir: h, holder }),
            _ => Ok(()),
        }
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

    /// Delegations held now, by every client.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed) as u64
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
        assert_eq!(d.check(2, 10), Ok(()), "none held");
        assert!(d.grant(10, 1));
        assert!(d.grant(10, 1), "a holder may ask again");
        assert!(!d.grant(10, 2));
        assert_eq!(d.check(1, 10), Ok(()), "the holder's own");
        assert_eq!(d.check(2, 11), Ok(()));
        assert_eq!(d.check(2, 10), Err(Met { dir: 10, holder: 1 }));
        assert_eq!(
            d.check(0, 10),
            Err(Met { dir: 10, holder: 1 }),
            "a server's"
        );
        assert!(ServerItself.meet(&d, 10).is_ok(), "the server's own read");
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
