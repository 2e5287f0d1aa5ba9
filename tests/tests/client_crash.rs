//! Client crashes: what each `sync` mode promises of a client's
//! acknowledged changes when the client dies (docs/reliability.md), proven
//! by killing it. `churn` (`src/bin/churn.rs`) creates, writes small and
//! large files, unlinks, renames, hard-links and fsyncs in a directory of
//! its own, journaling each call before it makes it and once it returned;
//! at a random moment it is killed with SIGKILL, or the mount it works
//! through is. Then a fresh native client reads everything there, and each
//! name must be exactly what the acknowledged calls made of it, except:
//! - the names of the one call in flight at the kill (done or not; a data
//!   call's bytes may be partly written);
//! - where the client answers creates and unlinks itself (directory
//!   delegations, not under `sync = "full"`): creates of empty files and
//!   unlinks acknowledged after the client's last call that had to reach a
//!   server (which sends the unsent changes first) may be lost, never more than
//!   `MAX_UNSETTLED` in one crash.
//!
//! Nothing may appear that no call made. At the end fsck finds no entry
//! naming a missing object and `--repair` leaves zero problems.
//!
//! Three victims per mode: the mount process (churn works through it), a
//! process under the preload library, a native client. `SHOAL_CLIENT_CRASH_
//! KILLS` kills per victim (2 in CI; `scripts/client-crash-soak` runs
//! more), `SHOAL_CLIENT_CRASH_SEED` another random sequence.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_client::{Client, FileKind, MAX_UNSETTLED};
use shoal_proto::handle::ROOT;
use shoal_tests::churn::{Journal, Op, Outcome};
use shoal_tests::{pattern, repair_to_zero, settled_fsck, shoal_bin, Cluster, SharedMount};

const KILLS: u64 = 2;
const SEED: u64 = 0xc1_1e47;
/// Longest a killed churn (or one whose mount died) may take to be gone.
const EXIT_WAIT: Duration = Duration::from_secs(60);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug)]
enum Victim {
    /// churn works through a mount, which is killed.
    Mount,
    /// churn runs under the preload library, and is killed.
    Preload,
    /// churn uses the native client, and is killed.
    Native,
}

/// A name's state: absent, these bytes, or any bytes (a data call in
/// flight at the kill).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Absent,
    Bytes(Vec<u8>),
    AnyBytes,
}

impl Seen {
    fn admits(&self, actual: &Seen) -> bool {
        match (self, actual) {
            (Seen::AnyBytes, Seen::Bytes(_)) => true,
            (a, b) => a == b,
        }
    }
}

/// The files churn's acknowledged calls made: names to inodes, inodes to
/// bytes (hard links share one).
#[derive(Clone, Default)]
struct Model {
    names: BTreeMap<String, u64>,
    data: HashMap<u64, Vec<u8>>,
    next: u64,
}

impl Model {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Create { name, len, seed } => {
                self.next += 1;
                self.names.insert(name.clone(), self.next);
                self.data.insert(self.next, pattern(*seed, *len));
            }
            Op::Write {
                name,
                off,
                len,
                seed,
            } => {
                let data = self.data.get_mut(&self.names[name]).expect("written file");
                let (off, end) = (*off as usize, *off as usize + len);
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[off..end].copy_from_slice(&pattern(*seed, *len));
            }
            Op::Unlink { name } => {
                self.names.remove(name);
            }
            Op::Rename { from, to } => {
                let ino = self.names.remove(from).expect("renamed file");
                self.names.insert(to.clone(), ino);
            }
            Op::Link { from, to } => {
                let ino = self.names[from];
                self.names.insert(to.clone(), ino);
            }
            Op::Fsync { .. } | Op::FsyncDir { .. } => {}
        }
    }

    /// The names whose state `op` changes: its own, and for a write every
    /// other name of the same file (a hard link).
    fn touched(&self, op: &Op) -> Vec<String> {
        let mut names: Vec<String> = op.names().into_iter().map(String::from).collect();
        if let Op::Write { name, .. } = op {
            let ino = self.names.get(name);
            let links = self
                .names
                .iter()
                .filter(|(n, i)| Some(*i) == ino && *n != name);
            names.extend(links.map(|(n, _)| n.clone()));
        }
        names
    }

    fn seen(&self, name: &str) -> Seen {
        match self.names.get(name) {
            Some(ino) => Seen::Bytes(self.data[ino].clone()),
            None => Seen::Absent,
        }
    }
}

/// What one kill showed.
#[derive(Default)]
struct Checked {
    acked: u64,
    /// Acknowledged changes the crash lost (names whose state is not the
    /// acknowledged one, among those an unsent change touched).
    lost: u64,
}

/// Checks `actual` (name → state, every name present in churn's two
/// directories) against the journal. `delegated`: the client may answer
/// creates and unlinks itself.
fn check(
    journal: &Journal,
    actual: &BTreeMap<String, Seen>,
    delegated: bool,
) -> Result<Checked, String> {
    let ops = &journal.ops;
    let acked = |i: usize| ops[i].1 == Outcome::Acked;
    // The call in flight at the kill: the last, unless it was acknowledged.
    let in_flight = ops.len().checked_sub(1).filter(|i| !acked(*i));
    // Where the client may have held acknowledged calls unsent: after its
    // last acknowledged call that reached a server.
    let settled = (0..ops.len())
        .rfind(|i| acked(*i) && !ops[*i].0.may_be_unsent())
        .map_or(0, |i| i + 1);
    let window = match delegated {
        true => settled.min(in_flight.unwrap_or(ops.len())),
        false => in_flight.unwrap_or(ops.len()),
    };
    let mut model = Model::default();
    for (op, _) in ops[..window].iter().filter(|(_, o)| *o == Outcome::Acked) {
        model.apply(op);
    }
    // Every state a name touched in the window took from its start on.
    let mut allowed: BTreeMap<String, BTreeSet<Seen>> = BTreeMap::new();
    for (i, (op, outcome)) in ops.iter().enumerate().skip(window) {
        let touched = model.touched(op);
        for name in &touched {
            allowed
                .entry(name.clone())
                .or_default()
                .insert(model.seen(name));
        }
        let mut after = model.clone();
        after.apply(op);
        for name in touched {
            let seen = match (op, *outcome) {
                (
                    Op::Create { len, .. } | Op::Write { len, .. },
                    Outcome::InFlight | Outcome::Failed(_),
                ) if *len > 0 => Seen::AnyBytes,
                _ => after.seen(&name),
            };
            allowed.entry(name).or_default().insert(seen);
        }
        if acked(i) {
            model = after;
        }
    }
    let mut lost = 0;
    let names: BTreeSet<&String> = actual.keys().chain(model.names.keys()).collect();
    for name in names {
        let got = actual.get(name).cloned().unwrap_or(Seen::Absent);
        let want = model.seen(name);
        match allowed.get(name) {
            None if got == want => {}
            None => {
                return Err(format!(
                    "{name}: {} where the acknowledged calls left {}",
                    describe(&got),
                    describe(&want)
                ))
            }
            Some(states) if states.iter().any(|s| s.admits(&got)) => {
                // A change not made: lost, unless the call was in flight.
                let in_flight_name =
                    in_flight.is_some_and(|i| model.touched(&ops[i].0).contains(name));
                if got != want && !in_flight_name {
                    lost += 1;
                }
            }
            Some(states) => {
                return Err(format!(
                    "{name}: {}, which none of its calls left (allowed: {})",
                    describe(&got),
                    states.iter().map(describe).collect::<Vec<_>>().join(", ")
                ))
            }
        }
    }
    if !delegated && lost > 0 {
        return Err(format!("{lost} acknowledged changes lost"));
    }
    if lost > MAX_UNSETTLED as u64 {
        return Err(format!(
            "{lost} changes lost, past the bound of {MAX_UNSETTLED}"
        ));
    }
    Ok(Checked {
        acked: (0..ops.len()).filter(|i| acked(*i)).count() as u64,
        lost,
    })
}

fn describe(s: &Seen) -> String {
    match s {
        Seen::Absent => "absent".into(),
        Seen::AnyBytes => "any bytes".into(),
        Seen::Bytes(b) => format!("{} bytes", b.len()),
    }
}

/// Every name in churn's directories `dir/{a,b,c}` and its bytes,
/// read by `client` (a fresh one: nothing cached).
async fn read_all(client: &Client, dir: &str) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    for side in ["a", "b", "c"] {
        let (d, _) = client
            .resolve(&format!("/{dir}/{side}"))
            .await
            .unwrap_or_else(|e| panic!("churn's directory /{dir}/{side}: {e}"));
        for e in client.readdir_all(d).await.expect("readdir") {
            assert_eq!(e.kind, FileKind::File, "{dir}/{side}/{}", e.name);
            let size = client.getattr(e.handle).await.expect("getattr").size;
            let data = client
                .read(e.handle, 0, size as usize)
                .await
                .unwrap_or_else(|err| panic!("read {side}/{}: {err}", e.name));
            assert_eq!(data.len() as u64, size, "{side}/{}: short read", e.name);
            out.insert(format!("{side}/{}", e.name), Seen::Bytes(data.to_vec()));
        }
    }
    out
}

/// Waits until `journal` shows churn's first acknowledged call.
fn wait_for_start(journal: &Path, churn: &mut Child) {
    let deadline = Instant::now() + EXIT_WAIT;
    loop {
        let text = std::fs::read_to_string(journal).unwrap_or_default();
        if text.lines().any(|l| l == "A 1") {
            return;
        }
        if let Ok(Some(status)) = churn.try_wait() {
            panic!("churn exited with {status} before its first call: {text}");
        }
        assert!(Instant::now() < deadline, "churn made no call: {text}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill(pid: u32) {
    // SAFETY: a plain signal to a process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

/// Waits (bounded) for `churn` to be gone.
fn reap(churn: &mut Child) {
    let deadline = Instant::now() + EXIT_WAIT;
    while matches!(churn.try_wait(), Ok(None)) {
        assert!(
            Instant::now() < deadline,
            "churn did not end after the kill"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn churn_bin() -> PathBuf {
    shoal_bin().with_file_name("churn")
}

/// When the victim dies.
#[derive(Clone, Copy)]
enum Moment {
    /// At a random moment.
    Random,
    /// The instant the last of a run of creates or unlinks churn makes in
    /// one directory returned (churn sends the SIGKILL itself).
    AfterRun,
}

/// One kill of `victim`: churn in a new directory `/<name>`, killed (or
/// its mount) at `moment`, then checked.
async fn one_kill(
    cluster: &Cluster,
    victim: Victim,
    moment: Moment,
    name: &str,
    rng: &mut StdRng,
    delegated: bool,
) -> Checked {
    let setup = cluster.uncached_client();
    setup.mkdir(ROOT, name, 0o777).await.unwrap();
    let journal = cluster.dir().join(format!("journal-{name}"));
    let seed = rng.random::<u32>().to_string();
    let mut mount = None;
    let mut cmd = Command::new(churn_bin());
    match victim {
        Victim::Mount => {
            let m = SharedMount::new(cluster);
            cmd.arg(m.path().join(name));
            mount = Some(m);
        }
        Victim::Preload => {
            let prefix = format!("/shoal-client-crash-{}", std::process::id());
            let lib = shoal_bin().with_file_name("libshoal_preload.so");
            assert!(lib.exists(), "{} not built", lib.display());
            cmd.arg(format!("{prefix}/{name}"))
                .env("LD_PRELOAD", lib)
                .env("SHOAL_CONFIG", cluster.config_path())
                .env("SHOAL_PREFIX", prefix);
        }
        Victim::Native => {
            cmd.arg(format!("/{name}"));
        }
    }
    cmd.arg(&journal).arg(&seed);
    if let Victim::Native = victim {
        cmd.arg(cluster.config_path());
    }
    // The mount, or churn itself (0).
    let target = mount.as_ref().map_or(0, |m| m.pid());
    if let Moment::AfterRun = moment {
        cmd.env("CHURN_KILL_AFTER_RUN", target.to_string());
    }
    let mut churn = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn churn");
    wait_for_start(&journal, &mut churn);
    if let Moment::Random = moment {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..800))).await;
        kill(if target == 0 { churn.id() } else { target });
    }
    reap(&mut churn);
    // The dead mount is taken down (lazily) with its process reaped.
    drop(mount);
    let text = std::fs::read_to_string(&journal).unwrap();
    let journal = Journal::parse(&text).unwrap();
    assert_eq!(
        journal.setup_failed, None,
        "churn set up before its first call"
    );
    // A call fails only because its mount died under it (the kernel then
    // answers ENOTCONN, or ECONNABORTED or ECANCELED for a request it had
    // handed to the mount's rings); a killed churn never saw one fail.
    let died_under = |e: i32| {
        let gone = [libc::ENOTCONN, libc::ECONNABORTED, libc::ECANCELED];
        matches!(victim, Victim::Mount) && gone.contains(&e)
    };
    for (op, outcome) in &journal.ops {
        if let Outcome::Failed(e) = outcome {
            assert!(
                died_under(*e),
                "{victim:?}: {op} failed with errno {e}\n{text}"
            );
        }
    }
    let actual = read_all(&cluster.uncached_client(), name).await;
    check(&journal, &actual, delegated)
        .unwrap_or_else(|e| panic!("{victim:?} killed: /{name}: {e}\n{text}"))
}

/// `KILLS` kills of each victim on a cluster with `settings`; prints the
/// tally (`scripts/client-crash-soak` collects the lines).
async fn kills_under(settings: &[&str]) -> u64 {
    let kills = env_u64("SHOAL_CLIENT_CRASH_KILLS", KILLS);
    let seed = env_u64("SHOAL_CLIENT_CRASH_SEED", SEED);
    let mut builder = Cluster::builder().servers(4);
    for s in settings {
        builder = builder.set(s);
    }
    let cluster = builder.start();
    let delegated = cluster.config().settings.delegates_dirs();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut lost_in_all = 0;
    for victim in [Victim::Mount, Victim::Preload, Victim::Native] {
        let (mut acked, mut lost, mut most) = (0, 0, 0);
        for i in 0..kills {
            let name = format!("{victim:?}{i}").to_lowercase();
            let moment = [Moment::Random, Moment::AfterRun][i as usize % 2];
            let c = one_kill(&cluster, victim, moment, &name, &mut rng, delegated).await;
            acked += c.acked;
            lost += c.lost;
            most = most.max(c.lost);
        }
        eprintln!(
            "client-crash: {}: {victim:?}: {kills} kills, {acked} acknowledged calls checked, \
             {lost} lost (at most {most} in one kill)",
            settings.join(" ")
        );
        lost_in_all += lost;
    }
    let client = cluster.uncached_client();
    let found = settled_fsck(&client).await;
    eprintln!(
        "client-crash: {}: fsck found {} orphan objects, no entry naming a missing object",
        settings.join(" "),
        found.orphans.len()
    );
    repair_to_zero(&client).await;
    lost_in_all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_sync_full_a_client_crash_loses_no_acknowledged_change() {
    // Delegations asked for, and not taken: `full` answers nothing itself.
    let lost = kills_under(&["sync=full", "dir_delegations=true"]).await;
    assert_eq!(lost, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_delegations_a_client_crash_loses_no_acknowledged_change() {
    for sync in ["sync=replay", "sync=none"] {
        let lost = kills_under(&[sync, "dir_delegations=false"]).await;
        assert_eq!(lost, 0, "{sync}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_delegations_a_client_crash_loses_only_what_it_answered_itself() {
    // The defaults: `replay` with delegations. `check` fails any other loss.
    for sync in ["sync=replay", "sync=none"] {
        kills_under(&[sync, "dir_delegations=true"]).await;
    }
}

#[test]
fn the_check_fails_a_lost_change_and_a_change_never_made() {
    let create = |name: &str, len| Op::Create {
        name: name.into(),
        len,
        seed: 1,
    };
    let journal = Journal {
        ops: vec![
            (create("a/n1", 10), Outcome::Acked),
            (create("a/n2", 0), Outcome::Acked),
            (
                Op::Unlink {
                    name: "a/n1".into(),
                },
                Outcome::Acked,
            ),
            (create("b/n3", 5), Outcome::InFlight),
        ],
        setup_failed: None,
    };
    let bytes = |len| Seen::Bytes(pattern(1, len));
    let all = BTreeMap::from([("a/n2".to_string(), bytes(0))]);
    assert_eq!(check(&journal, &all, false).unwrap().lost, 0);
    // The in-flight create may be there, with any bytes.
    let with_n3 = BTreeMap::from([
        ("a/n2".to_string(), bytes(0)),
        ("b/n3".to_string(), bytes(2)),
    ]);
    assert!(check(&journal, &with_n3, false).is_ok());
    // The unsent create and unlink lost: only where the client may hold
    // them unsent.
    let lost = BTreeMap::from([("a/n1".to_string(), bytes(10))]);
    assert!(check(&journal, &lost, false).is_err());
    assert_eq!(check(&journal, &lost, true).unwrap().lost, 2);
    // A name no call made, or bytes no call wrote.
    let stray = BTreeMap::from([
        ("a/n2".to_string(), bytes(0)),
        ("a/x".to_string(), bytes(1)),
    ]);
    assert!(check(&journal, &stray, true).is_err());
    let wrong = BTreeMap::from([("a/n2".to_string(), bytes(3))]);
    assert!(check(&journal, &wrong, true).is_err());
    // A write in flight changes every name of its file.
    let linked = Journal {
        ops: vec![
            (create("a/n1", 10), Outcome::Acked),
            (
                Op::Link {
                    from: "a/n1".into(),
                    to: "b/n2".into(),
                },
                Outcome::Acked,
            ),
            (
                Op::Write {
                    name: "a/n1".into(),
                    off: 0,
                    len: 4,
                    seed: 9,
                },
                Outcome::InFlight,
            ),
        ],
        setup_failed: None,
    };
    let rewritten = Seen::Bytes(b"0123456789".to_vec());
    let both = BTreeMap::from([
        ("a/n1".to_string(), rewritten.clone()),
        ("b/n2".to_string(), rewritten),
    ]);
    assert!(check(&linked, &both, false).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_fsync_of_a_directory_returned_for_survives_its_mounts_crash() {
    // The client keeps the creates it answers until something sends them.
    let cluster = Cluster::builder()
        .servers(2)
        .set("delegated_flush_ms=60000")
        .start();
    let m = SharedMount::new(&cluster);
    let dir = m.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..100 {
        std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
    }
    std::fs::File::open(&dir).unwrap().sync_all().unwrap();
    kill(m.pid());
    drop(m);
    let c = cluster.uncached_client();
    let (d, _) = c.resolve("/d").await.unwrap();
    assert_eq!(c.readdir_all(d).await.unwrap().len(), 100);
}
