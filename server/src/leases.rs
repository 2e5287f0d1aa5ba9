//! Leases: what each client may cache of this server's objects until the
//! server says otherwise (Lustre's LDLM locks, CephFS's capabilities and
//! NFSv4's delegations play this part there).
//!
//! A lease is one client's on one object (a directory's entries and
//! record, a file's record, a datafile's size and bytes), held for
//! `lease_ms` after the answer that granted it and renewed by every later
//! one. An answer to a lookup, getattr, get_sizes, readdir, listattr or
//! create offers leases on the objects it describes (handlers call
//! `Request::offer`, which notes them in the request's [`Answer`]);
//! `Service::handle` grants them all or none and says so with the reply's
//! `LEASED` flag. A datafile's lease is held *as* its file's,
//! so its recall names the file, the object the client cached.
//!
//! Every change to an object (`Service::change` finds the objects in the
//! keys its transaction writes; the data handlers name the datafile they
//! write) recalls the leases other clients hold on it before it returns:
//! a `Recall` over each holder's connection, and a wait for every answer,
//! bounded by `lease_recall_ms`. A holder that does not answer in time
//! loses all its leases here and its connection is closed, so that it
//! learns it (a client drops every lease of a server whose connection
//! ended). The changing client keeps its own leases: it keeps its own
//! caches right as it changes things.
//!
//! An answer read before a change and granted after the change's recall
//! would hand out a lease on the old state: a change stamps its objects
//! (`stamps`, a fixed array indexed by a hash of the handle, so that it
//! takes no memory per object), and a grant is refused when an object it
//! offers was stamped after the answer began ([`Leases::answer`]), unless
//! the answer's own change stamped it. A false match costs a lease, never
//! correctness.
//!
//! Bounded: at most `max_leases` are held; when full, expired ones are
//! dropped and, if that is not enough, answers grant nothing (clients then
//! cache for `cache_ttl_ms`, as without leases). Leases live in memory
//! only: a restarted server holds none, and its clients, whose connection
//! ended, hold none either.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use shoal_net::sink::FrameSink;
use shoal_proto::cluster::Settings;
use shoal_proto::frame::{Frame, NO_LEASES};
use shoal_proto::msg::RecallRequest;
use shoal_proto::{Cred, Handle, Op};
use smallvec::SmallVec;

/// Slots of the change stamps: a power of two.
const STAMPS: usize = 1 << 14;

/// One client's lease on one object.
struct Holder {
    client: u64,
    /// The object the client cached, which a recall names (a datafile's
    /// lease is its file's).
    recall_as: Handle,
    until: Instant,
}

/// The connection a client's recalls go over.
struct Link {
    conn: u64,
    sink: Arc<FrameSink>,
}

#[derive(Default)]
struct State {
    /// Per object, its holders: usually one, stored inline.
    held: HashMap<Handle, SmallVec<[Holder; 1]>>,
    count: usize,
    links: HashMap<u64, Link>,
    /// Recalls sent and not answered yet, by recall id.
    waiting: HashMap<u64, mpsc::Sender<()>>,
    /// When a full table was last swept of expired leases.
    swept: Option<Instant>,
    /// Directory delegations being recalled, (directory, holder), and by
    /// how many requests at once.
    recalling: HashMap<(Handle, u64), u32>,
}

/// How often a full table is swept at most (a sweep walks all of it).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

pub struct Leases {
    term: Duration,
    bound: Duration,
    max: usize,
    /// Changes counted so far; `stamps` holds, per slot, the count at the
    /// last change of an object hashed there.
    changes: AtomicU64,
    stamps: Box<[AtomicU64]>,
    next_recall: AtomicU64,
    recalls: AtomicU64,
    timeouts: AtomicU64,
    state: Mutex<State>,
}

/// Counters of what leases did, for `shoal stats`.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseCounts {
    pub held: u64,
    pub recalls: u64,
    pub recall_timeouts: u64,
}

fn slot(h: Handle) -> usize {
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50) as usize & (STAMPS - 1)
}

impl Leases {
    pub fn new(settings: &Settings) -> Leases {
        Leases {
            term: Duration::from_millis(settings.lease_ms as u64),
            bound: Duration::from_millis(settings.lease_recall_ms as u64),
            max: settings.max_leases as usize,
            changes: AtomicU64::new(0),
            stamps: (0..STAMPS).map(|_| AtomicU64::new(0)).collect(),
            next_recall: AtomicU64::new(1),
            recalls: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            state: Mutex::default(),
        }
    }

    fn on(&self) -> bool {
        !self.term.is_zero() && self.max > 0
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where the changes stand as an answer begins: its grant is refused
    /// if an object it offers changed since.
    fn mark(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// An answer to a request of `client` (0: a server or an operator),
    /// beginning now.
    pub fn answer(&self, client: u64) -> Answer {
        Answer {
            client,
            mark: self.mark(),
            offers: Vec::new(),
            own: Vec::new(),
        }
    }

    /// `client` sends its requests, and takes its recalls, over connection
    /// `conn` (a listener's number for it) through `sink`.
    pub fn connected(&self, client: u64, conn: u64, sink: &Arc<FrameSink>) {
        if !self.on() || client == 0 || client & NO_LEASES != 0 {
            return;
        }
        let link = Link {
            conn,
            sink: sink.clone(),
        };
        self.state().links.insert(client, link);
    }

    /// Connection `conn` of `client` ended: its leases go with it (the
    /// client drops what it cached from this server when it sees the
    /// connection end), unless the client already came back on another.
    /// Returns whether they went.
    pub fn disconnected(&self, client: u64, conn: u64) -> bool {
        if !self.on() || client == 0 {
            return false;
        }
        let mut st = self.state();
        if st.links.get(&client).is_some_and(|l| l.conn == conn) {
            st.links.remove(&client);
            forget_client(&mut st, client);
            return true;
        }
        false
    }

    /// Grants the client `answer` is for a lease on each object it
    /// offered: all or none. None when leases are off, the client cannot be
    /// recalled (no connection known), an object was changed by another
    /// request since the answer began, or the table is full.
    pub fn grant(&self, answer: &Answer) -> bool {
        self.grant_offers(answer.client, answer.mark, &answer.offers, &answer.own)
    }

    fn grant_offers(
        &self,
        client: u64,
        mark: u64,
        offers: &[(Handle, Handle)],
        own: &[u64],
    ) -> bool {
        if !self.on() || client == 0 || client & NO_LEASES != 0 || offers.is_empty() {
            return false;
        }
        let mut st = self.state();
        if !st.links.contains_key(&client) {
            return false;
        }
        let changed = |h: &Handle| {
            let stamp = self.stamps[slot(*h)].load(Ordering::SeqCst);
            stamp > mark && !own.contains(&stamp)
        };
        if offers.iter().any(|(h, _)| changed(h)) {
            return false;
        }
        let now = Instant::now();
        // At most every offer is new: a table that might not hold them all
        // is swept first (a renewal takes no room, but telling costs a
        // second look at each offer).
        if st.count + offers.len() > self.max {
            if st.swept.is_some_and(|at| now - at < SWEEP_EVERY) {
                return false;
            }
            st.swept = Some(now);
            drop_expired(&mut st, now);
            if st.count + offers.len() > self.max {
                return false;
            }
        }
        let until = now + self.term;
        for &(h, recall_as) in offers {
            let holders = st.held.entry(h).or_default();
            match holders
                .iter_mut()
                .find(|x| x.client == client && x.recall_as == recall_as)
            {
                Some(x) => x.until = until,
                None => {
                    holders.push(Holder {
                        client,
                        recall_as,
                        until,
                    });
                    st.count += 1;
                }
            }
        }
        true
    }

    /// Whether a client other than `client` holds a lease on `h`, so that
    /// a change to it would wait for a recall.
    pub fn held_by_others(&self, h: Handle, client: u64) -> bool {
        if !self.on() {
            return false;
        }
        let now = Instant::now();
        self.state()
            .held
            .get(&h)
            .is_some_and(|v| v.iter().any(|x| x.client != client && x.until > now))
    }

    /// The request that `by` answers changed `handles`: stamps them (the
    /// stamp is `by`'s own, which does not refuse its grant), recalls every
    /// lease another client holds on them, and waits for the answers, at
    /// most `lease_recall_ms`. Returns how many clients were recalled.
    pub fn changed(&self, by: &mut Answer, handles: &[Handle]) -> usize {
        let changer = by.client;
        if !self.on() || handles.is_empty() {
            return 0;
        }
        let mut recalls: HashMap<u64, Vec<Handle>> = HashMap::new();
        let mut st = self.state();
        let count = self.changes.fetch_add(1, Ordering::SeqCst) + 1;
        by.own.push(count);
        let now = Instant::now();
        for h in handles {
            self.stamps[slot(*h)].store(count, Ordering::SeqCst);
            let Some(holders) = st.held.get_mut(h) else {
                continue;
            };
            let before = holders.len();
            holders.retain(|x| {
                if x.client == changer {
                    return true;
                }
                if x.until > now {
                    recalls.entry(x.client).or_default().push(x.recall_as);
                }
                false
            });
            let after = holders.len();
            if after == 0 {
                st.held.remove(h);
            }
            st.count -= before - after;
        }
        if recalls.is_empty() {
            return 0;
        }
        let recalls = recalls.into_iter().map(|(client, mut objects)| {
            objects.sort_unstable();
            objects.dedup();
            let recall = RecallRequest {
                handles: objects,
                delegations: Vec::new(),
            };
            (client, recall)
        });
        self.recall_and_wait(st, recalls.collect())
    }

    /// Recalls directory `dir`'s delegation from `holder` (`delegations`):
    /// the holder sends its unsent changes there, then answers. Waits for
    /// the answer as a change waits for a lease's, at most
    /// `lease_recall_ms`; a holder that does not answer in time loses its
    /// leases and its connection, which ends its delegations too.
    pub fn recall_delegation(&self, dir: Handle, holder: u64) {
        let recall = RecallRequest {
            handles: Vec::new(),
            delegations: vec![dir],
        };
        let key = (dir, holder);
        let mut st = self.state();
        *st.recalling.entry(key).or_default() += 1;
        self.recall_and_wait(st, vec![(holder, recall)]);
        let mut st = self.state();
        let n = st
            .recalling
            .get_mut(&key)
            .expect("counted before the recall");
        *n -= 1;
        if *n == 0 {
            st.recalling.remove(&key);
        }
    }

    /// Whether `client`'s delegation of `dir` is being recalled now: the
    /// creates it sends there meanwhile are the ones it answered itself,
    /// sent because another client wants the directory.
    pub fn recalling_delegation(&self, dir: Handle, client: u64) -> bool {
        self.state().recalling.contains_key(&(dir, client))
    }

    /// Whether this server can send `client` recalls (it holds a
    /// connection that takes them).
    pub fn can_recall(&self, client: u64) -> bool {
        self.on() && self.state().links.contains_key(&client)
    }

    /// Sends each recall to its client over the client's link and waits
    /// for every answer, at most `lease_recall_ms`; evicts the clients that
    /// did not answer. Returns how many recalls were sent.
    fn recall_and_wait(
        &self,
        st: MutexGuard<'_, State>,
        recalls: Vec<(u64, RecallRequest)>,
    ) -> usize {
        let mut st = st;
        let (tx, rx) = mpsc::channel();
        let mut sent = Vec::new();
        for (client, recall) in recalls {
            let Some(link) = st.links.get(&client) else {
                continue;
            };
            let id = self.next_recall.fetch_add(1, Ordering::Relaxed);
            let body = Bytes::from(recall.encode_to_vec());
            let frame = Frame::request(Op::Recall, id, Cred::new(0, 0), body, Bytes::new());
            if link.sink.send(&frame).is_ok() {
                st.waiting.insert(id, tx.clone());
                sent.push((id, client));
            }
        }
        drop(st);
        drop(tx);
        self.recalls.fetch_add(sent.len() as u64, Ordering::Relaxed);
        let deadline = Instant::now() + self.bound;
        let answered = waiting_here(|| {
            let mut answered = 0;
            while answered < sent.len() {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(()) => answered += 1,
                    Err(_) => break,
                }
            }
            answered
        });
        if answered < sent.len() {
            self.evict_silent(&sent);
        }
        sent.len()
    }

    /// A client answered recall `id`.
    pub fn answered(&self, id: u64) {
        if let Some(waiter) = self.state().waiting.remove(&id) {
            let _ = waiter.send(());
        }
    }

    /// The recalls of `sent` still unanswered after the bound: their
    /// clients lose every lease here, and their connections are closed so
    /// that they learn it.
    fn evict_silent(&self, sent: &[(u64, u64)]) {
        let mut st = self.state();
        for (id, client) in sent {
            if st.waiting.remove(id).is_none() {
                continue;
            }
            self.timeouts.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "client {client:#x} did not answer a lease recall within {} ms: \
                 its leases are dropped and its connection closed",
                self.bound.as_millis()
            );
            forget_client(&mut st, *client);
            if let Some(link) = st.links.remove(client) {
                link.sink.shut_down();
            }
        }
    }

    pub fn counts(&self) -> LeaseCounts {
        LeaseCounts {
            held: self.state().count as u64,
            recalls: self.recalls.load(Ordering::Relaxed),
            recall_timeouts: self.timeouts.load(Ordering::Relaxed),
        }
    }
}

fn forget_client(st: &mut State, client: u64) {
    keep_only(st, |x| x.client != client);
}

fn drop_expired(st: &mut State, now: Instant) {
    keep_only(st, |x| x.until > now);
}

/// Walks the whole table and keeps the leases `keep` says, counting the
/// rest out.
fn keep_only(st: &mut State, keep: impl Fn(&Holder) -> bool) {
    let mut dropped = 0;
    st.held.retain(|_, v| {
        let before = v.len();
        v.retain(|x| keep(x));
        dropped += before - v.len();
        !v.is_empty()
    });
    st.count -= dropped;
}

/// What one answer to a client's request does with leases, from its
/// beginning ([`Leases::answer`]) to its grant ([`Leases::grant`]). The
/// request carries it (`Request::offer`), so every offer its handler makes
/// reaches the grant.
#[derive(Default)]
pub struct Answer {
    client: u64,
    /// Where the changes stood as the answer began.
    mark: u64,
    /// Leases it offers: (object, the object its recall names).
    offers: Vec<(Handle, Handle)>,
    /// The stamps its own changes set, which do not refuse its grant.
    own: Vec<u64>,
}

impl Answer {
    /// Offers a lease on `h`, recalled as `recall_as`.
    pub fn offer(&mut self, h: Handle, recall_as: Handle) {
        self.offers.push((h, recall_as));
    }
}

/// Runs `wait`, which blocks this thread until other connections' tasks
/// have read the answers it waits for. A change answered on a connection's
/// task (a runtime worker: see `Service::stays_in_memory`) first hands the
/// worker's other tasks to another thread, so they go on being served,
/// those answers among them; on the blocking pool there is nothing to hand
/// over. The server's runtime is multi-threaded: on a single-threaded one
/// the answers could never arrive.
fn waiting_here<T>(wait: impl FnOnce() -> T) -> T {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        assert_eq!(
            runtime.runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread,
            "a recall is waited for on a multi-threaded runtime"
        );
    }
    tokio::task::block_in_place(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(max: u32) -> Leases {
        Leases::new(&Settings {
            lease_ms: 60_000,
            lease_recall_ms: 50,
            max_leases: max,
            ..Settings::default()
        })
    }

    #[test]
    fn a_change_after_the_answer_began_refuses_the_grant() {
        let l = leases(100);
        l.state().links.insert(7, dummy_link());
        let mark = l.mark();
        l.changed(&mut l.answer(8), &[42]);
        assert!(
            !l.grant_offers(7, mark, &[(42, 42)], &[]),
            "42 changed since the mark"
        );
        assert!(l.grant_offers(7, mark, &[(42, 42)], &[1]), "its own change");
        assert!(l.grant_offers(7, l.mark(), &[(42, 42)], &[]));
        assert_eq!(l.counts().held, 1);
        // An answer whose own request changed what it offers.
        let mut own = l.answer(7);
        l.changed(&mut own, &[43]);
        own.offer(43, 43);
        assert!(l.grant(&own), "its own change refuses nothing");
        let mut late = l.answer(7);
        late.offer(44, 44);
        l.changed(&mut l.answer(8), &[44]);
        assert!(!l.grant(&late), "another's change since it began");
    }

    #[test]
    fn the_table_is_bounded_and_unknown_clients_get_nothing() {
        let l = leases(2);
        let grant = |offers: &[(Handle, Handle)]| l.grant_offers(7, l.mark(), offers, &[]);
        assert!(!grant(&[(1, 1)]), "no connection to recall over");
        l.state().links.insert(7, dummy_link());
        assert!(grant(&[(1, 1), (2, 1)]));
        assert!(!grant(&[(3, 3)]), "full");
        assert!(!grant(&[(1, 1)]), "a renewal is refused too while full");
        l.disconnected(7, 0);
        assert_eq!(l.counts().held, 0);
        let quiet = 7 | NO_LEASES;
        l.state().links.insert(quiet, dummy_link());
        assert!(
            !l.grant_offers(quiet, l.mark(), &[(1, 1)], &[]),
            "takes no leases"
        );
    }

    /// A link nobody reads (the tests that send recalls run real servers).
    fn dummy_link() -> Link {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (_r, w) = stream.into_split();
            Link {
                conn: 0,
                sink: Arc::new(FrameSink::new(w)),
            }
        })
    }
}
