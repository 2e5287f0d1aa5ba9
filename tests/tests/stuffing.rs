//! Stuffing ([Carns 2009], section III.B): a new file has one datafile, on its
//! metafile's server, until something goes past its first strip; then
//! `unstuff` gives it the rest (from the precreate pools) without moving the
//! first strip. A stuffed file's stat is one message and its remove needs no
//! other server.
//!
//! Writes here take the direct path (`write_threshold = 0`): the tests count
//! its messages and read what other clients wrote without their close.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use shoal_client::Client;
use shoal_proto::handle::{server_of, ROOT};
use shoal_tests::{pattern, Cluster};

const STRIP: u64 = 65536;

/// Writes `data` at `offset` of the model `file`, growing it with zeros.
fn model_write(file: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if file.len() < offset + data.len() {
        file.resize(offset + data.len(), 0);
    }
    file[offset..offset + data.len()].copy_from_slice(data);
}

/// Messages a small file costs from create to remove (create, small write,
/// stat, remove) with every technique on and `colocate` as given.
async fn small_file_costs(colocate: bool) -> [u64; 4] {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(4)
        .set(&format!("colocate={colocate}"))
        .start();
    let client = cluster.uncached_client();
    client.ping_all().await.unwrap();
    cluster.wait_for_pools(&client).await;

    let objects = client.statfs().await.unwrap().objects;
    let (attr, create) = cluster
        .messages_during(&client, client.create(ROOT, "small", 0o644))
        .await;
    let h = attr.unwrap().handle;
    assert_eq!(
        client.statfs().await.unwrap().objects,
        objects + 2,
        "a stuffed file is a metafile and one datafile"
    );
    let layout = client.layout(h).await.unwrap();
    assert_eq!(layout.datafiles.len(), 1);
    assert_eq!(
        layout.datafiles[0].1,
        server_of(h),
        "stuffed next to its metafile"
    );
    if colocate {
        assert_eq!(
            server_of(h),
            server_of(ROOT),
            "metafile on its directory's server"
        );
    }

    // Within the first strip the layout this client saw at create is right
    // whatever its age: the write is one (eager) message.
    let (written, write) = cluster
        .messages_during(
            &client,
            client.write(h, 0, Bytes::from_static(b"hello, stuffed world")),
        )
        .await;
    written.unwrap();
    let (got, stat) = cluster.messages_during(&client, client.getattr(h)).await;
    assert_eq!(got.unwrap().size, 20);

    let (removed, remove) = cluster
        .messages_during(&client, client.unlink(ROOT, "small"))
        .await;
    removed.unwrap();
    assert_eq!(client.statfs().await.unwrap().objects, objects, "all gone");
    [create, write, stat, remove]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_on_as_in_carns_2009_create_2_stat_1_remove_2() {
    // create + entry; eager write; stat answered with the stuffed size;
    // entry + metafile (its server removes the stuffed datafile with it).
    assert_eq!(small_file_costs(false).await, [2, 1, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_colocate_create_and_remove_are_one_message_each() {
    assert_eq!(small_file_costs(true).await, [1, 1, 1, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuffing_only_stat_is_1_and_unstuff_creates_the_datafiles_itself() {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(4)
        .baseline()
        .set("stuffing=true")
        .set(&format!("strip_size={STRIP}"))
        .start();
    let client = cluster.uncached_client();
    client.ping_all().await.unwrap();
    let (attr, create) = cluster
        .messages_during(&client, client.create(ROOT, "f", 0o644))
        .await;
    let h = attr.unwrap().handle;
    assert_eq!(create, 2, "create (no pools needed for a stuffed file)");
    client
        .write(h, 10, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    let (got, stat) = cluster.messages_during(&client, client.getattr(h)).await;
    assert_eq!(got.unwrap().size, 13);
    assert_eq!(stat, 1, "stat of a stuffed file");

    // Past the first strip: the server asks each peer for a datafile.
    let data = pattern(3, 5 * STRIP as usize);
    client
        .write(h, 100, Bytes::from(data.clone()))
        .await
        .unwrap();
    let layout = client.layout(h).await.unwrap();
    let servers: BTreeSet<u32> = layout.datafiles.iter().map(|(_, s)| *s).collect();
    assert_eq!(servers, BTreeSet::from([0, 1, 2, 3]));
    let mut model = vec![0u8; 10];
    model.extend_from_slice(b"abc");
    model_write(&mut model, 100, &data);
    assert_eq!(client.read(h, 0, model.len() + 50).await.unwrap(), model);
    assert_eq!(client.getattr(h).await.unwrap().size, model.len() as u64);
    // No CreateDatafiles were left unused: 3 peers, one datafile each.
    let created: u64 = cluster.requests_of(&client, "create_datafiles").await;
    assert_eq!(created, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_past_the_first_strip_unstuffs_with_identical_content() {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(4)
        .set(&format!("strip_size={STRIP}"))
        .start();
    let client = cluster.client();
    let h = client.create(ROOT, "grow", 0o644).await.unwrap().handle;
    let first = pattern(1, STRIP as usize - 5);
    client
        .write(h, 0, Bytes::from(first.clone()))
        .await
        .unwrap();
    let stuffed = client.layout(h).await.unwrap();
    assert_eq!(
        stuffed.datafiles.len(),
        1,
        "still stuffed: within the first strip"
    );
    assert_eq!(client.read(h, 0, 2 * STRIP as usize).await.unwrap(), first);

    // 5 bytes of the first strip and into the next ones.
    let more = pattern(2, 3 * STRIP as usize);
    let mut model = first.clone();
    model_write(&mut model, STRIP as usize - 5, &more);
    client
        .write(h, STRIP - 5, Bytes::from(more.clone()))
        .await
        .unwrap();
    let layout = client.layout(h).await.unwrap();
    assert_eq!(layout.datafiles.len(), 4);
    assert_eq!(
        layout.datafiles[0], stuffed.datafiles[0],
        "datafile 0 stays: the first strip does not move"
    );
    let servers: BTreeSet<u32> = layout.datafiles.iter().map(|(_, s)| *s).collect();
    assert_eq!(servers.len(), 4, "4 datafiles on 4 servers: {layout:?}");
    assert_eq!(client.read(h, 0, model.len() + 1).await.unwrap(), model);

    // A fresh client sees the same layout, size and bytes.
    let other = cluster.client();
    assert_eq!(other.layout(h).await.unwrap(), layout);
    assert_eq!(other.getattr(h).await.unwrap().size, model.len() as u64);
    assert_eq!(other.read(h, 0, model.len()).await.unwrap(), model);

    // Truncating beyond the first strip unstuffs too; shrinking keeps data.
    let t = client.create(ROOT, "trunc", 0o644).await.unwrap().handle;
    client
        .write(t, 0, Bytes::from_static(b"xyz"))
        .await
        .unwrap();
    client.truncate(t, 2).await.unwrap();
    assert_eq!(client.layout(t).await.unwrap().datafiles.len(), 1);
    client.truncate(t, 3 * STRIP + 7).await.unwrap();
    assert_eq!(client.layout(t).await.unwrap().datafiles.len(), 4);
    let read = other.read(t, 0, 4 * STRIP as usize).await.unwrap();
    assert_eq!(read.len() as u64, 3 * STRIP + 7);
    assert_eq!(&read[..2], b"xy");
    assert!(read[2..].iter().all(|b| *b == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_saw_the_stuffed_layout_reads_right_after_the_unstuff() {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(4)
        .set(&format!("strip_size={STRIP}"))
        .start();
    let writer = cluster.client();
    let reader = cluster.client();
    let h = writer.create(ROOT, "f", 0o644).await.unwrap().handle;
    let small = pattern(5, 1000);
    writer
        .write(h, 0, Bytes::from(small.clone()))
        .await
        .unwrap();

    // The reader caches the stuffed layout and the small size.
    assert_eq!(reader.getattr(h).await.unwrap().size, 1000);
    assert_eq!(reader.layout(h).await.unwrap().datafiles.len(), 1);
    assert_eq!(reader.read(h, 0, 1000).await.unwrap(), small);

    let big = pattern(6, 4 * STRIP as usize);
    writer
        .write(h, 500, Bytes::from(big.clone()))
        .await
        .unwrap();
    // Others see it after the writer's close (close-to-open).
    writer.flush(h).await.unwrap();
    let mut model = small.clone();
    model_write(&mut model, 500, &big);

    // Right away: a read past the first strip looks at the layout again.
    assert_eq!(reader.read(h, 0, model.len() + 10).await.unwrap(), model);
    // Within the first strip the old layout is right anyway.
    assert_eq!(reader.read(h, 0, 100).await.unwrap(), model[..100]);
    // Once the attribute TTL has passed, size and layout are the new ones.
    tokio::time::sleep(Duration::from_millis(
        cluster.config().settings.cache_ttl_ms + 50,
    ))
    .await;
    assert_eq!(reader.getattr(h).await.unwrap().size, model.len() as u64);
    assert_eq!(
        reader.layout(h).await.unwrap(),
        writer.layout(h).await.unwrap()
    );
    // The reader writing past the first strip with what it knows is fine too.
    reader
        .write(h, 6 * STRIP, Bytes::from_static(b"tail"))
        .await
        .unwrap();
    model_write(&mut model, 6 * STRIP as usize, b"tail");
    assert_eq!(writer.read(h, 0, model.len() + 10).await.unwrap(), model);
}

async fn concurrent_unstuffs(cluster: &Cluster) {
    let setup = cluster.client();
    let h = setup.create(ROOT, "shared", 0o644).await.unwrap().handle;
    let head = pattern(9, 4000);
    setup.write(h, 0, Bytes::from(head.clone())).await.unwrap();
    let clients: Vec<Client> = (0..8).map(|_| cluster.client()).collect();
    for c in &clients {
        // Every writer starts from the stuffed layout.
        assert_eq!(c.layout(h).await.unwrap().datafiles.len(), 1);
    }
    let region = 40_000usize;
    let results = futures::future::join_all(clients.iter().enumerate().map(|(i, c)| {
        let data = Bytes::from(pattern(100 + i as u64, region));
        async move {
            c.write(h, STRIP + (i * region) as u64, data).await?;
            c.layout(h).await
        }
    }))
    .await;
    let layouts: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
    assert!(
        layouts.windows(2).all(|w| w[0] == w[1]),
        "one layout: {layouts:?}"
    );
    assert_eq!(layouts[0].datafiles.len(), 4);
    let fresh = cluster.client();
    assert_eq!(fresh.layout(h).await.unwrap(), layouts[0]);
    let mut model = head.clone();
    for i in 0..8 {
        model_write(
            &mut model,
            STRIP as usize + i * region,
            &pattern(100 + i as u64, region),
        );
    }
    assert_eq!(fresh.read(h, 0, model.len() + 10).await.unwrap(), model);
    assert_eq!(fresh.getattr(h).await.unwrap().size, model.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_writers_past_the_first_strip_agree_on_one_layout() {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(4)
        .set(&format!("strip_size={STRIP}"))
        .start();
    concurrent_unstuffs(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_unstuffs_without_precreate_agree_too() {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(4)
        .set("precreate=false")
        .set(&format!("strip_size={STRIP}"))
        .start();
    concurrent_unstuffs(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_colocate_a_lookup_brings_the_attributes_and_entry_changes_refresh_the_directory() {
    // Caches that outlive the test, so that counts do not depend on timing.
    // Without delegations: one granted in the background after the first
    // create would have the next answered by the client, which then sends
    // it behind the stat of the directory this counts (a timing-dependent
    // extra message).
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(4)
        .set("cache_ttl_ms=600000")
        .set("dir_delegations=false")
        .start();
    let writer = cluster.client();
    writer.ping_all().await.unwrap();
    cluster.wait_for_pools(&writer).await;
    let dir = writer.mkdir(ROOT, "d", 0o755).await.unwrap();
    let h = writer.create(dir.handle, "f", 0o644).await.unwrap().handle;
    writer
        .write(h, 0, Bytes::from_static(b"twelve bytes"))
        .await
        .unwrap();

    // A lookup is also the stat: the file's record and its stuffed size
    // come back from the directory's server in one message.
    let reader = cluster.client();
    let (attr, lookup) = cluster
        .messages_during(&reader, reader.lookup_attr(dir.handle, "f"))
        .await;
    let attr = attr.unwrap();
    assert_eq!((attr.handle, attr.size), (h, 12));
    assert_eq!(lookup, 1, "lookup with attributes");
    let (_, again) = cluster.messages_during(&reader, reader.getattr(h)).await;
    assert_eq!(again, 0, "cached by the lookup");

    // The directory's new mtime comes back with each create and remove: the
    // writer's next stat of it is answered from its cache, and is current.
    let before = writer.getattr(dir.handle).await.unwrap().mtime_ns;
    writer.create(dir.handle, "g", 0o644).await.unwrap();
    let (after_create, stat) = cluster
        .messages_during(&writer, writer.getattr(dir.handle))
        .await;
    let after_create = after_create.unwrap().mtime_ns;
    assert_eq!(stat, 0, "directory attributes refreshed by the create");
    assert!(after_create > before, "mtime moved on with the create");
    writer.unlink(dir.handle, "f").await.unwrap();
    let (after_remove, stat) = cluster
        .messages_during(&writer, writer.getattr(dir.handle))
        .await;
    assert_eq!(stat, 0, "directory attributes refreshed by the remove");
    assert!(after_remove.unwrap().mtime_ns > after_create);
}
