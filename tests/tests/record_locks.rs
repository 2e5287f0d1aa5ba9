//! POSIX record locks for the whole cluster (`server/src/locks.rs`,
//! `client/src/locks/mod.rs`, `fuse/src/locks.rs`): fcntl and lockf locks taken
//! through two mounts of one cluster (two mount processes: two clients)
//! exclude each other as locks on one machine do; F_GETLK sees the other
//! mount's locks; a wait that would close a cycle fails with EDEADLK; a
//! lock outlives a restart (killed or clean) of the server holding it,
//! also an idle holder's; a dead client's locks go; waiters hold no
//! request slots, and a grant that lets an earlier waiter through grants it;
//! grants at one write epoch leave the kernel's pages of the file alone.
//!
//! The processes that lock are python3 (`shoal_tests::lock_agent`, or
//! `COUNTER`): POSIX locks belong to a process, so each lock owner must be
//! one. Every wait is bounded: an agent's by the agent, a counter by
//! `timeout`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shoal_client::{Client, Errno, LockAsk, LockKind};
use shoal_proto::handle::{server_of, ROOT};
use shoal_tests::lock_agent::Agent;
use shoal_tests::{Cluster, SharedMount};

const PYTHON: &str = "/usr/bin/python3";

/// Increments the 8-byte little-endian counter at the start of file
/// argv[1] argv[2] times, each under lockf(F_LOCK) of those 8 bytes
/// (libc's own lockf, through ctypes), and prints `done`.
const COUNTER: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
F_ULOCK, F_LOCK = 0, 1
fd = os.open(sys.argv[1], os.O_RDWR)
for _ in range(int(sys.argv[2])):
    os.lseek(fd, 0, os.SEEK_SET)
    if libc.lockf(fd, F_LOCK, ctypes.c_long(8)) != 0:
        raise OSError(ctypes.get_errno(), "lockf(F_LOCK)")
    n = int.from_bytes(os.pread(fd, 8, 0), "little")
    os.pwrite(fd, (n + 1).to_bytes(8, "little"), 0)
    if libc.lockf(fd, F_ULOCK, ctypes.c_long(8)) != 0:
        raise OSError(ctypes.get_errno(), "lockf(F_ULOCK)")
os.close(fd)
print("done", flush=True)
"#;

/// A cluster of two servers and two mounts of it (two mount processes:
/// two clients).
fn two_mounts() -> (Cluster, SharedMount) {
    let mut cluster = Cluster::builder().servers(2).start();
    cluster.mount();
    let second = SharedMount::new(&cluster);
    (cluster, second)
}

/// File `name` at the root of mount `m`, holding `bytes`; its handle.
fn file(m: &Path, name: &str, bytes: &[u8]) -> u64 {
    std::fs::write(m.join(name), bytes).unwrap();
    std::fs::metadata(m.join(name)).unwrap().ino()
}

/// The lock requests server `s` has received.
fn lock_requests(rt: &tokio::runtime::Runtime, probe: &Client, s: u32) -> u64 {
    let stats = rt.block_on(probe.server_stats(s)).expect("stats");
    stats
        .ops
        .iter()
        .filter(|o| o.op == "lock")
        .map(|o| o.requests)
        .sum()
}

/// Waits (bounded) until server `s` has received `n` lock requests: one
/// that waits is counted once the lock table holds it.
fn wait_for_lock_requests(rt: &tokio::runtime::Runtime, probe: &Client, s: u32, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = lock_requests(rt, probe, s);
        if seen >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "server {s} saw {seen} lock requests, not {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Several processes on each of two mounts increment one counter under
/// lockf: none of their increments is lost, and both mounts read the sum.
#[test]
fn lockf_counter_on_two_mounts_loses_no_increment() {
    const PER_MOUNT: usize = 3;
    const EACH: u64 = 200;
    let (mut cluster, second) = two_mounts();
    let a = cluster.mount();
    let b = second.path();
    file(&a, "counter", &[0u8; 8]);
    assert_eq!(std::fs::read(b.join("counter")).unwrap(), [0u8; 8]);

    let counters: Vec<Child> = (0..2 * PER_MOUNT)
        .map(|i| {
            let m = if i % 2 == 0 { &a } else { &b };
            Command::new("timeout")
                .args(["300", PYTHON, "-c", COUNTER])
                .arg(m.join("counter"))
                .arg(EACH.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn python3")
        })
        .collect();
    for (i, c) in counters.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stdout == b"done\n",
            "counter {i} ended with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let total = 2 * PER_MOUNT as u64 * EACH;
    let read = |m: &Path| {
        let bytes = std::fs::read(m.join("counter")).unwrap();
        u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
    };
    assert_eq!(read(&a), total, "the counter read through the first mount");
    assert_eq!(read(&b), total, "the counter read through the second mount");
}

/// A write lock on bytes 10..19 held through one mount, seen from the
/// other: F_GETLK names it and its process, F_SETLK of an overlapping
/// range fails with EAGAIN, of a disjoint one succeeds; F_SETLKW waits and
/// is granted once the holder is killed (its files' close lets it go).
#[test]
fn a_lock_through_one_mount_is_seen_and_waited_for_through_the_other() {
    let (mut cluster, second) = two_mounts();
    let a = cluster.mount();
    let b = second.path();
    let h = file(&a, "f", &[0u8; 64]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let probe = cluster.client();

    let mut holder = Agent::open("holder (mount 1)", &a.join("f"));
    assert_eq!(holder.ask("lock w 10 10 0"), "ok");

    let mut other = Agent::open("other (mount 2)", &b.join("f"));
    assert_eq!(
        other.ask("getlk w 0 100"),
        format!("lk w 10 10 {}", holder.pid),
        "F_GETLK of a write lock over 0..99"
    );
    assert_eq!(
        other.ask("getlk r 19 1"),
        format!("lk w 10 10 {}", holder.pid),
        "F_GETLK of a read lock over its last byte"
    );
    assert_eq!(
        other.ask("getlk w 20 10"),
        "lk u 20 10 0",
        "F_GETLK of the bytes just past it"
    );
    assert_eq!(other.ask("lock w 15 10 0"), "err EAGAIN", "overlapping");
    assert_eq!(other.ask("lock r 0 11 0"), "err EAGAIN", "a read lock");
    assert_eq!(other.ask("lock w 0 10 0"), "ok", "the bytes just before");
    assert_eq!(other.ask("lock w 20 10 0"), "ok", "the bytes just after");
    // The holder sees the other's locks too, not its own.
    assert_eq!(
        holder.ask("getlk w 0 0"),
        format!("lk w 0 10 {}", other.pid),
        "F_GETLK from the holder"
    );

    let server = server_of(h);
    let before = lock_requests(&rt, &probe, server);
    other.send("lock w 10 10 1");
    wait_for_lock_requests(&rt, &probe, server, before + 1);
    assert_eq!(
        other.reply_within(Duration::from_millis(300)),
        None,
        "F_SETLKW returned while the holder holds the range"
    );
    holder.kill();
    assert_eq!(other.reply(), "ok", "F_SETLKW once the holder died");

    // The other now holds 0..29, one merged write lock.
    let mut third = Agent::open("third (mount 1)", &a.join("f"));
    assert_eq!(
        third.ask("getlk r 12 1"),
        format!("lk w 0 30 {}", other.pid)
    );
    assert_eq!(third.ask("lock w 10 10 0"), "err EAGAIN");
    assert_eq!(other.ask("close"), "ok");
    assert_eq!(third.ask("lock w 10 10 0"), "ok", "after the other's close");
}

/// P1 (mount 1) holds A = 0..9 and waits for B = 10..19; P2 (mount 2)
/// holds B and asks for A with F_SETLKW: EDEADLK. Once P2 closes the
/// file, P1 gets B.
#[test]
fn a_wait_that_closes_a_cycle_across_mounts_fails_with_edeadlk() {
    let (mut cluster, second) = two_mounts();
    let a = cluster.mount();
    let b = second.path();
    let h = file(&a, "f", &[0u8; 64]);
    let server = server_of(h);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let probe = cluster.client();

    let mut p1 = Agent::open("P1 (mount 1)", &a.join("f"));
    let mut p2 = Agent::open("P2 (mount 2)", &b.join("f"));
    assert_eq!(p1.ask("lock w 0 10 0"), "ok", "P1 takes A");
    assert_eq!(p2.ask("lock w 10 10 0"), "ok", "P2 takes B");

    let before = lock_requests(&rt, &probe, server);
    p1.send("lock w 10 10 1");
    // P1's wait is in the server's table before P2 asks.
    wait_for_lock_requests(&rt, &probe, server, before + 1);
    assert_eq!(
        p1.reply_within(Duration::from_millis(300)),
        None,
        "P1 waits"
    );

    assert_eq!(p2.ask("lock w 0 10 1"), "err EDEADLK", "P2 asks for A");
    // P2 still holds B, and P1 still waits for it.
    assert_eq!(
        p1.reply_within(Duration::from_millis(300)),
        None,
        "P1 waits"
    );
    assert_eq!(p2.ask("close"), "ok");
    assert_eq!(p1.reply(), "ok", "P1 gets B once P2 closed");
    let mut p3 = Agent::open("P3 (mount 2)", &b.join("f"));
    assert_eq!(
        p3.ask("getlk r 0 0"),
        format!("lk w 0 20 {}", p1.pid),
        "P1 holds A and B"
    );
}

/// A lock of kind `kind` on 0..99 for owner 1 of a native client, made
/// by this test's process (a pid the kernel can name to F_GETLK).
fn native_lock(kind: LockKind) -> LockAsk {
    LockAsk {
        owner: 1,
        kind,
        start: 0,
        end: 99,
        pid: std::process::id(),
        flock: false,
    }
}

/// A mount on a two-server cluster, file `f` on it, and a process holding
/// a write lock on its bytes 0..99; then the server holding the file's
/// locks is killed (SIGKILL) and started again, holding none.
fn lock_then_restart() -> (Cluster, std::path::PathBuf, u64, Agent) {
    // The file made just before the kill must be there after it.
    let mut cluster = Cluster::builder().servers(2).durable().start();
    let m = cluster.mount();
    let h = file(&m, "f", &[0u8; 64]);
    let server = server_of(h);
    let mut holder = Agent::open("holder", &m.join("f"));
    assert_eq!(holder.ask("lock w 0 100 0"), "ok");
    cluster.kill(server);
    cluster.start_server(server);
    (cluster, m, h, holder)
}

/// Once the holder's mount reaches the restarted server again (here: the
/// holder's own F_GETLK, which goes to the file's server), its client takes
/// the lock again on the new connection: another client finds it in the
/// way; once the holder unlocks, that client gets it.
#[test]
fn a_lock_is_taken_again_after_a_restart_of_its_files_server() {
    let (cluster, m, h, mut holder) = lock_then_restart();
    // Its own lock is never in its way.
    assert_eq!(holder.ask("getlk w 0 100"), "lk u 0 100 0");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let other = cluster.client();
    let conflict = rt
        .block_on(other.test_lock(h, native_lock(LockKind::LockRead)))
        .unwrap();
    assert_eq!(
        conflict.map(|c| (c.kind, c.start, c.end)),
        Some((LockKind::LockWrite, 0, 99)),
        "the holder's lock after the restart: {conflict:?}"
    );
    let e = rt
        .block_on(other.lock(h, native_lock(LockKind::LockRead), false))
        .expect_err("a conflicting lock after the restart");
    assert_eq!(e.errno, Errno::EAGAIN, "{e}");

    assert_eq!(holder.ask("lock u 0 0 0"), "ok", "the holder unlocks");
    rt.block_on(other.lock(h, native_lock(LockKind::LockWrite), false))
        .expect("the lock once the holder let it go");
    let mut second = Agent::open("second", &m.join("f"));
    assert_eq!(
        second.ask("getlk r 50 1"),
        format!("lk w 0 100 {}", std::process::id()),
        "the native client's lock, seen through the mount"
    );
    assert_eq!(holder.ask("lock w 0 100 0"), "err EAGAIN");
}

/// The same, with the holder's mount idle after the restart: the restarted
/// server must not grant another client the range the holder still holds.
/// The holder's client reconnects as soon as its connection ends (it
/// watches it while it holds locks) and takes the lock back within the
/// server's grace period, while the other client's request is answered
/// EBUSY and asked again; then the other client finds the lock in its way.
#[test]
fn an_idle_holders_lock_is_not_granted_to_another_client_after_a_restart() {
    let (cluster, _m, h, mut holder) = lock_then_restart();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let other = cluster.client();
    let taken = rt.block_on(other.lock(h, native_lock(LockKind::LockWrite), false));
    assert!(
        taken.is_err(),
        "another client got bytes 0..99 while the holder holds them"
    );
    assert_eq!(holder.ask("getlk w 0 100"), "lk u 0 100 0");
    assert_eq!(holder.ask("lock u 0 0 0"), "ok", "the holder unlocks");
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = rt.block_on(other.lock(h, native_lock(LockKind::LockWrite), false)) {
        assert!(Instant::now() < deadline, "the lock after the unlock: {e}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A native client that dies (its runtime and connections go) loses its
/// locks: another client gets the range, once the server has seen the
/// connection end.
#[test]
fn a_dead_native_clients_locks_go() {
    let cluster = Cluster::builder().servers(2).start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = cluster.client();
    let h = rt
        .block_on(b.create(ROOT, "f", 0o644))
        .expect("create")
        .handle;

    let dying_rt = tokio::runtime::Runtime::new().unwrap();
    let dying = cluster.client();
    let dying_ask = LockAsk {
        pid: 4242,
        ..native_lock(LockKind::LockWrite)
    };
    dying_rt
        .block_on(dying.lock(h, dying_ask, false))
        .expect("the first lock");
    let ask = LockAsk {
        pid: 7,
        ..native_lock(LockKind::LockWrite)
    };
    let held = rt.block_on(b.test_lock(h, ask)).unwrap();
    assert_eq!(
        held.map(|c| (c.kind, c.start, c.end, c.pid)),
        Some((LockKind::LockWrite, 0, 99, 4242)),
        "the live client's lock"
    );
    let e = rt.block_on(b.lock(h, ask, false)).unwrap_err();
    assert_eq!(e.errno, Errno::EAGAIN, "{e}");

    // Its runtime ends its connections' tasks, which close its sockets.
    drop(dying);
    drop(dying_rt);

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match rt.block_on(b.lock(h, ask, false)) {
            Ok(()) => break,
            Err(e) if e.errno == Errno::EAGAIN && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the dead client's lock did not go: {e}"),
        }
    }
    let third = cluster.client();
    let held = rt.block_on(third.test_lock(h, native_lock(LockKind::LockRead)));
    assert_eq!(
        held.unwrap().map(|c| (c.kind, c.start, c.end, c.pid)),
        Some((LockKind::LockWrite, 0, 99, 7)),
        "b's lock, seen by a third client"
    );
}

/// A mount process killed while its process holds a lock: the lock goes
/// with its connections, and another mount's process gets the range.
#[test]
fn a_killed_mounts_locks_go() {
    let (mut cluster, second) = two_mounts();
    let a = cluster.mount();
    let b = second.path();
    file(&a, "f", &[0u8; 64]);

    let mut holder = Agent::open("holder (mount 2)", &b.join("f"));
    assert_eq!(holder.ask("lock w 0 0 0"), "ok");
    let mut other = Agent::open("other (mount 1)", &a.join("f"));
    assert_eq!(other.ask("lock w 5 1 0"), "err EAGAIN");

    // SAFETY: the PID of the mount process the kit started for `second`,
    // not yet reaped (its Drop reaps it).
    let killed = unsafe { libc::kill(second.pid() as i32, libc::SIGKILL) };
    assert_eq!(killed, 0, "kill the second mount");

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match other.ask("lock w 5 1 0").as_str() {
            "ok" => break,
            "err EAGAIN" if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => panic!("the killed mount's lock did not go: {r}"),
        }
    }
    // The holder's process may be left stuck on the dead mount; it is
    // killed on drop.
    drop(holder);
}

/// A native client's lock request of `kind` on bytes `start..=end` for
/// lock owner `owner`.
fn ask(owner: u64, kind: LockKind, start: u64, end: u64) -> LockAsk {
    LockAsk {
        owner,
        kind,
        start,
        end,
        pid: owner as u32,
        flock: false,
    }
}

type Waiting = tokio::task::JoinHandle<Result<(), shoal_client::ShoalError>>;

/// `c`'s lock `a` on `h`, waiting (F_SETLKW), as a task.
fn wait_for(rt: &tokio::runtime::Runtime, c: &Client, h: u64, a: LockAsk) -> Waiting {
    let c = c.clone();
    rt.spawn(async move { c.lock(h, a, true).await })
}

/// The outcome of `w` within `d`, if it ended.
fn ended(
    rt: &tokio::runtime::Runtime,
    w: &mut Waiting,
    d: Duration,
) -> Option<Result<(), shoal_client::ShoalError>> {
    rt.block_on(async { tokio::time::timeout(d, w).await.ok().map(|r| r.unwrap()) })
}

/// A file made at the root by `c`, on server 0 of a one-server cluster.
fn one_server() -> (Cluster, tokio::runtime::Runtime) {
    let cluster = Cluster::builder().servers(1).start();
    (cluster, tokio::runtime::Runtime::new().unwrap())
}

/// A grant can let an earlier waiter through: A holds W[0-9], C W[10-19];
/// B waits for R[0-9], then A for R[0-19]. C's unlock grants A's R[0-19],
/// which turns A's write lock on 0-9 into a read lock: B, behind A in the
/// queue, is granted too (a single pass over the queue left it waiting).
#[test]
fn a_waiter_let_through_by_a_later_grant_is_granted() {
    let (cluster, rt) = one_server();
    let (a, b, c) = (cluster.client(), cluster.client(), cluster.client());
    let h = rt.block_on(a.create(ROOT, "f", 0o644)).unwrap().handle;
    rt.block_on(a.lock(h, ask(1, LockKind::LockWrite, 0, 9), false))
        .unwrap();
    rt.block_on(c.lock(h, ask(3, LockKind::LockWrite, 10, 19), false))
        .unwrap();
    let mut wb = wait_for(&rt, &b, h, ask(2, LockKind::LockRead, 0, 9));
    wait_for_lock_requests(&rt, &c, 0, 3);
    let mut wa = wait_for(&rt, &a, h, ask(1, LockKind::LockRead, 0, 19));
    wait_for_lock_requests(&rt, &c, 0, 4);
    rt.block_on(c.lock(h, ask(3, LockKind::LockUnlock, 10, 19), false))
        .unwrap();
    let long = Duration::from_secs(30);
    ended(&rt, &mut wa, long)
        .expect("A's read lock once C let go")
        .unwrap();
    ended(&rt, &mut wb, long)
        .expect("B's read lock: nothing is in its way")
        .unwrap();
}

/// A grant's write epoch, by which the mount keeps its kernel caches
/// across grants (`fuse/src/lock_epochs.rs`), stays while no write lock is
/// let go, whoever takes locks, and changes when one is: narrowed to a
/// read lock, or unlocked. (A reader holds on throughout, so that the
/// file's lock table is never made anew.)
#[test]
fn a_grants_write_epoch_changes_exactly_when_a_write_lock_goes() {
    let (cluster, rt) = one_server();
    let (a, b) = (cluster.client(), cluster.client());
    let h = rt.block_on(a.create(ROOT, "f", 0o644)).unwrap().handle;
    let epoch = |c: &Client, asked: LockAsk| {
        rt.block_on(c.lock_until(h, asked, false, std::future::pending()))
            .unwrap()
            .write_epoch
    };
    let first = epoch(&a, ask(1, LockKind::LockRead, 0, 9));
    assert_ne!(first, 0, "a grant says its epoch");
    assert_eq!(epoch(&b, ask(2, LockKind::LockRead, 0, 9)), first);
    assert_eq!(
        epoch(&b, ask(3, LockKind::LockWrite, 100, 199)),
        first,
        "a write lock taken lets none go"
    );
    let narrowed = epoch(&b, ask(3, LockKind::LockRead, 100, 199));
    assert_ne!(narrowed, first, "a write lock narrowed to a read lock");
    assert_eq!(epoch(&a, ask(4, LockKind::LockRead, 100, 199)), narrowed);
    assert_eq!(
        epoch(&b, ask(5, LockKind::LockWrite, 500, 599)),
        narrowed,
        "taken again"
    );
    rt.block_on(b.lock(h, ask(5, LockKind::LockUnlock, 500, 599), false))
        .unwrap();
    let unlocked = epoch(&a, ask(6, LockKind::LockRead, 500, 599));
    assert!(
        unlocked != narrowed && unlocked != first,
        "a write lock unlocked"
    );
}

/// Read requests the mount at `mnt` has answered since it started.
fn reads_answered(mnt: &Path) -> u64 {
    let json: serde_json::Value =
        serde_json::from_str(&shoal_tests::mount_stats(mnt, &["--json"])).unwrap();
    json["ops"]["read"]["count"].as_u64().unwrap_or(0)
}

/// Grants at one write epoch drop the kernel's caches of a file once
/// (`fuse/src/lock_epochs.rs`): a second reader's grant on the same mount
/// leaves the first reader's pages alone, so its re-read asks the mount
/// nothing (each drop would also discard a GETATTR another reader waits
/// for). A write lock let go through the other mount makes the next grant
/// drop them, and the reader reads the new bytes. No leases, which would
/// keep the pages on their own.
#[test]
fn grants_at_one_write_epoch_keep_the_kernels_pages() {
    let mut cluster = Cluster::builder().servers(2).set("lease_ms=0").start();
    let a = cluster.mount();
    let second = SharedMount::new(&cluster);
    let b = second.path();
    std::fs::write(a.join("f"), [1u8; 65536]).unwrap();
    let ones = format!("data {}", "01".repeat(65536));
    // Both open first: an open of a file not leased drops its pages
    // (close-to-open).
    let mut reader = Agent::open("reader (mount 1)", &a.join("f"));
    let mut other = Agent::open("second reader (mount 1)", &a.join("f"));
    assert_eq!(reader.ask("lock r 0 0 0"), "ok");
    assert_eq!(reader.ask("read 65536"), ones);
    let reads = reads_answered(&a);
    assert_eq!(other.ask("lock r 0 0 0"), "ok");
    assert_eq!(reader.ask("read 65536"), ones);
    assert_eq!(
        reads_answered(&a),
        reads,
        "a grant at the same epoch dropped the reader's pages"
    );
    assert_eq!(reader.ask("lock u 0 0 0"), "ok");
    assert_eq!(other.ask("lock u 0 0 0"), "ok");

    let mut writer = Agent::open("writer (mount 2)", &b.join("f"));
    assert_eq!(writer.ask("lock w 0 0 0"), "ok");
    std::fs::write(b.join("f"), [2u8; 65536]).unwrap();
    assert_eq!(writer.ask("lock u 0 0 0"), "ok");
    assert_eq!(reader.ask("lock r 0 0 0"), "ok");
    assert_eq!(
        reader.ask("read 65536"),
        format!("data {}", "02".repeat(65536)),
        "after a write lock was let go"
    );
    assert!(reads_answered(&a) > reads, "the grant dropped the pages");
}

/// Waiting lock requests hold none of their client's request slots: with
/// two slots and two owners of one client waiting, the holder (a third
/// owner of the same client) still gets its unlock through, and the
/// waiters their locks in turn.
#[test]
fn waiters_hold_no_request_slots_of_their_client() {
    let cluster = Cluster::builder().servers(1).set("max_inflight=2").start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = cluster.client();
    let h = rt.block_on(a.create(ROOT, "f", 0o644)).unwrap().handle;
    rt.block_on(a.lock(h, ask(1, LockKind::LockWrite, 0, 9), false))
        .unwrap();
    let mut w2 = wait_for(&rt, &a, h, ask(2, LockKind::LockWrite, 0, 9));
    let mut w3 = wait_for(&rt, &a, h, ask(3, LockKind::LockWrite, 0, 9));
    wait_for_lock_requests(&rt, &cluster.client(), 0, 3);
    let long = Duration::from_secs(30);
    let unlock = rt.block_on(async {
        tokio::time::timeout(long, a.lock(h, ask(1, LockKind::LockUnlock, 0, 9), false)).await
    });
    unlock.expect("the holder's unlock went out").unwrap();
    // One waiter has it; its unlock lets the other in.
    let deadline = Instant::now() + long;
    let short = Duration::from_millis(50);
    let (first_owner, mut second) = loop {
        if let Some(r) = ended(&rt, &mut w2, short) {
            r.unwrap();
            break (2, w3);
        }
        if let Some(r) = ended(&rt, &mut w3, short) {
            r.unwrap();
            break (3, w2);
        }
        assert!(Instant::now() < deadline, "no waiter granted");
    };
    rt.block_on(a.lock(h, ask(first_owner, LockKind::LockUnlock, 0, 9), false))
        .unwrap();
    ended(&rt, &mut second, long)
        .expect("the other waiter after the first let go")
        .unwrap();
}

/// A cycle through any of the owners in the way is a deadlock: A and C
/// hold R[0], B holds W[10]; A waits for W[10] (behind B); B's wait for
/// W[0] (behind A and C) closes a cycle through A, whichever of A and C
/// the table looks at first: EDEADLK, every time.
#[test]
fn a_cycle_through_any_owner_in_the_way_is_a_deadlock() {
    let (cluster, rt) = one_server();
    let probe = cluster.client();
    for round in 0..8u64 {
        let (a, b, c) = (cluster.client(), cluster.client(), cluster.client());
        let h = rt
            .block_on(a.create(ROOT, &format!("f{round}"), 0o644))
            .unwrap()
            .handle;
        let before = lock_requests(&rt, &probe, 0);
        rt.block_on(a.lock(h, ask(1, LockKind::LockRead, 0, 0), false))
            .unwrap();
        rt.block_on(c.lock(h, ask(3, LockKind::LockRead, 0, 0), false))
            .unwrap();
        rt.block_on(b.lock(h, ask(2, LockKind::LockWrite, 10, 10), false))
            .unwrap();
        let mut wa = wait_for(&rt, &a, h, ask(1, LockKind::LockWrite, 10, 10));
        wait_for_lock_requests(&rt, &probe, 0, before + 4);
        let e = rt
            .block_on(b.lock(h, ask(2, LockKind::LockWrite, 0, 0), true))
            .expect_err("B's wait closes a cycle through A");
        assert_eq!(e.errno, Errno::EDEADLK, "round {round}: {e}");
        // B lets go: A gets W[10] (C's read lock on 0 is no matter).
        rt.block_on(b.lock(h, ask(2, LockKind::LockUnlock, 0, u64::MAX), false))
            .unwrap();
        ended(&rt, &mut wa, Duration::from_secs(30))
            .expect("A's lock once B let go")
            .unwrap();
    }
}

/// A clean restart (SIGTERM) of a server while a client holds a lock on
/// one of its files: the holder's client takes it back, and the restarted
/// server lets it first (its grace period: the stopped server left its
/// marker, since a lock was held), so another client finds it in its way.
#[test]
fn a_clean_restart_keeps_an_idle_holders_lock() {
    let (mut cluster, rt) = one_server();
    let a = cluster.client();
    let h = rt.block_on(a.create(ROOT, "f", 0o644)).unwrap().handle;
    rt.block_on(a.lock(h, ask(1, LockKind::LockWrite, 0, 99), false))
        .unwrap();
    let b = cluster.client();
    rt.block_on(b.getattr(ROOT)).unwrap();
    cluster.terminate(0);
    cluster.start_server(0);
    let e = rt
        .block_on(b.lock(h, ask(2, LockKind::LockWrite, 0, 99), false))
        .expect_err("another client got the idle holder's range after a clean restart");
    assert_eq!(e.errno, Errno::EAGAIN, "{e}");
    assert!(a.holds_locks(h));
    rt.block_on(a.lock(h, ask(1, LockKind::LockUnlock, 0, 99), false))
        .unwrap();
    rt.block_on(b.lock(h, ask(2, LockKind::LockWrite, 0, 99), false))
        .expect("the range once the holder let it go");
}

/// flock(2) through two mounts: an exclusive flock through one keeps out
/// any flock through the other (LOCK_NB: EAGAIN), but no fcntl lock, as
/// on one machine's own file system; it goes with LOCK_UN and with its
/// open file's close, and a blocking flock waits for it.
#[test]
fn flock_holds_across_mounts_and_stays_apart_from_fcntl_locks() {
    let (mut cluster, second) = two_mounts();
    let a = cluster.mount();
    let b = second.path();
    let h = file(&a, "f", &[0u8; 64]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let probe = cluster.client();

    let mut holder = Agent::open("holder (mount 1)", &a.join("f"));
    let mut other = Agent::open("other (mount 2)", &b.join("f"));
    assert_eq!(holder.ask("flock w 0"), "ok");
    assert_eq!(
        other.ask("flock w 0"),
        "err EAGAIN",
        "LOCK_EX through the other mount"
    );
    assert_eq!(
        other.ask("flock r 0"),
        "err EAGAIN",
        "LOCK_SH through the other mount"
    );
    assert_eq!(
        other.ask("lock w 0 0 0"),
        "ok",
        "an fcntl lock of the whole file"
    );
    assert_eq!(other.ask("lock u 0 0 0"), "ok");
    assert_eq!(
        holder.ask("flock r 0"),
        "ok",
        "the holder converts to LOCK_SH"
    );
    assert_eq!(other.ask("flock r 0"), "ok", "a second LOCK_SH");
    assert_eq!(other.ask("flock u 0"), "ok");

    // A blocking flock waits for the holder's close.
    let server = server_of(h);
    let before = lock_requests(&rt, &probe, server);
    other.send("flock w 1");
    wait_for_lock_requests(&rt, &probe, server, before + 1);
    assert_eq!(
        other.reply_within(Duration::from_millis(300)),
        None,
        "LOCK_EX returned while the holder holds LOCK_SH"
    );
    assert_eq!(holder.ask("close"), "ok");
    assert_eq!(other.reply(), "ok", "LOCK_EX once the holder's file closed");
    let mut third = Agent::open("third (mount 1)", &a.join("f"));
    assert_eq!(third.ask("flock r 0"), "err EAGAIN");
    assert_eq!(other.ask("flock u 0"), "ok");
    assert_eq!(third.ask("flock r 0"), "ok", "after LOCK_UN");
}

/// Lock waits server `s` has withdrawn (their callers were interrupted),
/// and those waiting now.
fn waits(rt: &tokio::runtime::Runtime, probe: &Client, s: u32) -> (u64, u64) {
    let stats = rt.block_on(probe.server_stats(s)).expect("stats");
    (stats.lock_waits_withdrawn, stats.lock_waits)
}

/// For F_SETLKW and then a blocking flock: a process waits through one
/// mount for a lock held through the other, and `end` ends its wait (a
/// signal, a kill) once the server holds it. The server must then have
/// withdrawn the wait, and once the holder lets go a third process takes
/// the lock at once, not the ended waiter; `after` checks the waiter last
/// (`how` it ended names it in messages).
fn ending_a_lock_wait(
    how: &str,
    end: impl Fn(&str, &mut Agent),
    after: impl Fn(&str, &str, &mut Agent),
) {
    let (mut cluster, second) = two_mounts();
    let a = cluster.mount();
    let b = second.path();
    let h = file(&a, "f", &[0u8; 64]);
    let server = server_of(h);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let probe = cluster.client();

    for (what, take, wait, release) in [
        ("F_SETLKW", "lock w 0 0 0", "lock w 0 0 1", "lock u 0 0 0"),
        ("flock", "flock w 0", "flock w 1", "flock u 0"),
    ] {
        let mut holder = Agent::open("holder (mount 1)", &a.join("f"));
        let mut waiter = Agent::open("waiter (mount 2)", &b.join("f"));
        assert_eq!(holder.ask(take), "ok", "{what}");
        let before = lock_requests(&rt, &probe, server);
        let (withdrawn, _) = waits(&rt, &probe, server);
        waiter.send(wait);
        wait_for_lock_requests(&rt, &probe, server, before + 1);
        end(what, &mut waiter);
        assert_eq!(
            waits(&rt, &probe, server),
            (withdrawn + 1, 0),
            "{what}: the mount withdrew the wait at the server"
        );
        assert_eq!(holder.ask(release), "ok", "{what}");
        let mut third = Agent::open("third (mount 1)", &a.join("f"));
        assert_eq!(
            third.ask(take),
            "ok",
            "{what}: the {how} waiter was granted nothing"
        );
        after(what, take, &mut waiter);
    }
}

/// A lock waiter gets a signal: its call returns EINTR, its wait is
/// withdrawn, and it holds nothing.
#[test]
fn a_signal_ends_a_lock_wait_with_eintr_and_withdraws_it() {
    ending_a_lock_wait(
        "interrupted",
        |what, waiter| {
            waiter.signal(libc::SIGUSR1);
            assert_eq!(waiter.reply(), "err EINTR", "{what} interrupted");
        },
        |what, take, waiter| {
            assert_eq!(
                waiter.ask(take),
                "err EAGAIN",
                "{what}: the waiter holds nothing"
            );
        },
    );
}

/// A lock waiter is SIGKILLed: it is gone at once, while the holder still
/// holds the lock (before the mount answered interrupts, the kernel kept
/// it until the lock was granted), and its wait is withdrawn.
#[test]
fn a_killed_lock_waiter_is_gone_at_once() {
    ending_a_lock_wait(
        "killed",
        |what, waiter| {
            assert!(
                waiter.kill_and_reap(Duration::from_secs(30)),
                "{what}: the SIGKILLed waiter is still there, in its wait"
            );
        },
        |_, _, _| {},
    );
}
