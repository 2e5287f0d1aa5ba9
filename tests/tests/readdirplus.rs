//! Readdirplus ([Carns 2009], section III-E): a listing with attributes costs one
//! readdir per batch of entries, at most one listattr per server and at most
//! one get_sizes per server per batch, not a getattr per entry; with the
//! switch off it falls back to one getattr per entry. The FUSE mount answers
//! `ls -l` with it.
//!
//! Writes here take the direct path (`write_threshold = 0`): the tests count
//! its messages and read what other clients wrote without their close.

use std::collections::BTreeMap;
use std::process::Command;

use bytes::Bytes;
use futures::StreamExt;
use shoal_client::Client;
use shoal_proto::handle::ROOT;
use shoal_tests::{shoal_bin, Cluster};

/// Files in the big directory (12,000 in `shoal bench ls`; fewer here so a
/// debug build creates them quickly with the baseline create).
const FILES: usize = 3000;
const SERVERS: u64 = 4;
const BATCH: u64 = 512;
/// Small strips so that a few KiB already spread over several datafiles.
const STRIP: u64 = 4096;
/// Creates and writes in flight at once.
const IN_FLIGHT: usize = 64;

fn name(i: usize) -> String {
    format!("f{i:05}")
}

/// Every 5th file has data, sizes from 1 byte to past four strips (striped
/// over every datafile); the rest are empty.
fn size_of(i: usize) -> u64 {
    if i.is_multiple_of(5) {
        (i as u64 * 37) % (5 * STRIP) + 1
    } else {
        0
    }
}

/// Creates `n` files in a new directory `dir`, writing `size_of(i)` bytes.
async fn populate(client: &Client, dir: &str, n: usize) -> u64 {
    let d = client.mkdir(ROOT, dir, 0o755).await.unwrap().handle;
    let mut made = futures::stream::iter((0..n).map(|i| {
        let c = client.clone();
        async move {
            let h = c.create(d, &name(i), 0o644).await?.handle;
            let size = size_of(i);
            if size > 0 {
                c.write(h, 0, Bytes::from(vec![b'x'; size as usize]))
                    .await?;
            }
            Ok::<_, shoal_client::ShoalError>(())
        }
    }))
    .buffer_unordered(IN_FLIGHT);
    while let Some(r) = made.next().await {
        r.unwrap();
    }
    // The buffered writes go now, not as background sends in what a test counts.
    client.flush_all().await.unwrap();
    d
}

/// Requests per operation, summed over the servers, while `f` ran.
async fn ops_during<F: std::future::Future>(
    cluster: &Cluster,
    client: &Client,
    f: F,
) -> (F::Output, BTreeMap<String, u64>) {
    let before = cluster.requests(client).await;
    let out = f.await;
    let after = cluster.requests(client).await;
    let mut ops = BTreeMap::new();
    for (key, n) in after {
        let was = before.get(&key).copied().unwrap_or(0);
        *ops.entry(key.1).or_insert(0) += n - was;
    }
    ops.retain(|_, n| *n > 0);
    (out, ops)
}

fn check_listing(listed: &[(shoal_client::DirEntry, shoal_client::Attr)], n: usize) {
    assert_eq!(listed.len(), n, "every entry is listed");
    // In the names' hash order (server/src/keys.rs).
    let mut listed: Vec<_> = listed.iter().collect();
    listed.sort_by(|x, y| x.0.name.cmp(&y.0.name));
    for (i, (e, a)) in listed.into_iter().enumerate() {
        assert_eq!(e.name, name(i), "each name once");
        assert_eq!(a.handle, e.handle);
        assert_eq!(a.size, size_of(i), "size of {}", e.name);
        assert_eq!(a.mode, 0o644);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdirplus_costs_a_few_messages_per_batch() {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(SERVERS as u32)
        .set(&format!("readdir_batch={BATCH}"))
        .set(&format!("strip_size={STRIP}"))
        .set("sync=none")
        .start();
    let started = std::time::Instant::now();
    let dir = populate(&cluster.client(), "big", FILES).await;
    eprintln!("created {FILES} files in {:?}", started.elapsed());

    let client = cluster.uncached_client();
    client.ping_all().await.unwrap();
    let (listed, ops) = ops_during(&cluster, &client, client.readdir_plus_all(dir)).await;
    let listed = listed.unwrap();
    check_listing(&listed, FILES);

    // The bound: per batch of entries one readdir, at most one listattr per
    // server and at most one get_sizes per server; nothing else.
    let batches = (FILES as u64).div_ceil(BATCH);
    let total: u64 = ops.values().sum();
    eprintln!("readdirplus of {FILES} entries: {ops:?}, {total} messages");
    assert_eq!(ops.get("readdir"), Some(&batches), "{ops:?}");
    let listattr = ops.get("listattr").copied().unwrap_or(0);
    let get_sizes = ops.get("get_sizes").copied().unwrap_or(0);
    assert!(
        (batches..=SERVERS * batches).contains(&listattr),
        "1..=4 listattr per batch: {ops:?}"
    );
    assert!(
        get_sizes <= SERVERS * batches,
        "<= 4 get_sizes per batch: {ops:?}"
    );
    assert_eq!(total, batches + listattr + get_sizes, "only these: {ops:?}");
    assert!(total <= (1 + 2 * SERVERS) * batches);
    assert!(total * 20 < FILES as u64, "far fewer than one per file");

    // One batch through the public per-batch call, with a removed entry
    // left out (in listing order: the names' hash order).
    let order: Vec<&str> = listed.iter().map(|(e, _)| e.name.as_str()).collect();
    client.unlink(dir, order[1]).await.unwrap();
    let (first, done) = client.readdir_plus(dir, "", 4).await.unwrap();
    assert!(!done);
    let names: Vec<&str> = first.iter().map(|(e, _)| e.name.as_str()).collect();
    assert_eq!(names, [order[0], order[2], order[3], order[4]]);
    let number: usize = order[0][1..].parse().unwrap();
    assert_eq!(first[0].1.size, size_of(number));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_readdirplus_falls_back_to_a_getattr_per_entry() {
    let cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(SERVERS as u32)
        .baseline()
        .set(&format!("readdir_batch={BATCH}"))
        .set(&format!("strip_size={STRIP}"))
        .set("sync=none")
        .start();
    let dir = populate(&cluster.client(), "big", FILES).await;
    let client = cluster.uncached_client();
    client.ping_all().await.unwrap();
    let (listed, ops) = ops_during(&cluster, &client, client.readdir_plus_all(dir)).await;
    check_listing(&listed.unwrap(), FILES);
    let total: u64 = ops.values().sum();
    eprintln!("baseline readdirplus of {FILES} entries: {ops:?}, {total} messages");
    assert_eq!(ops.get("listattr"), None, "no listattr when switched off");
    assert_eq!(ops.get("getattr"), Some(&(FILES as u64)));
    assert!(
        total >= FILES as u64,
        "at least one message per file: {total}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_l_on_the_mount_shows_every_size() {
    let mut cluster = Cluster::builder()
        .set("write_threshold=0")
        .servers(SERVERS as u32)
        .set(&format!("strip_size={STRIP}"))
        .set("sync=none")
        .start();
    let n = 200;
    populate(&cluster.client(), "two-hundred", n).await;
    let mnt = cluster.mount();
    let out = Command::new("timeout")
        .args(["120", "ls", "-l", "--time-style=+"])
        .arg(mnt.join("two-hundred"))
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ls failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut seen = 0;
    for line in text.lines().filter(|l| l.starts_with('-')) {
        // -rw-r--r-- 1 uid gid SIZE  NAME (empty time style)
        let fields: Vec<&str> = line.split_whitespace().collect();
        let file = fields.last().unwrap();
        let i: usize = file[1..].parse().unwrap();
        assert_eq!(fields[4].parse::<u64>().unwrap(), size_of(i), "{line}");
        seen += 1;
    }
    assert_eq!(seen, n, "{text}");

    // `shoal lsplus -l` prints exactly what `shoal ls -l` does.
    let shoal = |tool: &str| {
        let out = Command::new("timeout")
            .arg("120")
            .arg(shoal_bin())
            .args([tool, "-l", "--config"])
            .arg(cluster.config_path())
            .arg("/two-hundred")
            .output()
            .unwrap();
        assert!(out.status.success(), "shoal {tool}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let plus = shoal("lsplus");
    assert_eq!(plus.lines().count(), n);
    assert_eq!(plus, shoal("ls"));
}
