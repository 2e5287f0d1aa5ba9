//! Creates answered by the client under a directory delegation
//! (`dir_delegations`): no message per create, one `CreateFiles` for many;
//! every file there for the client's own next request, for another client
//! (the server recalls the delegation first), and across a server restart;
//! a name taken is refused at once.

use bytes::Bytes;
use shoal_client::{Client, Errno, SetAttr};
use shoal_proto::handle::{server_of, Handle, ROOT};
use shoal_tests::{
    delegated_dir, entry_names, granted_delegation, mount_stat_rows, mount_stats, pattern,
    settled_fsck, Cluster,
};

/// A cluster whose clients keep what they answered for a minute: only a
/// fence, an fsync or a recall sends it.
fn cluster() -> Cluster {
    Cluster::builder()
        .servers(2)
        .delegating()
        .set("delegated_flush_ms=60000")
        .start()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

async fn create_all(c: &Client, dir: Handle, names: &[String]) -> Vec<Handle> {
    let mut made = Vec::new();
    for n in names {
        made.push(c.create(dir, n, 0o640).await.unwrap().handle);
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_are_answered_here_and_another_client_sees_them_all() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    let dir = delegated_dir(&a, "d").await;

    // Fewer than are sent at once (256).
    let wanted = names("f", 200);
    let (made, messages) = cluster
        .messages_during(&a, create_all(&a, dir, &wanted))
        .await;
    // The stats the count asks for go behind the fence: the 200 went
    // first, as one message.
    assert!(messages <= 3, "{messages} messages for 200 creates");
    assert_eq!(cluster.requests_of(&a, "create_files").await, 1);
    assert!(made.iter().all(|h| server_of(*h) == server_of(dir)));

    // Unsent: another client's listing recalls the delegation,
    // which sends them before the listing is answered.
    let more = names("g", 200);
    create_all(&a, dir, &more).await;
    let mut listed = entry_names(&b, dir).await;
    listed.sort();
    let mut expected: Vec<String> = wanted.iter().chain(&more).cloned().collect();
    expected.push("first".into());
    expected.sort();
    assert_eq!(listed, expected);
    assert!(!a.holds_delegation(dir), "recalled");

    // Each is an ordinary file, for either client.
    let g7 = b.lookup(dir, "g7").await.unwrap().0;
    b.write(g7, 0, Bytes::from(pattern(7, 10_000)))
        .await
        .unwrap();
    b.fsync(g7).await.unwrap();
    assert_eq!(
        a.read(g7, 0, 10_001).await.unwrap()[..],
        pattern(7, 10_000)[..]
    );

    // A name the other client made while it held nothing is refused.
    b.create(dir, "h", 0o644).await.unwrap();
    let e = a.create(dir, "h", 0o644).await.unwrap_err();
    assert_eq!(e.errno, Errno::EEXIST);
    settled_fsck(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsent_create_is_there_for_its_clients_next_request() {
    let cluster = cluster();
    let a = cluster.client();
    let dir = delegated_dir(&a, "d").await;
    let f = a.create(dir, "x", 0o600).await.unwrap().handle;
    assert_eq!(a.getattr(f).await.unwrap().mode, 0o600);
    let e = a.create(dir, "x", 0o600).await.unwrap_err();
    assert_eq!(e.errno, Errno::EEXIST, "taken, answered here");
    assert!(a.lookup(dir, "nope").await.is_err());

    // Its data goes after the create (the fence), and the listing has it.
    a.write(f, 0, Bytes::from(pattern(1, 5000))).await.unwrap();
    a.fsync(f).await.unwrap();
    assert_eq!(a.read(f, 0, 5001).await.unwrap()[..], pattern(1, 5000)[..]);
    let mut listed = entry_names(&a, dir).await;
    listed.sort();
    assert_eq!(listed, vec!["first".to_string(), "x".to_string()]);
    assert_eq!(a.lookup(dir, "x").await.unwrap().0, f);

    // Removed and made again.
    a.unlink(dir, "x").await.unwrap();
    let again = a.create(dir, "x", 0o600).await.unwrap().handle;
    assert_ne!(again, f);
    a.fsync(again).await.unwrap();
    settled_fsck(&a).await;
}

/// A write to a file whose create is unsent sends the create (the fence),
/// whose reply says where the file's bytes go: no question more (mdtest's
/// hard form writes every file it makes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_an_unsent_create_needs_no_question_of_its_own() {
    let cluster = cluster();
    let a = cluster.client();
    cluster.wait_for_pools(&a).await;
    let dir = delegated_dir(&a, "d").await;
    // Counted before the create: a count's own request goes behind the
    // fence, which would send it.
    let getattrs = cluster.requests_of(&a, "getattr").await;
    let f = a.create(dir, "x", 0o600).await.unwrap().handle;
    assert!(a.holds_delegation(dir), "answered here");
    a.write(f, 0, Bytes::from(pattern(2, 3901))).await.unwrap();
    a.fsync(f).await.unwrap();
    assert_eq!(cluster.requests_of(&a, "getattr").await, getattrs);
    assert_eq!(cluster.requests_of(&a, "create_files").await, 1);
    assert_eq!(a.read(f, 0, 4000).await.unwrap()[..], pattern(2, 3901)[..]);
}

/// A file made under a delegation through the mount is the mount's alone
/// until its create lands, and leased to it then: the kernel keeps its
/// attributes as long as the directory's lease, past the short timeout of
/// what nobody leases, and a stat of it asks nothing of the mount.
#[test]
fn the_kernel_keeps_the_attributes_of_files_made_under_a_delegation() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .delegating()
        .set("cache_ttl_ms=1")
        .start();
    let mnt = cluster.mount();
    let dir = mnt.join("d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..50 {
        std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
    }
    // Past the 1 ms the kernel keeps what is not leased.
    std::thread::sleep(std::time::Duration::from_millis(100));
    mount_stats(&mnt, &["--reset"]);
    for i in 0..50 {
        assert!(std::fs::metadata(dir.join(format!("f{i}")))
            .unwrap()
            .is_file());
    }
    let text = mount_stats(&mnt, &[]);
    let rows = mount_stat_rows(&text);
    assert!(!rows.contains_key("getattr"), "{text}");
    assert!(!rows.contains_key("lookup"), "{text}");
    // The first went to its server, which leased it; the delegation
    // answered the other 49.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = cluster.client();
    assert!(rt.block_on(cluster.requests_of(&c, "create_files")) >= 1);
    assert_eq!(rt.block_on(cluster.requests_of(&c, "create_file")), 1);
}

/// What the kernel keeps of such a file goes when another client changes
/// it. Here the other client's lookup recalls the delegation, so the
/// create lands unleased and the mount drops what the kernel keeps then;
/// a create that landed earlier, leased, has the change recall that lease.
#[test]
fn another_clients_write_reaches_a_stat_of_a_file_made_under_a_delegation() {
    let mut cluster = Cluster::builder().servers(2).delegating().start();
    let mnt = cluster.mount();
    let dir = mnt.join("d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..5 {
        std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
    }
    let f = dir.join("f3");
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = cluster.client();
    rt.block_on(async {
        let h = b.resolve("/d/f3").await.unwrap().0;
        b.write(h, 0, Bytes::from(pattern(4, 9000))).await.unwrap();
        b.fsync(h).await.unwrap();
    });
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 9000);
    assert_eq!(std::fs::read(&f).unwrap(), pattern(4, 9000));
}

/// The creates a holder sends because another client recalled its
/// delegation are not leased to it: that client's writes and unlinks of
/// those files then recall nothing from the maker (mdtest's `-N 1` removes
/// every file another process made, each a recall before), and the maker,
/// whose lease noted under the delegation is dropped, sees the write at
/// its next stat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_sent_at_a_delegations_recall_are_not_leased_to_their_maker() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    let dir = delegated_dir(&a, "d").await;
    let made = names("f", 20);
    let handles = create_all(&a, dir, &made).await;
    for h in &handles {
        assert_eq!(a.getattr(*h).await.unwrap().size, 0);
    }
    assert_eq!(entry_names(&b, dir).await.len(), 21, "the listing recalls");
    assert!(!a.holds_delegation(dir));

    let server = server_of(dir);
    let before = b.server_stats(server).await.unwrap().lease_recalls;
    b.write(handles[0], 0, Bytes::from(pattern(3, 7000)))
        .await
        .unwrap();
    b.fsync(handles[0]).await.unwrap();
    for n in &made[1..] {
        b.unlink(dir, n).await.unwrap();
    }
    let recalls = b.server_stats(server).await.unwrap().lease_recalls - before;
    // At most the maker's lease on the directory itself, not one a file.
    assert!(recalls <= 1, "{recalls} recalls for a write and 19 unlinks");
    assert_eq!(a.getattr(handles[0]).await.unwrap().size, 7000);
    settled_fsck(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsent_creates_survive_a_restart_of_their_server() {
    let mut cluster = cluster();
    let a = cluster.client();
    a.ping_all().await.unwrap();
    let dir = delegated_dir(&a, "d").await;
    let unsent = names("k", 50);
    let made = create_all(&a, dir, &unsent).await;

    let id = server_of(dir);
    cluster.kill(id);
    cluster.start_server(id);
    // The fsync sends them once the server is back.
    a.fsync(made[0]).await.unwrap();
    let b = cluster.client();
    let mut listed = entry_names(&b, dir).await;
    listed.sort();
    let mut expected = unsent.clone();
    expected.push("first".into());
    expected.sort();
    assert_eq!(listed, expected);
    for (name, h) in unsent.iter().zip(&made) {
        assert_eq!(b.lookup(dir, name).await.unwrap().0, *h, "{name}");
    }
    settled_fsck(&b).await;
}

/// Two clients, each holding a delegation, list each other's directory at
/// once on one server: each listing waits for the other's recall, whose
/// answer comes over the connection the other listing arrived on. Neither
/// may wait for the other's listing to end (the recalls would time out and
/// both clients be evicted, with their unsent creates missing from the
/// listings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_holders_list_each_others_directory_at_once() {
    let cluster = Cluster::builder()
        .servers(1)
        .delegating()
        .set("delegated_flush_ms=60000")
        .set("lease_recall_ms=5000")
        .start();
    let (a, b) = cluster.two_clients().await;
    for round in 0..20 {
        let x = delegated_dir(&a, &format!("x{round}")).await;
        let y = delegated_dir(&b, &format!("y{round}")).await;
        let in_x = names("a", 20);
        let in_y = names("b", 20);
        create_all(&a, x, &in_x).await;
        create_all(&b, y, &in_y).await;
        let (of_y, of_x) = tokio::join!(entry_names(&a, y), entry_names(&b, x));
        assert_eq!(of_x.len(), 21, "round {round}: {of_x:?}");
        assert_eq!(of_y.len(), 21, "round {round}: {of_y:?}");
    }
    let stats = a.server_stats(0).await.unwrap();
    assert_eq!(stats.lease_recall_timeouts, 0, "no client was evicted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlinks_of_files_made_here_are_answered_here_and_sent_together() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    let dir = delegated_dir(&a, "d").await;
    let files = names("f", 100);
    let made = create_all(&a, dir, &files).await;
    // A large one: its datafiles on other servers go with it.
    a.write(made[0], 0, Bytes::from(pattern(3, 3 << 20)))
        .await
        .unwrap();
    a.fsync(made[0]).await.unwrap();

    // Unlinked here: no rmdirent, one remove_files, sent before the
    // stats are read (the fence).
    for f in &files[..90] {
        a.unlink(dir, f).await.unwrap();
    }
    assert_eq!(cluster.requests_of(&a, "rmdirent").await, 0);
    assert_eq!(cluster.requests_of(&a, "remove_files").await, 1);
    let e = a.unlink(dir, "f1").await.unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT, "gone, answered here");
    assert!(a.lookup(dir, "f1").await.is_err());

    // Made again after its unlink: a new file.
    let again = a.create(dir, "f2", 0o600).await.unwrap().handle;
    assert_ne!(again, made[2]);

    // Created and unlinked before either was sent: neither is.
    let creates_before = cluster.requests_of(&a, "create_files").await;
    a.create(dir, "brief", 0o644).await.unwrap();
    a.unlink(dir, "brief").await.unwrap();
    assert_eq!(
        cluster.requests_of(&a, "create_files").await,
        creates_before
    );

    // Another client's listing recalls the delegation and sees exactly
    // what a's callers were told.
    let mut listed = entry_names(&b, dir).await;
    listed.sort();
    let mut expected: Vec<String> = files[90..].to_vec();
    expected.extend(["first".to_string(), "f2".to_string()]);
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(b.lookup(dir, "f2").await.unwrap().0, again);
    let report = settled_fsck(&b).await;
    assert!(report.orphans.is_empty(), "{report:?}");
    assert!(report.orphan_files.is_empty(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlink_is_answered_here_only_for_a_file_made_here() {
    let cluster = cluster();
    let a = cluster.client();
    // "first" is made by the server, before the delegation.
    let dir = delegated_dir(&a, "d").await;
    a.create(dir, "mine", 0o644).await.unwrap();
    let linked = a.create(dir, "linked", 0o644).await.unwrap().handle;
    a.mkdir(dir, "sub", 0o755).await.unwrap();
    let e = a.unlink(dir, "sub").await.unwrap_err();
    assert_eq!(e.errno, Errno::EISDIR);
    a.unlink(dir, "first").await.unwrap();
    assert_eq!(
        cluster.requests_of(&a, "rmdirent").await,
        2,
        "neither made here"
    );
    assert!(a.lookup(dir, "first").await.is_err());

    // A file with a name elsewhere too: its other name keeps it, so the
    // unlink is the server's.
    a.link(linked, ROOT, "elsewhere").await.unwrap();
    a.write(linked, 0, Bytes::from(pattern(5, 100)))
        .await
        .unwrap();
    a.unlink(dir, "linked").await.unwrap();
    assert_eq!(cluster.requests_of(&a, "rmdirent").await, 3);
    assert_eq!(
        a.read(linked, 0, 101).await.unwrap()[..],
        pattern(5, 100)[..]
    );

    // Nor one whose owner changed: in a sticky directory it may not be
    // this user's to remove any more.
    let given = a.create(dir, "given", 0o644).await.unwrap().handle;
    let chown = SetAttr {
        uid: Some(4321),
        ..Default::default()
    };
    a.setattr(given, &chown).await.unwrap();
    a.unlink(dir, "given").await.unwrap();
    assert_eq!(cluster.requests_of(&a, "rmdirent").await, 4);

    // The server's changes of other names leave a file made here to be
    // unlinked here.
    a.unlink(dir, "mine").await.unwrap();
    assert_eq!(cluster.requests_of(&a, "rmdirent").await, 4);
    assert_eq!(cluster.requests_of(&a, "remove_files").await, 1);
    assert!(a.lookup(dir, "mine").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_own_changes_of_the_directory_stop_local_answers() {
    let cluster = cluster();
    let a = cluster.client();
    let dir = delegated_dir(&a, "d").await;
    let chmod = SetAttr {
        mode: Some(0o555),
        ..Default::default()
    };
    a.setattr(dir, &chmod).await.unwrap();
    assert!(!a.holds_delegation(dir), "a mode change might refuse them");
    let before = cluster.requests_of(&a, "create_file").await;
    a.create(dir, "f", 0o644).await.unwrap();
    let after = cluster.requests_of(&a, "create_file").await;
    assert_eq!(after, before + 1, "the next create asks the server");

    let other = delegated_dir(&a, "e").await;
    a.rename(other, "first", other, "second", false)
        .await
        .unwrap();
    assert!(!a.holds_delegation(other), "nor during a rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_one_after_another_wait_for_the_delegation_asked_for() {
    let cluster = cluster();
    let a = cluster.client();
    let dir = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    // The first create goes to the server and asks for the delegation;
    // the next ones, straight after it, wait for that answer rather than
    // race it to the server (each would move the directory on and void
    // the grant).
    create_all(&a, dir, &names("f", 50)).await;
    assert!(a.holds_delegation(dir));
    assert_eq!(cluster.requests_of(&a, "create_file").await, 1);
    assert_eq!(cluster.requests_of(&a, "create_files").await, 1);
    assert_eq!(entry_names(&a, dir).await.len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_leases_never_asks() {
    // It could not be recalled: a server would refuse every ask, and each
    // create would wait for the refusal.
    creates_all_go_to_the_server_with("lease_ms=0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sync_full_every_create_reaches_its_server_before_it_returns() {
    // What a client answers itself is lost with it; `full` promises that
    // every acknowledged change survives a client's crash.
    creates_all_go_to_the_server_with("sync=full").await;
}

/// With `setting`, a client asks for no delegation and sends each create.
async fn creates_all_go_to_the_server_with(setting: &str) {
    let cluster = Cluster::builder()
        .servers(2)
        .set("dir_delegations=true")
        .set(setting)
        .start();
    let a = cluster.client();
    let dir = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    create_all(&a, dir, &names("f", 20)).await;
    assert!(!a.holds_delegation(dir));
    assert_eq!(cluster.requests_of(&a, "create_file").await, 20);
    let mut asks = 0;
    for s in cluster.server_ids() {
        let stats = a.server_stats(s).await.unwrap();
        let of_op = stats.ops.iter().filter(|o| o.op == "delegate_dir");
        asks += of_op.map(|o| o.requests).sum::<u64>();
    }
    assert_eq!(asks, 0);
}

/// What a mount answered under a delegation goes at its unmount: with
/// empty files and unlinks nothing else would carry it (no write is
/// buffered to send, and the delay here is a minute), and the mount's
/// memory goes with its process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmount_sends_the_creates_and_unlinks_the_mount_answered() {
    let mut cluster = cluster();
    let mnt = cluster.mount();
    let c = cluster.client();
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    // Goes to the server and asks for the delegation; the creates after it
    // wait for the answer, then are answered by the mount.
    std::fs::File::create(d.join("first")).unwrap();
    let wanted = names("f", 100);
    for n in &wanted {
        std::fs::File::create(d.join(n)).unwrap();
    }
    for n in wanted.iter().step_by(4) {
        std::fs::remove_file(d.join(n)).unwrap();
    }
    let held = unsent_changes_sent(&cluster, &c).await;

    cluster.unmount();
    assert!(
        unsent_changes_sent(&cluster, &c).await > held,
        "the mount held some of them to the end"
    );
    let dir = c.resolve("/d").await.unwrap().0;
    let mut listed = entry_names(&c, dir).await;
    listed.sort();
    let mut expected: Vec<String> = wanted;
    expected.retain(|n| n[1..].parse::<usize>().unwrap() % 4 != 0);
    expected.push("first".into());
    expected.sort();
    assert_eq!(listed, expected);
    settled_fsck(&c).await;
}

/// Messages of unsent creates and unlinks the servers have received.
async fn unsent_changes_sent(cluster: &Cluster, c: &Client) -> u64 {
    cluster.requests_of(c, "create_files").await + cluster.requests_of(c, "remove_files").await
}

/// A directory another client made becomes known once this client's first
/// create there shows the entry count at its first plus one, so creates
/// there are answered under a delegation too: mdtest's `-N 1` has each rank
/// create its files in the directory its neighbour made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_another_client_made_is_delegated_too() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    a.mkdir(ROOT, "d", 0o777).await.unwrap();
    // Found without its record: its first create's reply shows it was
    // empty and never changed before.
    let dir = b.resolve("/d").await.unwrap().0;
    let wanted = names("f", 100);
    create_all(&b, dir, &wanted[..1]).await;
    granted_delegation(&b, dir).await;
    let ((), messages) = cluster
        .messages_during(&b, async {
            create_all(&b, dir, &wanted[1..]).await;
        })
        .await;
    assert!(messages <= 3, "{messages} messages for 99 creates");
    let mut listed = entry_names(&a, dir).await;
    listed.sort();
    let mut expected = wanted;
    expected.sort();
    assert_eq!(listed, expected);
    settled_fsck(&a).await;
}
