//! The `no_metafile` hint ([Kuhn 2008]): in such a directory a file is one
//! datafile named directly by its entry. Create, stat, list and remove skip
//! every metafile step; the file keeps its own attributes on the datafile;
//! it never stripes however far it grows; it stays readable wherever it is
//! renamed or moved; fsck counts it and reclaims it when orphaned.

use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, Cred, FileKind, SetAttr, SetTime};
use shoal_proto::handle::{server_of, ROOT};
use shoal_proto::hints::Hint;
use shoal_proto::msg::{
    Attributes, CreateObjectReply, CreateObjectRequest, GetAttrReply, GetAttrRequest, ObjectRecord,
    ScanReply, ScanRequest, ScanWhat,
};
use shoal_proto::{ops, Handle, ObjectKind};
use shoal_tests::{pattern, Cluster};

const STRIP: u64 = 65536;

/// Every object record on every server.
async fn all_objects(cluster: &Cluster, client: &Client) -> Vec<ObjectRecord> {
    let mut all = Vec::new();
    for s in cluster.server_ids() {
        let page: ScanReply = client
            .call::<ops::Scan>(
                s,
                &ScanRequest {
                    what: ScanWhat::ScanObjects as i32,
                    max: 4096,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(page.done, "test clusters hold few objects");
        all.extend(page.objects);
    }
    all
}

fn count(objects: &[ObjectRecord], kind: ObjectKind) -> usize {
    objects.iter().filter(|o| o.kind() == kind).count()
}

/// The record of `h` as its server stores it.
async fn record(client: &Client, h: Handle) -> ObjectRecord {
    let reply: GetAttrReply = client
        .call::<ops::GetAttr>(server_of(h), &GetAttrRequest { handle: h })
        .await
        .unwrap();
    reply.object.unwrap()
}

/// A directory `name` under the root with no_metafile set.
async fn no_metafile_dir(client: &Client, name: &str) -> Handle {
    let d = client.mkdir(ROOT, name, 0o755).await.unwrap().handle;
    client.set_hint(d, Hint::NoMetafile, "1").await.unwrap();
    d
}

/// Messages of create, stat and remove of one empty file in a no_metafile
/// directory, and checks that no metafile was made.
async fn create_stat_remove(cluster: &Cluster) -> [u64; 3] {
    let client = cluster.uncached_client();
    client.ping_all().await.unwrap();
    let dir = no_metafile_dir(&client, "nm").await;
    let before = all_objects(cluster, &client).await;

    let (attr, create) = cluster
        .messages_during(&client, client.create(dir, "f", 0o640))
        .await;
    let h = attr.unwrap().handle;
    let after = all_objects(cluster, &client).await;
    assert_eq!(after.len(), before.len() + 1, "one object per file");
    assert_eq!(
        count(&after, ObjectKind::Metafile),
        count(&before, ObjectKind::Metafile),
        "no metafile anywhere"
    );
    assert_eq!(record(&client, h).await.kind(), ObjectKind::Datafile);
    let entries = client.readdir_all(dir).await.unwrap();
    assert_eq!((entries[0].handle, entries[0].kind), (h, FileKind::File));

    let (got, stat) = cluster.messages_during(&client, client.getattr(h)).await;
    let got = got.unwrap();
    assert_eq!((got.kind, got.size, got.mode), (FileKind::File, 0, 0o640));

    let (removed, remove) = cluster
        .messages_during(&client, client.unlink(dir, "f"))
        .await;
    removed.unwrap();
    assert_eq!(all_objects(cluster, &client).await.len(), before.len());
    [create, stat, remove]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_create_2_stat_1_remove_2_and_no_metafile_anywhere() {
    // [Kuhn 2008]'s steps: create the datafile, add the entry naming it; get
    // the datafile's attributes; remove the entry, remove the datafile (the
    // entry says what it names, so no getattr first).
    let cluster = Cluster::builder().servers(4).baseline().start();
    assert_eq!(create_stat_remove(&cluster).await, [2, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_on_create_stat_remove_are_one_message_each() {
    // With colocate the directory's server makes the datafile and the entry
    // in one step, and removes both in one step.
    let cluster = Cluster::builder().servers(4).start();
    let client = cluster.client();
    cluster.wait_for_pools(&client).await;
    assert_eq!(create_stat_remove(&cluster).await, [1, 1, 1]);
}

/// Without colocate a file is made by `CreateObject`, whose reply leases
/// the datafile to its maker: the maker's stat asks nothing past the cache's
/// own timeout, and another client's write recalls the lease, so the
/// maker's next stat sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_maker_holds_a_lease_on_it_until_another_writes() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("colocate=false")
        .set("cache_ttl_ms=1")
        .start();
    let (a, b) = cluster.two_clients().await;
    let dir = no_metafile_dir(&a, "nm").await;
    let f = a.create(dir, "f", 0o644).await.unwrap().handle;
    assert_eq!(record(&a, f).await.kind(), ObjectKind::Datafile);
    // Past the 1 ms an unleased attribute is kept.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (got, stat) = cluster.messages_during(&a, a.getattr(f)).await;
    assert_eq!(got.unwrap().size, 0);
    assert_eq!(stat, 0, "leased since its create");

    b.write(f, 0, Bytes::from(pattern(3, 7000))).await.unwrap();
    b.fsync(f).await.unwrap();
    assert_eq!(
        a.getattr(f).await.unwrap().size,
        7000,
        "the write recalled it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_saw_the_hints_late_still_follows_them() {
    for baseline in [true, false] {
        let cluster = Cluster::builder().servers(3).baseline_if(baseline).start();
        let setter = cluster.client();
        let late = cluster.client();
        let dir = setter.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
        // `late` learns the directory without hints, then they change.
        late.getattr(dir).await.unwrap();
        setter.set_hint(dir, Hint::NoMetafile, "1").await.unwrap();
        let h = late.create(dir, "a", 0o644).await.unwrap().handle;
        assert_eq!(record(&late, h).await.kind(), ObjectKind::Datafile);
        let sub = late.mkdir(dir, "sub", 0o755).await.unwrap().handle;
        assert!(late.hints(sub).await.unwrap().no_metafile, "copied");
        // And back: with the hint cleared, files have metafiles again.
        setter.unset_hint(dir, Hint::NoMetafile).await.unwrap();
        let h = late.create(dir, "b", 0o644).await.unwrap().handle;
        assert_eq!(record(&late, h).await.kind(), ObjectKind::Metafile);
        assert_eq!(
            all_objects(&cluster, &late)
                .await
                .iter()
                .filter(|o| o.kind() == ObjectKind::Metafile)
                .count(),
            1,
            "the refused attempts left nothing behind (baseline {baseline})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chmod_chown_and_utimes_are_stored_on_the_datafile() {
    let cluster = Cluster::builder().servers(3).baseline().start();
    let client = cluster.uncached_client();
    let dir = no_metafile_dir(&client, "nm").await;
    let everyone = SetAttr {
        mode: Some(0o777),
        ..Default::default()
    };
    client.setattr(dir, &everyone).await.unwrap();
    let user = client.with_cred(Cred::new(1234, 567));
    let h = user.create(dir, "f", 0o600).await.unwrap().handle;
    let a = client.getattr(h).await.unwrap();
    assert_eq!((a.mode, a.uid, a.gid), (0o600, 1234, 567), "the creator's");

    let set = SetAttr {
        mode: Some(0o751),
        uid: Some(42),
        gid: Some(43),
        atime: Some(SetTime::At(1_000_000_000)),
        mtime: Some(SetTime::At(2_000_000_000)),
        ..Default::default()
    };
    client.setattr(h, &set).await.unwrap();
    // Another client, and the listing path, see what was stored.
    let other = cluster.uncached_client();
    for a in [
        other.getattr(h).await.unwrap(),
        other.readdir_plus_all(dir).await.unwrap()[0].1.clone(),
    ] {
        assert_eq!((a.mode, a.uid, a.gid), (0o751, 42, 43));
        assert_eq!((a.atime_ns, a.mtime_ns), (1_000_000_000, 2_000_000_000));
    }
    let rec = record(&client, h).await;
    assert_eq!(rec.kind(), ObjectKind::Datafile);
    assert_eq!(rec.attrs.unwrap().mode, 0o751, "on the datafile itself");

    // Data written after the utimes is the newer mtime, as for any file.
    client.write(h, 0, Bytes::from_static(b"x")).await.unwrap();
    client.flush(h).await.unwrap();
    let a = other.getattr(h).await.unwrap();
    assert!(a.mtime_ns > 2_000_000_000);
    assert_eq!(a.size, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_past_a_strip_keeps_one_datafile() {
    for baseline in [true, false] {
        let cluster = Cluster::builder()
            .servers(4)
            .set(&format!("strip_size={STRIP}"))
            .baseline_if(baseline)
            .start();
        let client = cluster.client();
        let dir = no_metafile_dir(&client, "nm").await;
        let h = client.create(dir, "big", 0o644).await.unwrap().handle;
        let data = pattern(9, 5 * STRIP as usize + 123);
        client
            .write(h, 1000, Bytes::from(data.clone()))
            .await
            .unwrap();
        // Others see it after the writer's close (close-to-open).
        client.flush(h).await.unwrap();
        let mut model = vec![0u8; 1000];
        model.extend_from_slice(&data);
        let fresh = cluster.uncached_client();
        assert_eq!(
            fresh.getattr(h).await.unwrap().size,
            model.len() as u64,
            "baseline {baseline}"
        );
        assert_eq!(fresh.read(h, 0, model.len() + 10).await.unwrap(), model);
        let layout = fresh.layout(h).await.unwrap();
        assert!(layout.no_metafile);
        assert_eq!(layout.datafiles, vec![(h, server_of(h))], "never stripes");
        fresh.truncate(h, 10).await.unwrap();
        assert_eq!(fresh.read(h, 0, 100).await.unwrap(), model[..10]);
        fresh.fsync(h).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_or_moved_it_stays_a_readable_file_without_metafile() {
    let cluster = Cluster::builder().servers(3).baseline().start();
    let client = cluster.client();
    let nm = no_metafile_dir(&client, "nm").await;
    let plain = client.mkdir(ROOT, "plain", 0o755).await.unwrap().handle;
    let h = client.create(nm, "a", 0o644).await.unwrap().handle;
    client
        .write(h, 0, Bytes::from_static(b"payload"))
        .await
        .unwrap();
    client.flush(h).await.unwrap();

    client.rename(nm, "a", nm, "b", false).await.unwrap();
    client.rename(nm, "b", plain, "c", false).await.unwrap();
    let fresh = cluster.uncached_client();
    let (found, kind) = fresh.lookup(plain, "c").await.unwrap();
    assert_eq!((found, kind), (h, FileKind::File));
    assert_eq!(fresh.read(h, 0, 100).await.unwrap(), &b"payload"[..]);
    assert!(fresh.layout(h).await.unwrap().no_metafile, "form unchanged");
    assert_eq!(record(&fresh, h).await.kind(), ObjectKind::Datafile);

    // A file with a metafile moved into the no_metafile directory keeps its
    // metafile; replacing one file by the other reclaims the replaced one.
    let m = client.create(plain, "m", 0o644).await.unwrap().handle;
    client.rename(plain, "m", nm, "m", false).await.unwrap();
    assert_eq!(record(&fresh, m).await.kind(), ObjectKind::Metafile);
    let objects = all_objects(&cluster, &fresh).await.len();
    client.rename(plain, "c", nm, "m", false).await.unwrap();
    assert_eq!(fresh.read(h, 0, 100).await.unwrap(), &b"payload"[..]);
    assert_eq!(
        all_objects(&cluster, &fresh).await.len(),
        objects - 4,
        "the replaced file's metafile and 3 datafiles are gone"
    );
    client.unlink(nm, "m").await.unwrap();
    assert_eq!(all_objects(&cluster, &fresh).await.len(), objects - 5);
}

/// Hard links to such a file name its datafile from several directories;
/// the datafile counts them and goes with the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_links_name_the_datafile_and_it_goes_with_the_last() {
    let cluster = Cluster::builder().servers(3).start();
    let client = cluster.client();
    let fresh = cluster.uncached_client();
    // Objects are counted: no pool refill may run meanwhile.
    cluster.wait_for_pools(&client).await;
    let nm = no_metafile_dir(&client, "nm").await;
    let plain = client.mkdir(ROOT, "plain", 0o755).await.unwrap().handle;
    let h = client.create(nm, "a", 0o644).await.unwrap().handle;
    client
        .write(h, 0, Bytes::from_static(b"data"))
        .await
        .unwrap();
    client.flush(h).await.unwrap();
    let objects = all_objects(&cluster, &fresh).await.len();
    assert_eq!(client.link(h, plain, "b").await.unwrap().nlink, 2);
    assert_eq!(client.link(h, nm, "c").await.unwrap().nlink, 3);
    assert_eq!(
        all_objects(&cluster, &fresh).await.len(),
        objects,
        "no new object"
    );
    assert_eq!(fresh.lookup(plain, "b").await.unwrap(), (h, FileKind::File));
    client.unlink(nm, "a").await.unwrap();
    client.unlink(nm, "c").await.unwrap();
    assert_eq!(fresh.getattr(h).await.unwrap().nlink, 1);
    assert_eq!(fresh.read(h, 0, 100).await.unwrap(), &b"data"[..]);
    assert_eq!(record(&fresh, h).await.kind(), ObjectKind::Datafile);
    client.unlink(plain, "b").await.unwrap();
    assert_eq!(all_objects(&cluster, &fresh).await.len(), objects - 1);
    let report = fresh.fsck(false, Duration::ZERO).await.unwrap();
    assert_eq!(report.problems(), 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_with_attributes_asks_each_datafile_once() {
    const FILES: usize = 60;
    let cluster = Cluster::builder().servers(4).baseline().start();
    let client = cluster.uncached_client();
    let dir = no_metafile_dir(&client, "nm").await;
    for i in 0..FILES {
        let h = client.create(dir, &format!("f{i}"), 0o644).await.unwrap();
        client
            .write(h.handle, 0, Bytes::from(vec![1u8; i]))
            .await
            .unwrap();
    }
    // The buffered writes go now, not as background sends in the count below.
    client.flush_all().await.unwrap();
    // Baseline: the entries, then one getattr per file (a metafile's file
    // costs one getattr and one get_sizes per server holding its datafiles).
    let (listed, messages) = cluster
        .messages_during(&client, client.readdir_plus_all(dir))
        .await;
    let listed = listed.unwrap();
    assert_eq!(listed.len(), FILES);
    assert!(listed
        .iter()
        .all(|(e, a)| a.size == e.name[1..].parse::<u64>().unwrap()));
    assert_eq!(messages, 1 + FILES as u64);

    // Readdirplus: the entries, then one listattr per server holding files.
    let cluster = Cluster::builder()
        .servers(4)
        .baseline()
        .set("readdirplus=true")
        .start();
    let client = cluster.uncached_client();
    let dir = no_metafile_dir(&client, "nm").await;
    for i in 0..FILES {
        client.create(dir, &format!("f{i}"), 0o644).await.unwrap();
    }
    let (listed, messages) = cluster
        .messages_during(&client, client.readdir_plus_all(dir))
        .await;
    assert_eq!(listed.unwrap().len(), FILES);
    assert_eq!(
        messages,
        1 + 4,
        "no get_sizes round: sizes come with records"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_counts_them_and_reclaims_an_orphaned_one() {
    let cluster = Cluster::builder().servers(3).baseline().start();
    let client = cluster.uncached_client();
    let dir = no_metafile_dir(&client, "nm").await;
    for i in 0..5 {
        let h = client.create(dir, &format!("f{i}"), 0o644).await.unwrap();
        client
            .write(h.handle, 0, Bytes::from(vec![7u8; 100_000]))
            .await
            .unwrap();
    }
    client.create(ROOT, "with-metafile", 0o644).await.unwrap();
    let clean = client.fsck(false, Duration::ZERO).await.unwrap();
    assert_eq!(clean.problems(), 0, "{clean:?}");
    assert_eq!(clean.no_metafile_files, 5);

    // A crash between the datafile and its entry leaves the datafile alone.
    let orphan: CreateObjectReply = client
        .call::<ops::CreateObject>(
            1,
            &CreateObjectRequest {
                kind: ObjectKind::Datafile as i32,
                attrs: Some(Attributes::default()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let found = client.fsck(true, Duration::ZERO).await.unwrap();
    assert_eq!(
        found.orphans,
        vec![(orphan.handle, ObjectKind::Datafile)],
        "{found:?}"
    );
    let after = client.fsck(false, Duration::ZERO).await.unwrap();
    assert_eq!((after.problems(), after.no_metafile_files), (0, 5));
    for i in 0..5 {
        let (h, _) = client.lookup(dir, &format!("f{i}")).await.unwrap();
        assert_eq!(client.read(h, 0, 200_000).await.unwrap().len(), 100_000);
    }
}
