//! A cluster off loopback: three server hosts and two client hosts, each a
//! network namespace with its own address on a switch (`scripts/hosts`,
//! `shoal_tests::hosts`), servers bound to their host's address, mounts on
//! the client hosts. What must hold across machines: files, listings and a
//! tar round trip through the two hosts' mounts; a server host killed and
//! started again, with fsck from a client host finding the cluster whole;
//! a lease recalled across hosts; fcntl and flock locks across hosts,
//! taken back after their server's restart and gone with a dead client
//! host; an unprivileged user on a client host served through that host's
//! own credential broker; an MPI job of 8 ranks on the two client hosts
//! (mpirun launching through `scripts/hosts ssh`) adding to one file's
//! counter under fcntl locks and reading each other's blocks.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use shoal_client::Client;
use shoal_proto::handle::server_of;
use shoal_proto::msg::StatsReply;
use shoal_tests::hosts::Hosts;
use shoal_tests::lock_agent::Agent;
use shoal_tests::{pattern, shoal_bin, Cluster};

/// Server `s`'s statistics, asked from client host `host`.
fn stats_from(cluster: &Cluster, host: &str, s: u32) -> StatsReply {
    let config = cluster.config().clone();
    cluster.hosts().on(host, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = Client::new(config);
        rt.block_on(client.server_stats(s)).expect("stats")
    })
}

/// A tree of nested directories, files of several sizes (one spanning
/// strips on every server) and a symlink.
fn make_tree(top: &Path) {
    for d in ["a", "a/b", "a/b/c", "d"] {
        std::fs::create_dir_all(top.join(d)).unwrap();
    }
    for (i, size) in [0usize, 1, 100, 4096, 8191, 65_537, 3 << 20]
        .iter()
        .enumerate()
    {
        let dir = ["a", "a/b", "a/b/c", "d"][i % 4];
        std::fs::write(
            top.join(dir).join(format!("f{i}")),
            pattern(i as u64, *size),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("b/c/f2", top.join("a/link")).unwrap();
}

fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_client_hosts_share_files_listings_and_a_tar_round_trip() {
    let mut cluster = Cluster::builder().servers(3).on_hosts(2).start();
    let a = cluster.host_mount(0);
    let b = cluster.host_mount(1);

    std::fs::create_dir(a.join("many")).unwrap();
    let mut names: Vec<String> = (0..60).map(|i| format!("file-{i:02}")).collect();
    for (i, n) in names.iter().enumerate() {
        std::fs::write(a.join("many").join(n), pattern(i as u64, 1000 + i)).unwrap();
    }
    let mut listed: Vec<String> = std::fs::read_dir(b.join("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    names.sort();
    assert_eq!(listed, names, "host c1 lists what host c0 made");
    for (i, n) in names.iter().enumerate() {
        let bytes = std::fs::read(b.join("many").join(n)).unwrap();
        assert_eq!(bytes, pattern(i as u64, 1000 + i), "{n} read on host c1");
    }

    // tar into the cluster on one host, out of it on the other.
    let work = tempfile::tempdir().unwrap();
    let (src, out) = (work.path().join("src"), work.path().join("out"));
    make_tree(&src);
    std::fs::create_dir(&out).unwrap();
    std::fs::create_dir(a.join("tree")).unwrap();
    sh(&format!(
        "tar -C {} -cf - . | tar -C {} -xf -",
        src.display(),
        a.join("tree").display()
    ));
    sh(&format!(
        "tar -C {} -cf - . | tar -C {} -xf -",
        b.join("tree").display(),
        out.display()
    ));
    sh(&format!(
        "diff -r --no-dereference {} {}",
        src.display(),
        out.display()
    ));
}

#[test]
fn a_server_host_killed_and_restarted_keeps_everything_and_fsck_finds_it_whole() {
    let mut cluster = Cluster::builder().servers(3).on_hosts(2).durable().start();
    let a = cluster.host_mount(0);
    let b = cluster.host_mount(1);
    for i in 0..30u64 {
        std::fs::write(a.join(format!("f{i}")), pattern(i, 20_000)).unwrap();
    }
    cluster.kill(1);
    cluster.start_server(1);
    for i in 0..30u64 {
        let p = format!("f{i}");
        assert_eq!(
            std::fs::read(b.join(&p)).unwrap(),
            pattern(i, 20_000),
            "{p} on c1"
        );
        assert_eq!(
            std::fs::read(a.join(&p)).unwrap(),
            pattern(i, 20_000),
            "{p} on c0"
        );
    }
    let out = cluster
        .hosts()
        .command("c1", shoal_bin())
        .args(["fsck", "--grace", "0", "--config"])
        .arg(cluster.host_config_path(1))
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("0 problems"),
        "fsck from host c1: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_lease_is_recalled_across_hosts() {
    let mut cluster = Cluster::builder().servers(3).on_hosts(2).start();
    let a = cluster.host_mount(0);
    let b = cluster.host_mount(1);
    std::fs::write(a.join("shared"), b"first version").unwrap();
    let h = std::fs::metadata(a.join("shared")).unwrap().ino();
    // Host c0 reads it, and caches it under a lease.
    assert_eq!(std::fs::read(a.join("shared")).unwrap(), b"first version");
    let server = server_of(h);
    let recalls = stats_from(&cluster, "c1", server).lease_recalls;
    std::fs::write(b.join("shared"), b"second, longer version").unwrap();
    assert_eq!(
        std::fs::read(a.join("shared")).unwrap(),
        b"second, longer version",
        "host c0 reads host c1's write at once"
    );
    assert!(
        stats_from(&cluster, "c1", server).lease_recalls > recalls,
        "the write recalled host c0's lease"
    );
}

#[test]
fn locks_hold_across_hosts_come_back_after_a_restart_and_go_with_a_dead_host() {
    let mut cluster = Cluster::builder().servers(3).on_hosts(2).durable().start();
    let a = cluster.host_mount(0);
    let b = cluster.host_mount(1);
    std::fs::write(a.join("f"), [0u8; 64]).unwrap();
    let server = server_of(std::fs::metadata(a.join("f")).unwrap().ino());

    let mut holder = Agent::open("holder (host c0)", &a.join("f"));
    let mut other = Agent::open("other (host c1)", &b.join("f"));
    assert_eq!(holder.ask("lock w 0 10 0"), "ok");
    assert_eq!(holder.ask("flock w 0"), "ok");
    assert_eq!(other.ask("lock w 5 10 0"), "err EAGAIN");
    assert_eq!(other.ask("flock r 0"), "err EAGAIN");
    assert_eq!(
        other.ask("lock w 10 10 0"),
        "ok",
        "beside the holder's range"
    );

    // The file's server host dies and comes back: host c0 takes its locks
    // back in the grace period, before host c1 may ask.
    cluster.kill(server);
    cluster.start_server(server);
    assert_eq!(
        other.ask("lock w 5 10 0"),
        "err EAGAIN",
        "after the restart"
    );
    assert_eq!(other.ask("flock r 0"), "err EAGAIN", "after the restart");

    // Host c0's mount dies: its connections end, and its locks with them.
    // SAFETY: the PID of a mount process this test's cluster started.
    unsafe { libc::kill(cluster.host_mount_pid(0) as i32, libc::SIGKILL) };
    assert_eq!(
        other.ask("lock w 0 10 1"),
        "ok",
        "F_SETLKW once host c0 died"
    );
    assert_eq!(other.ask("flock w 1"), "ok", "flock once host c0 died");
    drop(holder);
}

#[test]
fn an_unprivileged_user_on_a_client_host_is_served_through_its_broker() {
    let mut cluster = Cluster::builder().servers(3).on_hosts(2).start();
    let a = cluster.host_mount(0);
    let b = cluster.host_mount(1);
    std::fs::write(a.join("readable"), b"for everyone").unwrap();
    std::fs::create_dir(a.join("open")).unwrap();
    sh(&format!("chmod 1777 {}", a.join("open").display()));
    let before: u64 = (0..3)
        .map(|s| stats_from(&cluster, "c1", s).user_connections)
        .sum();

    let script = "import sys; d = sys.argv[1]; \
                  print(open(d + '/readable').read()); \
                  open(d + '/open/mine', 'w').write('made by nobody')";
    let out = cluster
        .hosts()
        .command("c1", "setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(&b)
        .env(
            "LD_PRELOAD",
            shoal_bin().with_file_name("libshoal_preload.so"),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "as uid 65534 on host c1: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "for everyone\n");
    let made = std::fs::metadata(a.join("open/mine")).unwrap();
    assert_eq!(
        (made.uid(), made.gid()),
        (65534, 65534),
        "owned by its maker"
    );
    assert_eq!(
        std::fs::read(a.join("open/mine")).unwrap(),
        b"made by nobody"
    );
    let after: u64 = (0..3)
        .map(|s| stats_from(&cluster, "c1", s).user_connections)
        .sum();
    assert!(
        after > before,
        "the library connected with a user credential from host c1's broker"
    );
}

#[test]
fn an_mpi_job_on_two_client_hosts_locks_writes_and_reads_one_file() {
    // Ranks of one host take their read locks at once, right before they
    // read past the end their kernel knew: each grant used to drop the
    // kernel's caches again, and a drop throws away a read's GETATTR in
    // flight, so 1 run in 5 a rank read a block of the other host's as
    // empty (`fuse/src/lock_epochs.rs`).
    let mut cluster = Cluster::builder().servers(3).on_hosts(2).start();
    let a = cluster.host_mount(0);
    let b = cluster.host_mount(1);
    std::fs::write(a.join("shared"), [0u8; 8]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let prog = work.path().join("shared_file");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/shared_file.c");
    sh(&format!(
        "mpicc -O2 -Wall -Wextra -Werror {} -o {}",
        source.display(),
        prog.display()
    ));
    let hostfile = work.path().join("hosts");
    std::fs::write(
        &hostfile,
        format!(
            "{} slots=4\n{} slots=4\n",
            Hosts::client_addr(0),
            Hosts::client_addr(1)
        ),
    )
    .unwrap();
    let out = cluster
        .hosts()
        .command("c0", "timeout")
        .args([
            "300",
            "mpirun",
            "--allow-run-as-root",
            "-np",
            "8",
            "--hostfile",
        ])
        .arg(&hostfile)
        .args(["--mca", "plm_rsh_agent", &cluster.hosts().launcher()])
        .args(["--mca", "btl", "self,tcp"])
        .arg(&prog)
        .arg(a.join("shared"))
        .arg(b.join("shared"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mpirun: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for host in ["c0", "c1"] {
        let ranks = said
            .lines()
            .filter(|l| l.ends_with(&format!("on client host {host}: ok")))
            .count();
        assert_eq!(ranks, 4, "ranks on host {host}: {said}");
    }
    let total = u64::from_le_bytes(
        std::fs::read(b.join("shared")).unwrap()[..8]
            .try_into()
            .unwrap(),
    );
    assert_eq!(total, 8 * 50, "the counter, read on host c1");
}
