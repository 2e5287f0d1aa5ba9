//! Directories a client made and whose every entry it knows
//! (`client/src/consistency/known_dirs.rs`): the lookup of a name that is not there costs
//! no message, and what other clients change is never hidden past the
//! client's next change, nor from a create without O_EXCL through the mount.
//! The caches' TTL is a minute here, so that only the rules decide.

use std::io::{ErrorKind, Read, Write};

use bytes::Bytes;
use shoal_proto::error::Errno;
use shoal_proto::handle::ROOT;
use shoal_proto::Cred;
use shoal_tests::Cluster;

fn long_ttl() -> Cluster {
    Cluster::builder()
        .servers(2)
        .set("cache_ttl_ms=60000")
        .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_absent_from_a_directory_made_here_costs_no_message() {
    let cluster = long_ttl();
    let a = cluster.client();
    let b = cluster.client();
    a.ping_all().await.unwrap();
    b.ping_all().await.unwrap();
    // Messages are counted: the pools' first fill must not land among them
    // (it did, on a loaded machine).
    cluster.wait_for_pools(&a).await;
    let d = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;

    let (missing, n) = cluster.messages_during(&a, a.lookup(d, "f")).await;
    assert_eq!(missing.unwrap_err().errno, Errno::ENOENT);
    assert_eq!(n, 0, "a lookup of a name not in a known directory");
    let (made, n) = cluster.messages_during(&a, a.create(d, "f", 0o644)).await;
    made.unwrap();
    assert_eq!(n, 1, "the create alone (colocate)");
    let (missing, n) = cluster.messages_during(&a, a.lookup_attr(d, "g")).await;
    assert_eq!(missing.unwrap_err().errno, Errno::ENOENT);
    assert_eq!(n, 0);
    assert!(a.lookup(d, "f").await.is_ok(), "its own file is there");

    // Removals are followed too.
    a.unlink(d, "f").await.unwrap();
    let (missing, n) = cluster.messages_during(&a, a.lookup(d, "f")).await;
    assert_eq!(missing.unwrap_err().errno, Errno::ENOENT);
    assert_eq!(n, 0, "a removed name");

    // Another user's lookup is the servers' to answer (search permission).
    let other = a.with_cred(Cred::new(4242, 4242));
    let (missing, n) = cluster.messages_during(&a, other.lookup(d, "h")).await;
    assert_eq!(missing.unwrap_err().errno, Errno::ENOENT);
    assert_eq!(n, 1, "another user asks the server");

    // Another client's entry: the next change of this client sees the count
    // jump by two, and from then on the servers answer.
    let theirs = b.create(d, "x", 0o644).await.unwrap().handle;
    a.create(d, "y", 0o644).await.unwrap();
    let (found, n) = cluster.messages_during(&a, a.lookup(d, "x")).await;
    assert_eq!(found.unwrap().0, theirs);
    assert_eq!(n, 1, "forgotten: asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_and_directories_others_made_are_not_known() {
    let cluster = long_ttl();
    let a = cluster.client();
    let b = cluster.client();
    cluster.wait_for_pools(&a).await;
    let d = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    a.create(ROOT, "m", 0o644).await.unwrap();
    a.rename(ROOT, "m", d, "moved", false).await.unwrap();
    let (found, _) = cluster.messages_during(&a, a.lookup(d, "moved")).await;
    found.unwrap();
    a.rename(d, "moved", d, "again", false).await.unwrap();
    a.lookup(d, "again").await.unwrap();

    // b only sees the directory a made: it asks.
    let (missing, n) = cluster.messages_during(&b, b.lookup(d, "nothing")).await;
    assert_eq!(missing.unwrap_err().errno, Errno::ENOENT);
    assert_eq!(n, 1);

    // A directory a made and b filled before a's first change in it.
    let e = a.mkdir(ROOT, "e", 0o755).await.unwrap().handle;
    b.create(e, "x", 0o644).await.unwrap();
    a.create(e, "y", 0o644).await.unwrap();
    a.lookup(e, "x").await.unwrap();
}

#[test]
fn a_create_without_o_excl_through_the_mount_opens_what_another_client_made() {
    let mut cluster = long_ttl();
    let mnt = cluster.mount();
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("mine"), b"mine").unwrap();

    // Another client makes "theirs" with data, after the mount's last
    // change in the directory: the mount's client still holds that the
    // directory has only "mine".
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let other = cluster.client();
        let (dir, _) = other.resolve("/d").await.unwrap();
        let h = other.create(dir, "theirs", 0o644).await.unwrap().handle;
        other
            .write(h, 0, Bytes::from_static(b"their data"))
            .await
            .unwrap();
        other.flush(h).await.unwrap();
    });

    // O_CREAT without O_EXCL: the existing file, untouched.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(d.join("theirs"))
        .unwrap();
    let mut text = String::new();
    f.read_to_string(&mut text).unwrap();
    assert_eq!(text, "their data");
    f.write_all(b"!").unwrap();
    drop(f);
    assert_eq!(std::fs::read(d.join("theirs")).unwrap(), b"their data!");

    // With O_EXCL: EEXIST, as for any existing name.
    let e = mnt.join("e");
    std::fs::create_dir(&e).unwrap();
    std::fs::write(e.join("mine"), b"mine").unwrap();
    rt.block_on(async {
        let other = cluster.client();
        let (dir, _) = other.resolve("/e").await.unwrap();
        other.create(dir, "late", 0o644).await.unwrap();
    });
    let err = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(e.join("late"))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    let mut names: Vec<String> = std::fs::read_dir(&e)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["late", "mine"]);
}

/// A directory another client made, known from this client's first create
/// there, answers no lookup until this client holds its delegation: the
/// other client's next file (an MPI rank's, made before a barrier) is
/// found at once, even with a TTL of a minute. Delegations are off here,
/// so it never is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_known_from_another_clients_making_hides_no_name() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("cache_ttl_ms=60000")
        .set("dir_delegations=false")
        .start();
    let a = cluster.client();
    let b = cluster.client();
    let d = a.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    b.create(d, "from-b", 0o644).await.unwrap();
    a.create(d, "from-a", 0o644).await.unwrap();
    let (h, _) = b
        .lookup(d, "from-a")
        .await
        .expect("the other client's file");
    assert_eq!(h, a.lookup(d, "from-a").await.unwrap().0);
}
