//! Cluster-wide locks against a model: three native clients (each with its
//! own connections, as three hosts' mounts or libraries have), two lock
//! owners each, take, change and drop fcntl and flock locks on two files
//! of a two-server cluster in a seeded random order, close files (an
//! owner's fcntl locks go) and die (a client's runtime ends, its sockets
//! close, and a new client takes its place). Every answer is checked
//! against a model of the lock tables (`shoal_proto::record_locks` per
//! owner; two owners conflict where their ranges overlap and one writes;
//! fcntl and flock locks never meet): a lock the model says is free must
//! be granted, one it says is taken must fail with EAGAIN, F_GETLK must
//! find a lock in the way exactly when the model has one, and after each
//! death the servers' count of lock holders must come to the model's.
//! Since every grant is checked, no two owners ever hold conflicting
//! locks.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_client::{Client, Errno, LockAsk, LockKind};
use shoal_proto::handle::{server_of, ROOT};
use shoal_proto::record_locks::{OwnerLocks, Range};
use shoal_tests::Cluster;

const CLIENTS: usize = 3;
const OWNERS: u64 = 2;
const STEPS: usize = 1000;

/// One owner's locks on one file, in one of its two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    client: usize,
    owner: u64,
    file: usize,
    flock: bool,
}

impl Key {
    /// This owner's request of `kind` on `range`, as a client sends it.
    fn ask(self, kind: LockKind, range: Range) -> LockAsk {
        LockAsk {
            owner: self.owner,
            kind,
            start: range.start,
            end: range.end,
            pid: self.owner as u32,
            flock: self.flock,
        }
    }
}

#[derive(Default)]
struct Model {
    held: HashMap<Key, OwnerLocks>,
}

impl Model {
    /// Whether another owner's lock in the same table is in the way.
    fn in_way(&self, key: Key, kind: LockKind, range: Range) -> bool {
        self.held.iter().any(|(k, locks)| {
            k.file == key.file
                && k.flock == key.flock
                && (k.client, k.owner) != (key.client, key.owner)
                && locks.conflict(kind, range).is_some()
        })
    }

    fn set(&mut self, key: Key, kind: LockKind, range: Range) {
        let locks = self.held.entry(key).or_default();
        locks.set(kind, range);
        if locks.is_empty() {
            self.held.remove(&key);
        }
    }

    /// Holders on the files of `server` (what its `lock_holders` counts).
    fn holders_on(&self, files: &[u64], server: u32) -> u64 {
        self.held
            .keys()
            .filter(|k| server_of(files[k.file]) == server)
            .count() as u64
    }
}

/// A client with its own runtime, so that dropping both ends its
/// connections as a dead process's would.
struct Host {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Host {
    fn new(cluster: &Cluster) -> Host {
        Host {
            rt: tokio::runtime::Runtime::new().unwrap(),
            client: cluster.client(),
        }
    }
}

fn random_range(rng: &mut StdRng) -> Range {
    let start = rng.random_range(0..40u64);
    let end = if rng.random_bool(0.2) {
        u64::MAX
    } else {
        start + rng.random_range(0..12u64)
    };
    Range { start, end }
}

fn random_kind(rng: &mut StdRng) -> LockKind {
    match rng.random_range(0..5) {
        0 | 1 => LockKind::LockRead,
        2 | 3 => LockKind::LockWrite,
        _ => LockKind::LockUnlock,
    }
}

fn run(seed: u64) {
    let cluster = Cluster::builder().servers(2).start();
    let probe_rt = tokio::runtime::Runtime::new().unwrap();
    let probe = cluster.client();
    // Two files, one on each server: files live with their directory's
    // entries, so one in each of directories made until two servers hold
    // one.
    let mut files: Vec<u64> = Vec::new();
    for i in 0..64 {
        let dir = probe_rt
            .block_on(probe.mkdir(ROOT, &format!("d{i}"), 0o755))
            .expect("mkdir")
            .handle;
        let h = probe_rt
            .block_on(probe.create(dir, "f", 0o644))
            .expect("create")
            .handle;
        if files.iter().all(|f| server_of(*f) != server_of(h)) {
            files.push(h);
        }
        if files.len() == 2 {
            break;
        }
    }
    assert_eq!(files.len(), 2, "no file landed on the second server");
    let mut hosts: Vec<Host> = (0..CLIENTS).map(|_| Host::new(&cluster)).collect();
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);

    for step in 0..STEPS {
        let c = rng.random_range(0..CLIENTS);
        let owner = rng.random_range(1..=OWNERS);
        let file = rng.random_range(0..files.len());
        let h = files[file];
        let host = &hosts[c];
        let at = |what: &str| {
            format!("seed {seed} step {step}: client {c} owner {owner} file {file}: {what}")
        };
        match rng.random_range(0..10) {
            // fcntl F_SETLK (a random range), or flock (the whole file)
            op @ 0..=6 => {
                let flock = op >= 5;
                let kind = random_kind(&mut rng);
                let range = if flock {
                    Range {
                        start: 0,
                        end: u64::MAX,
                    }
                } else {
                    random_range(&mut rng)
                };
                let key = Key {
                    client: c,
                    owner,
                    file,
                    flock,
                };
                let ask = key.ask(kind, range);
                let expect_busy = kind != LockKind::LockUnlock && model.in_way(key, kind, range);
                let got = host.rt.block_on(host.client.lock(h, ask, false));
                let what = if flock {
                    format!("flock {kind:?}")
                } else {
                    format!("F_SETLK {kind:?} {range:?}")
                };
                check(&got, expect_busy, &at(&what));
                if got.is_ok() {
                    model.set(key, kind, range);
                }
            }
            // F_GETLK
            7 => {
                let kind = if rng.random_bool(0.5) {
                    LockKind::LockRead
                } else {
                    LockKind::LockWrite
                };
                let range = random_range(&mut rng);
                let key = Key {
                    client: c,
                    owner,
                    file,
                    flock: false,
                };
                let ask = key.ask(kind, range);
                let found = host
                    .rt
                    .block_on(host.client.test_lock(h, ask))
                    .expect("F_GETLK");
                assert_eq!(
                    found.is_some(),
                    model.in_way(key, kind, range),
                    "{}",
                    at(&format!("F_GETLK {kind:?} {range:?}: {found:?}"))
                );
            }
            // A close: the owner's fcntl locks on the file go.
            8 => {
                host.rt
                    .block_on(host.client.unlock_owner(h, owner, false))
                    .expect("close");
                model.held.remove(&Key {
                    client: c,
                    owner,
                    file,
                    flock: false,
                });
            }
            // A death: every lock of the client goes, at each server.
            _ => {
                let dead = std::mem::replace(&mut hosts[c], Host::new(&cluster));
                drop(dead.client);
                drop(dead.rt);
                model.held.retain(|k, _| k.client != c);
                for server in 0..2 {
                    let want = model.holders_on(&files, server);
                    let deadline = Instant::now() + Duration::from_secs(30);
                    loop {
                        let have = probe_rt
                            .block_on(probe.server_stats(server))
                            .expect("stats")
                            .lock_holders;
                        if have == want {
                            break;
                        }
                        assert!(Instant::now() < deadline, "{}", at(&format!("server {server} holds {have} owners' locks after the death, the model {want}")));
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
    }
    // Finally the servers hold exactly what the model does.
    for server in 0..2 {
        let have = probe_rt
            .block_on(probe.server_stats(server))
            .expect("stats")
            .lock_holders;
        assert_eq!(
            have,
            model.holders_on(&files, server),
            "seed {seed}: server {server}'s holders at the end"
        );
    }
}

/// A request's outcome against the model's: granted, or EAGAIN.
fn check(got: &Result<(), shoal_client::ShoalError>, expect_busy: bool, what: &str) {
    match got {
        Ok(()) => assert!(
            !expect_busy,
            "{what}: granted, but the model has a lock in the way"
        ),
        Err(e) if e.errno == Errno::EAGAIN => assert!(
            expect_busy,
            "{what}: EAGAIN, but the model has nothing in the way"
        ),
        Err(e) => panic!("{what}: {e}"),
    }
}

#[test]
fn random_locks_closes_and_deaths_from_three_clients_match_the_model() {
    for seed in [1, 2, 3] {
        run(seed);
    }
}
