//! A full data directory: one server's data lives on a 16 MiB tmpfs. Writing
//! until it is full gives the writer ENOSPC (not EIO, not a hang); afterwards
//! reads of everything stored, creates, stats and listings still work,
//! deleting a file frees room for new writes, and a restart of the server
//! finds everything that was stored.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_client::Client;
use shoal_proto::error::Errno;
use shoal_proto::handle::{server_of, Handle, ROOT};
use shoal_tests::{entry_names, Cluster};

/// Size of the tmpfs that holds the small server's data.
const TMPFS_MIB: u64 = 16;
const CHUNK: usize = 1 << 20;
/// Longest any one operation may take: a full disk must not look like a hang.
const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// A tmpfs mounted for the test, unmounted and removed on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(mib: u64) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!("shoal-enospc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs on {} failed",
            dir.display()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(131).wrapping_add(seed * 7919) >> 3) as u8)
        .collect()
}

async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(OP_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in {OP_TIMEOUT:?}"))
}

/// Creates `name`, `name.1`, ... in `dir` until one has its data on
/// `server`; the others are removed again.
async fn create_on(client: &Client, dir: Handle, name: &str, server: u32) -> Handle {
    for i in 0..16 {
        let n = if i == 0 {
            name.to_string()
        } else {
            format!("{name}.{i}")
        };
        let h = timed("create", client.create(dir, &n, 0o644))
            .await
            .unwrap_or_else(|e| panic!("create {n}: {e}"))
            .handle;
        let dist = client.distribution(h).await.unwrap();
        if dist.datafiles.iter().all(|d| server_of(*d) == server) {
            if i > 0 {
                client.rename(dir, &n, dir, name, false).await.unwrap();
            }
            return h;
        }
        client.unlink(dir, &n).await.unwrap();
    }
    panic!("no file of 16 landed on server {server}");
}

/// Makes directory `/name` on `server` (trying `name.1`, ... until one
/// lands there, then renaming it).
async fn mkdir_on(client: &Client, name: &str, server: u32) -> Handle {
    for i in 0..16 {
        let n = format!("{name}.{i}");
        let h = client.mkdir(ROOT, &n, 0o755).await.unwrap().handle;
        if server_of(h) == server {
            client.rename(ROOT, &n, ROOT, name, false).await.unwrap();
            return h;
        }
        client.rmdir(ROOT, &n).await.unwrap();
    }
    panic!("no directory of 16 landed on server {server}");
}

struct Stored {
    name: String,
    seed: u64,
    len: usize,
}

async fn verify(client: &Client, stored: &[Stored], when: &str) {
    for s in stored {
        let (h, _) = timed("resolve", client.resolve(&format!("/d/{}", s.name)))
            .await
            .unwrap_or_else(|e| panic!("{when}: resolve {}: {e}", s.name));
        let attr = client.getattr(h).await.unwrap();
        assert_eq!(attr.size, s.len as u64, "{when}: size of {}", s.name);
        let mut at = 0;
        while at < s.len {
            let n = CHUNK.min(s.len - at);
            let got = timed("read", client.read(h, at as u64, n))
                .await
                .unwrap_or_else(|e| panic!("{when}: read {}: {e}", s.name));
            let want = pattern(s.seed, s.len);
            assert!(
                got[..] == want[at..at + n],
                "{when}: bytes {at}..{} of {} differ",
                at + n,
                s.name
            );
            at += n;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_directory_is_enospc_for_the_writer_and_loses_nothing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let started = Instant::now();
    // Declared before the cluster so it is unmounted after the servers stop.
    let tmpfs = Tmpfs::mount(TMPFS_MIB);
    // Each write waited for, so that a write that returned stored its
    // bytes. With write-behind (the default) a 1 MiB write returns while on
    // its way: ENOSPC then reaches the writer at a later write and at fsync
    // and close, as NFS reports its unstable writes' errors
    // (`write_behind.rs`).
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("num_dfiles=1")
        .set("write_behind=0")
        .data_dir(1, tmpfs.path().join("server-1"))
        .start();
    let client = cluster.client();
    // The directory on the small server too: with `colocate` its files are
    // made there.
    let d = mkdir_on(&client, "d", 1).await;

    // Small (inline in the KV store) and large (local files) data on the
    // small server, fsync'ed.
    let mut stored = Vec::new();
    for (i, len) in [100usize, 1000, 5000, 300_000, 300_000, 700_000]
        .into_iter()
        .enumerate()
    {
        let name = format!("keep{i}");
        let h = create_on(&client, d, &name, 1).await;
        let seed = i as u64 + 1;
        client
            .write(h, 0, Bytes::from(pattern(seed, len)))
            .await
            .unwrap();
        client.fsync(h).await.unwrap();
        stored.push(Stored { name, seed, len });
    }
    verify(&client, &stored, "before the disk filled").await;

    // Fill it: 1 MiB writes until the server says no.
    let big = create_on(&client, d, "big", 1).await;
    let mut acked = 0usize;
    let full = loop {
        assert!(
            acked <= (TMPFS_MIB as usize + 4) * CHUNK,
            "wrote {acked} bytes to a {TMPFS_MIB} MiB file system without ENOSPC"
        );
        let data = Bytes::from(pattern(99, acked + CHUNK).split_off(acked));
        match timed("write", client.write(big, acked as u64, data)).await {
            Ok(n) => acked += n,
            Err(e) => break e,
        }
    };
    assert_eq!(
        full.errno,
        Errno::ENOSPC,
        "the writer got errno {} ({}) instead of ENOSPC: {}",
        full.errno.0,
        full.errno.describe(),
        full.message
    );
    eprintln!(
        "ENOSPC after {acked} bytes: {} ({:?})",
        full.message,
        started.elapsed()
    );
    // Still full: again ENOSPC, at once.
    let again = timed(
        "write",
        client.write(big, acked as u64, Bytes::from(vec![1u8; CHUNK])),
    )
    .await
    .unwrap_err();
    assert_eq!(again.errno, Errno::ENOSPC, "{}", again.message);

    // Everything stored before is still there, byte for byte; stats, lists,
    // statfs and creates still work.
    let client = cluster.client();
    verify(&client, &stored, "with the disk full").await;
    let big_bytes = pattern(99, acked);
    for at in (0..acked).step_by(CHUNK) {
        let n = CHUNK.min(acked - at);
        let got = client.read(big, at as u64, n).await.unwrap();
        assert!(
            got[..] == big_bytes[at..at + n],
            "acknowledged bytes {at}.. of big lost"
        );
    }
    let names = entry_names(&client, d).await;
    assert_eq!(names.len(), stored.len() + 1, "{names:?}");
    timed("statfs", client.statfs()).await.expect("statfs");
    for i in 0..4 {
        let h = timed("create", client.create(d, &format!("new{i}"), 0o644))
            .await
            .unwrap_or_else(|e| panic!("create with the disk full: {} {}", e.errno.0, e.message))
            .handle;
        client.getattr(h).await.expect("stat a new file");
        client.setxattr(h, "user.k", b"v", false, false).await.ok();
        client.unlink(d, &format!("new{i}")).await.expect("unlink");
    }

    // Deleting frees room: a new file on the same server takes new data.
    timed("unlink", client.unlink(d, "big"))
        .await
        .expect("unlink big");
    let fresh = create_on(&client, d, "fresh", 1).await;
    let fresh_len = 3 * CHUNK;
    timed(
        "write",
        client.write(fresh, 0, Bytes::from(pattern(7, fresh_len))),
    )
    .await
    .expect("write after deleting");
    client.fsync(fresh).await.unwrap();
    stored.push(Stored {
        name: "fresh".into(),
        seed: 7,
        len: fresh_len,
    });
    verify(&client, &stored, "after deleting").await;

    // A restart finds everything.
    assert!(cluster.is_running(1), "server 1 died");
    cluster.terminate(1);
    cluster.start_server(1);
    let client = cluster.client();
    verify(&client, &stored, "after a restart").await;
    assert!(
        matches!(client.resolve("/d/big").await, Err(e) if e.errno == Errno::ENOENT),
        "big is back"
    );
    let log = cluster.read_log("server-1");
    assert!(!log.contains("panicked"), "server 1 panicked: {log}");
    drop(cluster);
    drop(tmpfs);
    eprintln!("enospc test took {:?}", started.elapsed());
}
