//! Leases (`server/src/leases.rs`, `client/src/consistency/leases.rs`): what a server
//! answered stays cached by the client until the server recalls it, so a
//! leased stat costs no message long after the cache TTL, and another
//! client's change is seen as soon as that change returns, even while the
//! entry would still be fresh by the TTL.

use bytes::Bytes;
use shoal_client::{Client, SetAttr};
use shoal_proto::error::Errno;
use shoal_proto::handle::ROOT;
use shoal_tests::{eventually, Cluster};

/// Without directory delegations: a delegation granted in the background
/// after a create (tests/tests/dir_delegations.rs) stamps its directory, so
/// that a read racing with the grant gets no lease and is cached for the
/// TTL only; these tests count on every answer leasing.
fn cluster() -> Cluster {
    Cluster::builder()
        .servers(2)
        .set("dir_delegations=false")
        .start()
}

/// Directory `d` and in it file `f`, holding "hello", made by `a`.
async fn made_by(a: &Client) -> (u64, u64) {
    let d = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    let f = a.create(d, "f", 0o644).await.unwrap().handle;
    a.write(f, 0, Bytes::from_static(b"hello")).await.unwrap();
    a.fsync(f).await.unwrap();
    (d, f)
}

async fn recalls(cluster: &Cluster, client: &Client) -> u64 {
    let mut n = 0;
    for s in cluster.server_ids() {
        n += client.server_stats(s).await.unwrap().lease_recalls;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_stat_costs_no_message_past_the_ttl() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    let (d, f) = made_by(&a).await;

    assert_eq!(b.lookup_attr(d, "f").await.unwrap().size, 5);
    assert!(
        b.lease_until(d).is_some(),
        "the lookup leased the directory"
    );
    assert!(b.lease_until(f).is_some(), "and the file it carried");
    // Well past the cache TTL (100 ms).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (attr, n) = cluster
        .messages_during(&b, async { b.lookup_attr(d, "f").await })
        .await;
    assert_eq!(attr.unwrap().size, 5);
    assert_eq!(n, 0, "name and attributes under lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_changes_are_seen_as_soon_as_they_return() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    let (d, f) = made_by(&a).await;

    // chmod: B's cached attributes go before A's setattr returns.
    assert_eq!(b.lookup_attr(d, "f").await.unwrap().mode & 0o777, 0o644);
    let before = recalls(&cluster, &a).await;
    let chmod = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    a.setattr(f, &chmod).await.unwrap();
    assert!(
        recalls(&cluster, &a).await > before,
        "B's lease was recalled"
    );
    assert_eq!(b.getattr(f).await.unwrap().mode & 0o777, 0o600);

    // A write and its fsync: B sees the new size at once.
    assert_eq!(b.getattr(f).await.unwrap().size, 5);
    a.write(f, 5, Bytes::from_static(b", world")).await.unwrap();
    a.fsync(f).await.unwrap();
    assert_eq!(b.getattr(f).await.unwrap().size, 12);
    assert_eq!(&b.read(f, 0, 64).await.unwrap()[..], b"hello, world");

    // Create: B listed the directory; the new name is there at once.
    assert_eq!(b.readdir_all(d).await.unwrap().len(), 1);
    a.create(d, "g", 0o644).await.unwrap();
    assert!(b.lookup(d, "g").await.is_ok());
    assert_eq!(b.readdir_all(d).await.unwrap().len(), 2);

    // Rename and unlink: B's cached names go.
    b.lookup(d, "g").await.unwrap();
    a.rename(d, "g", d, "h", false).await.unwrap();
    assert_eq!(b.lookup(d, "g").await.unwrap_err().errno, Errno::ENOENT);
    assert!(b.lookup(d, "h").await.is_ok());
    a.unlink(d, "h").await.unwrap();
    assert_eq!(b.lookup(d, "h").await.unwrap_err().errno, Errno::ENOENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_keeps_its_leases_over_its_own_changes_and_loses_them_with_its_connection() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    let d = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    a.readdir_all(d).await.unwrap();
    let before = recalls(&cluster, &a).await;
    let f = a.create(d, "f", 0o644).await.unwrap().handle;
    a.unlink(d, "f").await.unwrap();
    assert_eq!(
        recalls(&cluster, &a).await,
        before,
        "no recall of its own lease"
    );
    assert!(a.lease_until(d).is_some());
    let _ = f;

    // B's lease ends with B: a change after B is gone waits for no one.
    b.readdir_all(d).await.unwrap();
    drop(b);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let before = recalls(&cluster, &a).await;
    a.create(d, "g", 0o644).await.unwrap();
    assert_eq!(
        recalls(&cluster, &a).await,
        before,
        "B's lease went with it"
    );
}

/// Two mounts of one cluster: what one changes, the other shows as soon as
/// the change returns, although its kernel was told to keep what it had
/// (its leases) far longer than the TTL.
#[test]
fn two_mounts_see_each_others_changes_as_soon_as_they_return() {
    use std::os::unix::fs::PermissionsExt;
    let mut cluster = cluster();
    let a = cluster.mount();
    let second = shoal_tests::SharedMount::new(&cluster);
    let b = second.path();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    std::fs::create_dir(a.join("d")).unwrap();
    std::fs::write(a.join("d/f"), b"hello").unwrap();
    assert_eq!(std::fs::read(b.join("d/f")).unwrap(), b"hello");
    assert_eq!(mode(&b.join("d/f")), 0o644);

    std::fs::set_permissions(a.join("d/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(mode(&b.join("d/f")), 0o600, "chmod");

    std::fs::write(a.join("d/f"), b"hello, world").unwrap();
    assert_eq!(
        std::fs::read(b.join("d/f")).unwrap(),
        b"hello, world",
        "write"
    );

    std::fs::rename(a.join("d/f"), a.join("d/g")).unwrap();
    assert!(!b.join("d/f").exists(), "the old name of a rename");
    assert_eq!(std::fs::read(b.join("d/g")).unwrap(), b"hello, world");

    let names = |p: &std::path::Path| {
        let mut n: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    // B listed the directory: its names are leased.
    assert_eq!(names(&b.join("d")), ["g"]);
    std::fs::write(a.join("d/h"), b"new").unwrap();
    assert_eq!(names(&b.join("d")), ["g", "h"], "create");

    std::fs::remove_file(a.join("d/g")).unwrap();
    assert!(!b.join("d/g").exists(), "unlink");
    assert_eq!(names(&b.join("d")), ["h"]);
}

/// A rename moves the kernel's entry, with the timeout it was given under
/// the old name, to the new one: when another mount then replaces what the
/// new name names, its recall must take that entry back too. (It took back
/// the old name only: the first mount went on seeing the directory it had
/// renamed, for the rest of the lease, and a rename of the name onto itself
/// failed with ENOTDIR.) Within a directory and across directories.
#[test]
fn a_renamed_entry_is_taken_back_when_another_mount_replaces_it() {
    let mut cluster = cluster();
    let a = cluster.mount();
    let second = shoal_tests::SharedMount::new(&cluster);
    let b = second.path();
    std::fs::create_dir(a.join("d")).unwrap();
    std::fs::create_dir(a.join("e")).unwrap();
    for (from, to) in [("d/b", "d/a"), ("d/c", "e/a")] {
        std::fs::create_dir(a.join(from)).unwrap();
        std::fs::rename(a.join(from), a.join(to)).unwrap();
        std::fs::remove_dir(b.join(to)).unwrap();
        std::fs::write(b.join(to), b"file").unwrap();
        let seen = std::fs::metadata(a.join(to)).map(|m| m.is_file());
        assert!(
            matches!(seen, Ok(true)),
            "{to} after the other mount's change: {seen:?}"
        );
        std::fs::rename(a.join(to), a.join(to))
            .unwrap_or_else(|e| panic!("rename {to} onto itself: {e}"));
        assert_eq!(std::fs::read(a.join(to)).unwrap(), b"file");
    }
}

/// Through the mount, a leased file costs no message to stat (its
/// attributes stay in the kernel) and none to open, read and close again
/// (its pages stay too); an unlink of a name the kernel holds is the one
/// message that removes it.
#[test]
fn through_the_mount_leased_files_cost_no_message_to_stat_or_read() {
    let mut cluster = cluster();
    let m = cluster.mount();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let probe = cluster.client();
    std::fs::create_dir(m.join("d")).unwrap();
    for name in ["f", "g"] {
        std::fs::write(m.join("d").join(name), vec![7u8; 8192]).unwrap();
    }
    // Listings with attributes (ls -l) and a read: leases, cached pages.
    for _ in 0..2 {
        for dir in [m.clone(), m.join("d")] {
            for e in std::fs::read_dir(dir).unwrap() {
                e.unwrap().metadata().unwrap();
            }
        }
        assert_eq!(std::fs::read(m.join("d/f")).unwrap().len(), 8192);
        // Past the cache TTL.
        std::thread::sleep(std::time::Duration::from_millis(300));
    }

    let during = |f: &dyn Fn()| {
        rt.block_on(cluster.messages_during(&probe, async { f() }))
            .1
    };
    let stat = during(&|| {
        assert_eq!(std::fs::metadata(m.join("d/f")).unwrap().len(), 8192);
    });
    assert_eq!(stat, 0, "a stat of a leased file");
    let read = during(&|| {
        assert_eq!(std::fs::read(m.join("d/f")).unwrap(), vec![7u8; 8192]);
    });
    assert!(
        read <= 1,
        "open+read+close of a leased file: {read} messages"
    );
    let unlink = during(&|| std::fs::remove_file(m.join("d/g")).unwrap());
    assert_eq!(unlink, 1, "an unlink of a name the kernel holds");
}

/// A create's reply leases the new file to its creator: the native
/// client keeps its attributes, and the mount's kernel its entry and
/// attributes, past the cache TTL, so a stat after it costs no message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_file_is_leased_to_the_client_that_made_it() {
    let cluster = cluster();
    let (a, _) = cluster.two_clients().await;
    let d = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    let f = a.create(d, "f", 0o644).await.unwrap().handle;
    assert!(a.lease_until(f).is_some(), "the create leased the file");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (attr, n) = cluster
        .messages_during(&a, async { a.lookup_attr(d, "f").await })
        .await;
    assert_eq!(attr.unwrap().handle, f);
    assert_eq!(n, 0, "name and attributes of the new file under lease");
}

#[test]
fn through_the_mount_a_new_file_costs_no_message_to_stat() {
    let mut cluster = cluster();
    let m = cluster.mount();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let probe = cluster.client();
    std::fs::create_dir(m.join("d")).unwrap();
    drop(std::fs::File::create(m.join("d/f")).unwrap());
    // Past the cache TTL.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (_, stat) = rt.block_on(cluster.messages_during(&probe, async {
        assert_eq!(std::fs::metadata(m.join("d/f")).unwrap().len(), 0);
    }));
    assert_eq!(stat, 0, "a stat of a file this mount made");
}

/// A mount that holds leases and stops answering (SIGSTOP) holds another
/// client's change back for `lease_recall_ms` at most: then it loses its
/// leases and its connection, and once it runs again it shows the change.
/// Stops the mount's process (its client then answers no recall), has
/// client `a` run `change`, and returns the recall timeouts the servers
/// counted meanwhile; the mount runs again afterwards.
fn while_the_mount_is_stopped<F>(
    cluster: &Cluster,
    mount: &shoal_tests::SharedMount,
    rt: &tokio::runtime::Runtime,
    a: &Client,
    change: impl FnOnce(Client) -> F,
) -> u64
where
    F: std::future::Future<Output = ()>,
{
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &mount.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let timeouts = rt.block_on(async {
        change(a.clone()).await;
        let mut timeouts = 0;
        for s in cluster.server_ids() {
            timeouts += a.server_stats(s).await.unwrap().lease_recall_timeouts;
        }
        timeouts
    });
    signal("-CONT");
    timeouts
}

#[test]
fn a_client_that_does_not_answer_loses_its_leases_after_the_bound() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::builder()
        .servers(2)
        .set("lease_recall_ms=300")
        .start();
    let mount = shoal_tests::SharedMount::new(&cluster);
    let m = mount.path();
    std::fs::write(m.join("f"), b"x").unwrap();
    let mode = || std::fs::metadata(m.join("f")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(), 0o644);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = cluster.client();
    let timeouts = while_the_mount_is_stopped(&cluster, &mount, &rt, &a, |a| async move {
        let f = a.lookup(ROOT, "f").await.unwrap().0;
        let chmod = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        a.setattr(f, &chmod).await.unwrap();
    });
    assert_eq!(timeouts, 1, "the stopped mount's recall timed out");
    eventually("the mount still has the old mode", || mode() == 0o600);
}

/// An unlink from a client the server already knows is answered on its
/// connection's task (`sync = "replay"`: nothing to wait for on the disk);
/// a recall it makes is waited for all the same, up to the bound.
#[test]
fn a_change_answered_in_memory_waits_for_its_recall_too() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("lease_recall_ms=300")
        .set("sync=replay")
        .start();
    let mount = shoal_tests::SharedMount::new(&cluster);
    let m = mount.path();
    std::fs::create_dir(m.join("d")).unwrap();
    std::fs::write(m.join("d/f"), b"x").unwrap();
    let listed = || {
        let mut names: Vec<String> = std::fs::read_dir(m.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    // A's first change enters it in the servers' client tables (durably,
    // on the blocking pool); its later ones are answered in memory.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = cluster.client();
    let d = rt.block_on(async {
        let d = a.lookup(ROOT, "d").await.unwrap().0;
        a.create(d, "g", 0o644).await.unwrap();
        d
    });
    assert_eq!(listed(), ["f", "g"], "the mount leased the listing again");

    let timeouts = while_the_mount_is_stopped(&cluster, &mount, &rt, &a, |a| async move {
        a.unlink(d, "f").await.unwrap();
    });
    assert_eq!(timeouts, 1, "the stopped mount's recall timed out");
    eventually("the mount still lists the old names", || listed() == ["g"]);
}

/// Two servers with 4 KiB strips, two clients, and file `f` at the root,
/// made by `a` and holding `strips` strips of ones, fsynced.
async fn striped_file(strips: usize) -> (Cluster, Client, Client, u64) {
    let cluster = Cluster::builder().servers(2).set("strip_size=4096").start();
    let (a, b) = cluster.two_clients().await;
    let f = a.create(ROOT, "f", 0o644).await.unwrap().handle;
    a.write(f, 0, Bytes::from(vec![1u8; strips * 4096]))
        .await
        .unwrap();
    a.fsync(f).await.unwrap();
    (cluster, a, b, f)
}

/// A striped file's size comes from its datafiles' servers, each leasing
/// it as the file's: a write landing on another server's datafile recalls
/// the reader's cached attributes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_a_striped_files_datafile_recalls_its_attributes() {
    let (cluster, a, b, f) = striped_file(3).await;
    assert!(a.layout(f).await.unwrap().datafiles.len() > 1, "striped");

    assert_eq!(b.getattr(f).await.unwrap().size, 3 * 4096);
    assert!(b.lease_until(f).is_some(), "every server leased its part");
    let before = recalls(&cluster, &a).await;
    a.write(f, 3 * 4096, Bytes::from(vec![2u8; 4096]))
        .await
        .unwrap();
    a.fsync(f).await.unwrap();
    assert!(
        recalls(&cluster, &a).await > before,
        "B's lease was recalled"
    );
    assert_eq!(b.getattr(f).await.unwrap().size, 4 * 4096);
}

/// A recall can reach the client after the reply that granted the lease
/// and before the client has cached what came with it: here the file's
/// record has come from its metafile's server while its size waits for a
/// stopped server, and another client's chmod recalls the record meanwhile.
/// What the first getattr then caches must not be trusted afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_between_a_grant_and_its_caching_is_not_lost() {
    let (cluster, a, b, f) = striped_file(2).await;
    let holder = shoal_proto::handle::server_of(f);
    let other = 1 - holder;
    let layout = a.layout(f).await.unwrap();
    assert!(
        layout.datafiles.iter().any(|(_, server)| *server == other),
        "a datafile on the other server"
    );

    let getattrs = || async {
        let stats = a.server_stats(holder).await.unwrap();
        let op = stats.ops.into_iter().find(|o| o.op == "getattr");
        op.map_or(0, |o| o.requests)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let served = getattrs().await;
    cluster.pause(other, true);
    let getattr = tokio::spawn({
        let b = b.clone();
        async move { b.getattr(f).await }
    });
    // B has the record (leased: its server answered) and then waits for
    // the stopped server's size.
    while getattrs().await == served {
        assert!(std::time::Instant::now() < deadline, "B's getattr not seen");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // A's chmod recalls B's lease and is applied; its own getattr then
    // waits for the stopped server too. Counted on the running server
    // alone: the stopped one answers nothing.
    let recalled = || async { a.server_stats(holder).await.unwrap().lease_recalls };
    let before = recalled().await;
    let chmod = tokio::spawn({
        let a = a.clone();
        let set = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        async move { a.setattr(f, &set).await }
    });
    while recalled().await == before {
        assert!(
            std::time::Instant::now() < deadline,
            "B's lease was not recalled while its getattr waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // B answers the recall on its own (its reader runs on another thread).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    cluster.pause(other, false);
    chmod.await.unwrap().unwrap();
    getattr.await.unwrap().unwrap();

    assert_eq!(
        b.getattr(f).await.unwrap().mode & 0o777,
        0o600,
        "B still had the record of before the chmod"
    );
}

/// python3 running a script under the preload library, on a cluster whose
/// caches keep a minute (the library's cache of listed paths too), with
/// file `f` (mode 0644) made by client `a`: the script gets the cluster's
/// root as argv[1]; its stdin and stdout are the test's.
struct PythonUnderPreload {
    cluster: Cluster,
    a: Client,
    f: u64,
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    stdin: std::process::ChildStdin,
}

impl PythonUnderPreload {
    async fn start(script: &str) -> PythonUnderPreload {
        use std::io::BufRead;
        let cluster = Cluster::builder()
            .servers(2)
            .set("cache_ttl_ms=60000")
            .start();
        let (a, _) = cluster.two_clients().await;
        let f = a.create(ROOT, "f", 0o644).await.unwrap().handle;
        let lib = shoal_tests::shoal_bin().with_file_name("libshoal_preload.so");
        assert!(lib.exists(), "{} not built", lib.display());
        let prefix = format!("/shoal-leases-test-{}", std::process::id());
        let mut child = std::process::Command::new("python3")
            .args(["-c", script, &prefix])
            .env("LD_PRELOAD", &lib)
            .env("SHOAL_CONFIG", cluster.config_path())
            .env("SHOAL_PREFIX", &prefix)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let stdin = child.stdin.take().unwrap();
        PythonUnderPreload {
            cluster,
            a,
            f,
            child,
            lines,
            stdin,
        }
    }

    fn next_line(&mut self) -> String {
        self.lines.next().unwrap().unwrap()
    }

    fn say(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{line}").unwrap();
    }

    /// Client `a` makes `f` 0600.
    async fn chmod_f(&self) {
        let chmod = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        self.a.setattr(self.f, &chmod).await.unwrap();
    }
}

/// The preload library drives its sockets only while it calls; between
/// calls its recall listener reads them, so a process that holds leases and
/// sits idle still answers a recall within the bound. The recall empties
/// the library's own cache of listed paths too, so the process sees the
/// change at its next stat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_preloaded_process_answers_recalls() {
    // A listing, then a stat of its entry (as ls -l): the library keeps
    // the entry's attributes in its own cache.
    let script = "import os, sys\n\
                  os.listdir(sys.argv[1])\n\
                  for _ in range(2):\n\
                  \x20   print(oct(os.stat(sys.argv[1] + '/f').st_mode & 0o777), flush=True)\n\
                  \x20   sys.stdin.readline()\n";
    let mut p = PythonUnderPreload::start(script).await;
    assert_eq!(p.next_line(), "0o644");
    // Idle a while, holding the listing's and the stat's leases.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let before = recalls(&p.cluster, &p.a).await;
    p.chmod_f().await;
    let mut timeouts = 0;
    for s in p.cluster.server_ids() {
        timeouts += p.a.server_stats(s).await.unwrap().lease_recall_timeouts;
    }
    p.say("go");
    assert_eq!(p.next_line(), "0o600");
    p.say("done");
    assert!(p.child.wait().unwrap().success());
    assert!(
        recalls(&p.cluster, &p.a).await > before,
        "the process was recalled"
    );
    assert_eq!(timeouts, 0, "and answered within the bound");
}

/// A forked child gets a client of its own, which no server recalls its
/// parent's leases from: so it starts with nothing of the library's own
/// cache of listed paths, and sees a change another client made after the
/// fork.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_child_does_not_keep_its_parents_cached_paths() {
    let script = "import os, sys\n\
                  mode = lambda: oct(os.stat(sys.argv[1] + '/f').st_mode & 0o777)\n\
                  os.listdir(sys.argv[1])\n\
                  print(mode(), flush=True)\n\
                  pid = os.fork()\n\
                  if pid == 0:\n\
                  \x20   sys.stdin.readline()\n\
                  \x20   print(mode(), flush=True)\n\
                  \x20   os._exit(0)\n\
                  os.waitpid(pid, 0)\n";
    let mut p = PythonUnderPreload::start(script).await;
    assert_eq!(p.next_line(), "0o644");
    p.chmod_f().await;
    p.say("go");
    assert_eq!(
        p.next_line(),
        "0o600",
        "the child answered from its parent's cache"
    );
    assert!(p.child.wait().unwrap().success());
}

/// Two clients each removing the files the other made (and leases) at once,
/// as mdtest -N 1's ranks do: a change answered in memory waits for the
/// other's answer to its recall on a task of its own, not on its
/// connection's reader, where this client's own answers to the other's
/// recalls would wait unread behind it; so neither is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_removing_each_others_leased_files_at_once_evict_nobody() {
    let cluster = Cluster::builder()
        .servers(1)
        .set("dir_delegations=false")
        .start();
    let (a, b) = cluster.two_clients().await;
    let names: Vec<String> = (0..300).map(|i| format!("f{i}")).collect();
    let make = |c: Client, dir: &'static str, names: Vec<String>| async move {
        let d = c.mkdir(ROOT, dir, 0o755).await.unwrap().handle;
        for n in &names {
            c.create(d, n, 0o644).await.unwrap();
        }
        d
    };
    let (da, db) = tokio::join!(
        make(a.clone(), "a", names.clone()),
        make(b.clone(), "b", names.clone())
    );
    let remove = |c: Client, d: u64, names: Vec<String>| {
        tokio::spawn(async move {
            for n in &names {
                c.unlink(d, n).await.unwrap();
            }
        })
    };
    let (x, y) = tokio::join!(
        remove(a.clone(), db, names.clone()),
        remove(b.clone(), da, names.clone())
    );
    x.unwrap();
    y.unwrap();
    let stats = a.server_stats(0).await.unwrap();
    assert_eq!(stats.lease_recall_timeouts, 0, "no client was evicted");
}
