//! The kernel's caches under the client's leases.
//!
//! While the client holds a server's lease on an object (`Client::
//! lease_until`), the kernel may keep what it was told of it until the
//! lease ends instead of the cache TTL: an inode's attributes, a directory
//! entry (under its directory's lease), a file's pages across a close and
//! an open (FOPEN_KEEP_CACHE). This module gives those timeouts and
//! remembers what it gave, so that a recall can take it back: the client's
//! recall hook ([`KernelLeases::recall`]) has the notify thread invalidate
//! each entry given under a recalled directory and each recalled inode
//! (attributes and pages), and only then lets the client answer the
//! server.
//!
//! Notifications run on a thread of their own, never on a FUSE loop thread
//! or a task a FUSE request waits for: an invalidation can wait for a lock
//! the kernel holds while it waits for one of our replies (the known
//! deadlock of notifying from a thread the kernel is waiting on); this
//! thread waits on nothing of ours.
//!
//! A reply computed just before a recall and written just after it would
//! leave the kernel a long timeout on something recalled: replies count
//! recalls ([`Given`]), and one that saw a recall pass while it was being
//! made, or begin and not yet finish, has what it gave invalidated again.
//!
//! Bounded by the setting `cache_entries`: past it remembered names, and as
//! many inodes, what the kernel was given has its timeouts run out first
//! (their leases ended: nothing left to take back) and if none has, new
//! replies give the TTL. A FORGET does not drop what is remembered of an
//! inode: it may cross a LOOKUP that gave the same inode again (forgets come
//! through `/dev/fuse`, the lookup's reply through a ring), whose long
//! timeout a lost connection must still take back.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier};
use futures::future::BoxFuture;
use futures::FutureExt;
use shoal_client::{Client, Recalled};
use shoal_proto::Handle;

/// What the kernel was given under leases, for the recalls to take back.
struct Remembered {
    /// Per directory, the names given a long entry timeout, and until when.
    names: HashMap<Handle, HashMap<String, Instant>>,
    /// Inodes given a long attribute timeout or cached pages, and until when.
    inodes: HashMap<Handle, Instant>,
    /// Names in `names`.
    count: usize,
    /// Names, and inodes, remembered at most.
    max: usize,
    /// The earliest end of a timeout remembered: no sweep finds anything
    /// to drop before then.
    earliest: Option<Instant>,
}

impl Remembered {
    fn new(max: usize) -> Remembered {
        Remembered {
            names: HashMap::new(),
            inodes: HashMap::new(),
            count: 0,
            max: max.max(1),
            earliest: None,
        }
    }

    /// Remembers `name` in `dir` as given a long timeout, until `until`;
    /// false (give the TTL) when full.
    fn name(&mut self, dir: Handle, name: &str, until: Instant) -> bool {
        if self.count >= self.max {
            self.sweep();
            if self.count >= self.max {
                return false;
            }
        }
        let names = self.names.entry(dir).or_default();
        match names.get_mut(name) {
            Some(at) => *at = (*at).max(until),
            None => {
                names.insert(name.to_string(), until);
                self.count += 1;
            }
        }
        self.earliest = Some(self.earliest.map_or(until, |e| e.min(until)));
        true
    }

    /// Remembers inode `h` as given a long timeout, until `until`; false
    /// when full.
    fn inode(&mut self, h: Handle, until: Instant) -> bool {
        if self.inodes.len() >= self.max && !self.inodes.contains_key(&h) {
            self.sweep();
            if self.inodes.len() >= self.max {
                return false;
            }
        }
        let at = self.inodes.entry(h).or_insert(until);
        *at = (*at).max(until);
        self.earliest = Some(self.earliest.map_or(until, |e| e.min(until)));
        true
    }

    /// Forgets what the kernel has dropped by itself (its timeout ran
    /// out), if anything can have.
    fn sweep(&mut self) {
        let now = Instant::now();
        if self.earliest.is_none_or(|e| e > now) {
            return;
        }
        let mut earliest: Option<Instant> = None;
        let mut keep = |until: &Instant| {
            let live = *until > now;
            if live {
                earliest = Some(earliest.map_or(*until, |e| e.min(*until)));
            }
            live
        };
        self.inodes.retain(|_, until| keep(until));
        for names in self.names.values_mut() {
            names.retain(|_, until| keep(until));
        }
        self.names.retain(|_, names| !names.is_empty());
        self.count = self.names.values().map(HashMap::len).sum();
        self.earliest = earliest;
    }

    /// Names and inodes remembered now.
    fn len(&self) -> (usize, usize) {
        (self.count, self.inodes.len())
    }
}

/// One invalidation job for the notify thread.
enum Job {
    /// The inodes and the names remembered under them; `recall`: one of
    /// the recalls counted in `recalls`, counted in `recalls_done` once run.
    Take {
        handles: Vec<Handle>,
        done: Option<tokio::sync::oneshot::Sender<()>>,
        recall: bool,
    },
    /// The inodes' attributes alone (this client's own change outdated
    /// them), one of the recalls counted.
    Attributes {
        handles: Vec<Handle>,
        done: tokio::sync::oneshot::Sender<()>,
    },
    Entry(Handle, String),
    /// Everything remembered: always a recall.
    Everything(tokio::sync::oneshot::Sender<()>),
}

impl Job {
    fn is_recall(&self) -> bool {
        match self {
            Job::Take { recall, .. } => *recall,
            Job::Entry(..) => false,
            Job::Everything(_) | Job::Attributes { .. } => true,
        }
    }
}

pub struct KernelLeases {
    remembered: Mutex<Remembered>,
    /// Recalls begun so far.
    recalls: AtomicU64,
    /// Recalls whose invalidations have all been sent to the kernel. One
    /// begun and not finished may have taken a name from what is remembered
    /// and not yet invalidated it: a reply made meanwhile may move or give
    /// that entry again, after the invalidation has missed it.
    recalls_done: AtomicU64,
    jobs: Mutex<mpsc::Sender<Job>>,
    notifier: Arc<OnceLock<Notifier>>,
}

/// A reply in the making: the recalls counted when it began, and whether
/// one of them was still under way.
pub struct Given {
    recalls: u64,
    unfinished: bool,
}

impl KernelLeases {
    /// Starts the notify thread; [`KernelLeases::attach`] gives it the
    /// session's notifier once the session exists. At most `max` names and
    /// as many inodes are remembered.
    pub fn start(max: usize) -> Arc<KernelLeases> {
        let (tx, rx) = mpsc::channel();
        let notifier: Arc<OnceLock<Notifier>> = Arc::default();
        let leases = Arc::new(KernelLeases {
            remembered: Mutex::new(Remembered::new(max)),
            recalls: AtomicU64::new(0),
            recalls_done: AtomicU64::new(0),
            jobs: Mutex::new(tx),
            notifier: notifier.clone(),
        });
        let weak = Arc::downgrade(&leases);
        std::thread::Builder::new()
            .name("shoal-notify".into())
            .spawn(move || {
                for job in rx {
                    let Some(leases) = weak.upgrade() else {
                        return;
                    };
                    leases.run(job);
                }
            })
            .expect("spawning the notify thread");
        leases
    }

    /// Sends recalls' invalidations through `notifier` from now on, and
    /// makes `client`'s recalls wait for them.
    pub fn attach(self: &Arc<Self>, notifier: Notifier, client: &Client) {
        let _ = self.notifier.set(notifier);
        let me = self.clone();
        client.on_recall(Arc::new(move |what: &Recalled| me.recall(what)));
    }

    /// Forgets what the kernel has dropped by itself (timeouts ended) and
    /// gives back the tables' spare room.
    pub fn sweep(&self) {
        let mut r = self.remembered.lock().unwrap();
        r.sweep();
        r.names.shrink_to_fit();
        r.inodes.shrink_to_fit();
    }

    /// Names and inodes remembered now, and the bound of each.
    pub fn sizes(&self) -> [shoal_client::TableSize; 2] {
        let r = self.remembered.lock().unwrap();
        let (names, inodes) = r.len();
        [
            shoal_client::TableSize::new("kernel_lease_names", names, r.max),
            shoal_client::TableSize::new("kernel_lease_inodes", inodes, r.max),
        ]
    }

    /// Begins a reply that may give lease timeouts.
    pub fn give(&self) -> Given {
        // Finished before begun: a recall that begins and ends between the
        // two loads counts as unfinished (taken back in vain, never missed).
        let done = self.recalls_done.load(Ordering::SeqCst);
        let recalls = self.recalls.load(Ordering::SeqCst);
        Given {
            recalls,
            unfinished: done != recalls,
        }
    }

    /// The attribute timeout of inode `h`: what is left of its lease, or
    /// `ttl`.
    pub fn attr_ttl(&self, c: &Client, h: Handle, ttl: Duration) -> Duration {
        match left(c.lease_until(h)) {
            Some(left) if left > ttl && self.remembered.lock().unwrap().inode(h, ends(left)) => {
                left
            }
            _ => ttl,
        }
    }

    /// The entry timeout of `name` in `dir`: what is left of the
    /// directory's lease, or `ttl`.
    pub fn entry_ttl(&self, c: &Client, dir: Handle, name: &str, ttl: Duration) -> Duration {
        let Some(left) = left(c.lease_until(dir)).filter(|l| *l > ttl) else {
            return ttl;
        };
        if self.remembered.lock().unwrap().name(dir, name, ends(left)) {
            left
        } else {
            ttl
        }
    }

    /// The timeout of each entry of a listing step of `dir`, entry and
    /// attributes alike (READDIRPLUS gives one): the shorter of what is
    /// left of the directory's lease and of the entry's object's, or `ttl`.
    /// One look at the leases and one at what is remembered for the step.
    pub fn listing_ttls(
        &self,
        c: &Client,
        dir: Handle,
        entries: &[(Handle, &str)],
        ttl: Duration,
    ) -> Vec<Duration> {
        let mut handles: Vec<Handle> = entries.iter().map(|(h, _)| *h).collect();
        handles.push(dir);
        let leases = c.leases_until(&handles);
        let Some(dir_left) = left(leases[entries.len()]).filter(|l| *l > ttl) else {
            return vec![ttl; entries.len()];
        };
        let mut r = self.remembered.lock().unwrap();
        let mut ttls = Vec::with_capacity(entries.len());
        for ((h, name), lease) in entries.iter().zip(leases) {
            let long = left(lease).filter(|l| *l > ttl).map(|l| l.min(dir_left));
            match long {
                Some(long) if r.name(dir, name, ends(long)) && r.inode(*h, ends(long)) => {
                    ttls.push(long);
                }
                _ => ttls.push(ttl),
            }
        }
        ttls
    }

    /// Whether an open of `h` may keep the pages the kernel has of it: the
    /// file is leased, so nobody else changed it since they were read.
    pub fn keep_pages(&self, c: &Client, h: Handle) -> bool {
        // Pages stay cached across opens for as long as the lease lasts.
        c.lease_until(h)
            .is_some_and(|until| self.remembered.lock().unwrap().inode(h, until))
    }

    /// Ends reply `given`, which gave inode `h` (and `name` in `dir`) what
    /// it gave: if a recall began meanwhile, that may be the recall of what
    /// it gave, so it is taken back again.
    pub fn given(&self, given: Given, h: Handle, entry: Option<(Handle, &str)>) {
        match entry {
            Some((dir, name)) => self.take_back(given, &[h], dir, &[name]),
            None => self.take_back(given, &[h], h, &[]),
        }
    }

    /// [`given`](Self::given) for a listing of `dir` that gave `entries`
    /// (object, name).
    pub fn given_listing(&self, given: Given, dir: Handle, entries: &[(Handle, String)]) {
        let objects: Vec<Handle> = entries.iter().map(|(h, _)| *h).collect();
        let names: Vec<&str> = entries.iter().map(|(_, n)| n.as_str()).collect();
        self.take_back(given, &objects, dir, &names);
    }

    /// Takes back from the kernel the entries of `dir` given a lease's
    /// timeout, and `dir`'s attributes: what a chmod that takes search
    /// away from some users leaves behind (`crate::access`).
    /// Counted as a recall, so that a reply being made meanwhile, which may
    /// have seen the old mode, takes back what it gives.
    pub fn take_entries_of(&self, dir: Handle) {
        self.recalls.fetch_add(1, Ordering::SeqCst);
        let _ = self.jobs.lock().unwrap().send(Job::Take {
            handles: vec![dir],
            done: None,
            recall: true,
        });
    }

    /// Drops the kernel's attributes and pages of inode `h` (after a lock
    /// is granted: another client may have written it), returning once
    /// they are gone.
    pub async fn drop_inode(&self, h: Handle) {
        let (done, finished) = tokio::sync::oneshot::channel();
        if self
            .jobs
            .lock()
            .unwrap()
            .send(Job::Take {
                handles: vec![h],
                done: Some(done),
                recall: false,
            })
            .is_ok()
        {
            let _ = finished.await;
        }
    }

    /// Ends the reply to a rename of `name` in `dir` to `new_name` in
    /// `new_dir`, begun as `given`: the kernel moved its entry, with the
    /// timeout it was given, to the new name, so what is remembered moves
    /// with it. (Remembered under the old name only, a recall of the
    /// directory would take back a name the kernel no longer has and leave
    /// the moved entry standing, its object replaced by another client, for
    /// the rest of the lease.) If a recall began since `given`, it may have
    /// missed the entry on its way: it is taken back again.
    ///
    /// Into another directory, the entry keeps the timeout `dir`'s lease
    /// gave it; unless `new_dir`'s lease lasts as long, a recall of
    /// `new_dir` might never come for it, so it is taken back at once.
    pub fn renamed(
        &self,
        c: &Client,
        given: Given,
        (dir, name): (Handle, &str),
        (new_dir, new_name): (Handle, &str),
    ) {
        let covered = dir == new_dir
            || c.lease_until(new_dir)
                .is_some_and(|n| c.lease_until(dir).is_none_or(|o| n >= o));
        let take_now = {
            let mut r = self.remembered.lock().unwrap();
            let had = r.names.get_mut(&dir).and_then(|names| names.remove(name));
            if had.is_some() {
                r.count -= 1;
            }
            let until = had.unwrap_or_else(Instant::now);
            let had = had.is_some();
            // Room was just made for it: remembered whenever covered.
            had && (!covered || !r.name(new_dir, new_name, until))
        };
        if take_now {
            let _ = self
                .jobs
                .lock()
                .unwrap()
                .send(Job::Entry(new_dir, new_name.to_string()));
        }
        self.take_back(given, &[], new_dir, &[new_name]);
    }

    /// Takes `objects` and the entries `names` of `dir` back from the
    /// kernel if a recall began since `given`, or was under way then.
    fn take_back(&self, given: Given, objects: &[Handle], dir: Handle, names: &[&str]) {
        if !given.unfinished && self.recalls.load(Ordering::SeqCst) == given.recalls {
            return;
        }
        let jobs = self.jobs.lock().unwrap();
        for name in names {
            let _ = jobs.send(Job::Entry(dir, name.to_string()));
        }
        if !objects.is_empty() {
            let _ = jobs.send(Job::Take {
                handles: objects.to_vec(),
                done: None,
                recall: false,
            });
        }
    }

    /// The client's recall hook: the kernel's caches of what is recalled go
    /// first, then the client answers the server.
    fn recall(&self, what: &Recalled) -> BoxFuture<'static, ()> {
        self.recalls.fetch_add(1, Ordering::SeqCst);
        let (done, finished) = tokio::sync::oneshot::channel();
        let job = match what {
            Recalled::Objects(handles) => Job::Take {
                handles: handles.clone(),
                done: Some(done),
                recall: true,
            },
            Recalled::Attributes(handles) => Job::Attributes {
                handles: handles.clone(),
                done,
            },
            Recalled::Everything => Job::Everything(done),
            // The client's own: never handed to this hook.
            Recalled::Delegations(_) => return futures::future::ready(()).boxed(),
        };
        if self.jobs.lock().unwrap().send(job).is_err() {
            return futures::future::ready(()).boxed();
        }
        async move {
            let _ = finished.await;
        }
        .boxed()
    }

    /// Runs one job on the notify thread; a recall's counts as finished
    /// once its invalidations are sent (or there was no session to send
    /// them to: the kernel was given nothing).
    fn run(&self, job: Job) {
        let recall = job.is_recall();
        if let Some(notifier) = self.notifier.get() {
            self.invalidate(notifier, job);
        }
        if recall {
            self.recalls_done.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Sends the kernel the invalidations of `job`.
    fn invalidate(&self, notifier: &Notifier, job: Job) {
        match job {
            Job::Take { handles, done, .. } => {
                for h in handles {
                    let names = {
                        let mut r = self.remembered.lock().unwrap();
                        r.inodes.remove(&h);
                        let names = r.names.remove(&h).unwrap_or_default();
                        r.count -= names.len();
                        names
                    };
                    for name in names.into_keys() {
                        invalidate_entry(notifier, h, name);
                    }
                    invalidate_inode(notifier, h);
                }
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            Job::Attributes { handles, done } => {
                for h in handles {
                    self.remembered.lock().unwrap().inodes.remove(&h);
                    invalidate_inode(notifier, h);
                }
                let _ = done.send(());
            }
            Job::Entry(dir, name) => invalidate_entry(notifier, dir, name),
            Job::Everything(done) => {
                let all = {
                    let mut r = self.remembered.lock().unwrap();
                    let empty = Remembered::new(r.max);
                    std::mem::replace(&mut *r, empty)
                };
                for (dir, names) in all.names {
                    for name in names.into_keys() {
                        invalidate_entry(notifier, dir, name);
                    }
                    invalidate_inode(notifier, dir);
                }
                for h in all.inodes.into_keys() {
                    invalidate_inode(notifier, h);
                }
                let _ = done.send(());
            }
        }
    }
}

/// When a timeout of `left` from now ends.
fn ends(left: Duration) -> Instant {
    Instant::now() + left
}

/// What is left of a lease that ends at `until`.
fn left(until: Option<Instant>) -> Option<Duration> {
    until.map(|u| u.saturating_duration_since(Instant::now()))
}

fn invalidate_entry(notifier: &Notifier, dir: Handle, name: String) {
    // ENOENT (the kernel no longer has it) is not an error for fuser.
    if let Err(e) = notifier.inval_entry(INodeNo(dir), &OsString::from(name)) {
        tracing::debug!("invalidating an entry of {dir:#x}: {e}");
    }
}

/// Drops the inode's attributes and all its cached pages.
fn invalidate_inode(notifier: &Notifier, h: Handle) {
    if let Err(e) = notifier.inval_inode(INodeNo(h), 0, 0) {
        tracing::debug!("invalidating inode {h:#x}: {e}");
    }
}
