//! Many creates in one directory at once (`Client::create_files`, the
//! server's `CreateFiles`): one message and one commit for all of them,
//! each name made or refused on its own, the result the same as creating
//! them one by one, seen at once by other clients, and a resend after a
//! crash answered whole from the reply cache.

use bytes::Bytes;
use shoal_client::{Attr, Client, Errno};
use shoal_proto::handle::{server_of, ROOT};
use shoal_proto::hints::Hint;
use shoal_tests::{
    across_a_crash, dir_on, entry_names, pattern, repair_to_zero, settled_fsck, Cluster,
};

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// Each name's errno, None where it was made.
fn errnos(made: &[Result<Attr, shoal_client::ShoalError>]) -> Vec<Option<Errno>> {
    made.iter()
        .map(|r| r.as_ref().err().map(|e| e.errno))
        .collect()
}

/// The `create_files` requests and the syncs they took, summed over the
/// servers.
async fn batches(cluster: &Cluster, client: &Client) -> (u64, u64) {
    let mut out = (0, 0);
    for s in cluster.server_ids() {
        let stats = client.server_stats(s).await.unwrap();
        for op in stats.ops.iter().filter(|o| o.op == "create_files") {
            out.0 += op.requests;
            out.1 += op.syncs;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_files_are_one_message_and_one_commit() {
    let cluster = Cluster::builder().servers(3).set("sync=full").start();
    let (a, b) = cluster.two_clients().await;
    let dir = dir_on(&a, 2, "d").await;
    let wanted = names("f", 300);

    let (made, messages) = cluster
        .messages_during(&a, a.create_files(dir, &wanted, 0o640))
        .await;
    let made = made.unwrap();
    assert_eq!(messages, 1, "300 creates in one message");
    assert_eq!(batches(&cluster, &a).await, (1, 1), "and one commit");
    assert_eq!(made.len(), 300);
    for (name, attr) in wanted.iter().zip(&made) {
        let attr = attr.as_ref().unwrap();
        assert_eq!(attr.mode, 0o640, "{name}");
        assert_eq!(attr.size, 0, "{name}");
        assert_eq!(server_of(attr.handle), 2, "{name} beside its directory");
    }

    // Another client sees them all, and each is an ordinary file.
    let mut listed = entry_names(&b, dir).await;
    listed.sort();
    let mut expected = wanted.clone();
    expected.sort();
    assert_eq!(listed, expected);
    let f7 = b.lookup(dir, "f7").await.unwrap().0;
    assert_eq!(f7, made[7].as_ref().unwrap().handle);
    b.write(f7, 0, Bytes::from(pattern(7, 100_000)))
        .await
        .unwrap();
    b.fsync(f7).await.unwrap();
    assert_eq!(
        a.read(f7, 0, 100_001).await.unwrap()[..],
        pattern(7, 100_000)[..],
        "written past the stuffed strip by another client"
    );
    let d = a.getattr(dir).await.unwrap();
    assert_eq!(d.nlink, 2, "files add no link to their directory");
    settled_fsck(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_name_is_made_or_refused_on_its_own() {
    let cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let dir = dir_on(&client, 1, "d").await;
    client.create(dir, "taken", 0o644).await.unwrap();
    let asked: Vec<String> = ["a", "taken", "b", "a", "no/slash", "", "c"]
        .iter()
        .map(|s| s.to_string())
        .collect();

    let made = client.create_files(dir, &asked, 0o600).await.unwrap();
    assert_eq!(
        errnos(&made),
        [
            None,
            Some(Errno::EEXIST),
            None,
            Some(Errno::EINVAL),
            Some(Errno::EINVAL),
            Some(Errno::EINVAL),
            None
        ]
    );
    let mut listed = entry_names(&client, dir).await;
    listed.sort();
    assert_eq!(listed, ["a", "b", "c", "taken"]);

    // Refused as a whole: a directory that is not there, or not one.
    let file = client.lookup(dir, "a").await.unwrap().0;
    let err = client.create_files(file, &asked, 0o600).await.unwrap_err();
    assert_eq!(err.errno, Errno::ENOTDIR);
    // No write permission: nothing is made.
    let stranger = client.with_cred(shoal_proto::Cred::new(4242, 4242));
    let err = stranger
        .create_files(dir, &names("x", 3), 0o600)
        .await
        .unwrap_err();
    assert_eq!(err.errno, Errno::EACCES);
    assert_eq!(entry_names(&client, dir).await.len(), 4);
    settled_fsck(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_a_batch_cannot_be_the_files_are_made_one_by_one() {
    // Without stuffing a new file takes datafiles from the pools: the
    // server refuses the batch and the client creates each file itself.
    let cluster = Cluster::builder().servers(3).set("stuffing=false").start();
    let client = cluster.client();
    cluster.wait_for_pools(&client).await;
    let dir = dir_on(&client, 0, "d").await;
    let wanted = names("g", 20);
    let (made, messages) = cluster
        .messages_during(&client, client.create_files(dir, &wanted, 0o644))
        .await;
    assert!(made.unwrap().iter().all(Result::is_ok));
    assert_eq!(messages, 21, "the refused batch, then one create each");
    assert_eq!(entry_names(&client, dir).await.len(), 20);

    // A no_metafile directory's files are one datafile each: batched.
    let lone = client.mkdir(ROOT, "lone", 0o755).await.unwrap().handle;
    client.set_hint(lone, Hint::NoMetafile, "1").await.unwrap();
    let (made, messages) = cluster
        .messages_during(&client, client.create_files(lone, &wanted, 0o644))
        .await;
    assert!(made.unwrap().iter().all(Result::is_ok));
    assert_eq!(messages, 1);
    settled_fsck(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_reply_died_with_its_server_is_answered_from_the_cache() {
    // The armed server's first change must be the batch: no pool refills.
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("sync=full")
        .set("precreate=false")
        .start();
    let client = cluster.client();
    let dir = dir_on(&client, 1, "d").await;
    client.create(dir, "f1", 0o644).await.unwrap();

    let c = client.clone();
    let made = across_a_crash(&mut cluster, &client, 1, async move {
        c.create_files(dir, &names("f", 5), 0o644).await
    })
    .await
    .unwrap();
    assert_eq!(
        errnos(&made),
        [None, Some(Errno::EEXIST), None, None, None],
        "the first copy's answers, not EEXIST for every name"
    );
    assert_eq!(entry_names(&client, dir).await.len(), 5);
    settled_fsck(&client).await;
    repair_to_zero(&client).await;
}
