//! Message accounting of the baseline protocol ([Carns 2009], section II), counted
//! by the servers themselves: on n servers, create costs n+3 client messages,
//! stat n+1 and remove n+2; mkdir and symlink cost 2.

use shoal_proto::handle::ROOT;
use shoal_tests::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_create_stat_remove_cost_n_plus_3_1_2() {
    let cluster = Cluster::builder().servers(4).baseline().start();
    let client = cluster.uncached_client();
    client.ping_all().await.unwrap();
    let n = 4;

    let (attr, create) = cluster
        .messages_during(&client, client.create(ROOT, "f", 0o644))
        .await;
    let h = attr.unwrap().handle;
    assert_eq!(create, n + 3, "create");

    let (got, stat) = cluster.messages_during(&client, client.getattr(h)).await;
    assert_eq!(got.unwrap().size, 0);
    assert_eq!(stat, n + 1, "stat");

    let (removed, remove) = cluster
        .messages_during(&client, client.unlink(ROOT, "f"))
        .await;
    removed.unwrap();
    assert_eq!(remove, n + 2, "remove");

    let (made, mkdir) = cluster
        .messages_during(&client, client.mkdir(ROOT, "d", 0o755))
        .await;
    made.unwrap();
    // The object's reply carries its record: no getattr after the entry.
    assert_eq!(mkdir, 2, "mkdir: the object, then its entry");
    let (made, symlink) = cluster
        .messages_during(&client, client.symlink(ROOT, "l", "d"))
        .await;
    assert_eq!(made.unwrap().size, 1);
    assert_eq!(symlink, 2, "symlink: the object, then its entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_counts_syncs_for_modifying_requests() {
    let cluster = Cluster::builder().servers(2).baseline().start();
    let client = cluster.client();
    client.create(ROOT, "a", 0o644).await.unwrap();
    let mut syncs = 0;
    for s in cluster.server_ids() {
        let stats = client.server_stats(s).await.unwrap();
        syncs += stats.kv_syncs;
        for op in &stats.ops {
            if ["create_object", "create_datafiles", "set_dist", "crdirent"]
                .contains(&op.op.as_str())
            {
                assert_eq!(
                    op.syncs, op.requests,
                    "baseline: one sync per modifying request ({})",
                    op.op
                );
            }
            if ["lookup", "getattr", "stats", "ping"].contains(&op.op.as_str()) {
                assert_eq!(op.syncs, 0, "{} must not sync", op.op);
            }
        }
    }
    assert!(
        syncs >= 5,
        "create on 2 servers syncs at least 5 times, saw {syncs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_fetches_entries_in_batches() {
    let cluster = Cluster::builder()
        .servers(2)
        .baseline()
        .set("readdir_batch=100")
        .start();
    let client = cluster.client();
    let dir = client.mkdir(ROOT, "many", 0o755).await.unwrap().handle;
    futures::future::try_join_all((0..450).map(|i| {
        let c = client.clone();
        async move { c.create(dir, &format!("f{i:04}"), 0o644).await }
    }))
    .await
    .unwrap();
    let (entries, messages) = cluster
        .messages_during(&client, client.readdir_all(dir))
        .await;
    let entries = entries.unwrap();
    assert_eq!(entries.len(), 450);
    let hash = |e: &shoal_client::DirEntry| shoal_proto::partitions::name_hash(&e.name);
    assert!(
        entries.windows(2).all(|w| hash(&w[0]) < hash(&w[1])),
        "the names' hash order"
    );
    assert_eq!(messages, 5, "450 entries in batches of 100");
}
