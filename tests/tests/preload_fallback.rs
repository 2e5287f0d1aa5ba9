//! The preload library with a cluster it cannot connect to (here: a cluster
//! file it cannot read, as one written by a newer Shoal): under a mount the
//! program goes on through the mount, told once on stderr; without one its
//! calls fail, with a message that names the cause.

use std::process::Command;

use shoal_tests::{shoal_bin, Cluster, SharedMount};

#[test]
fn a_cluster_the_library_cannot_reach_is_left_to_its_mount_or_named() {
    let cluster = Cluster::builder().servers(2).start();
    let m = SharedMount::new(&cluster);
    std::fs::write(m.path().join("f"), "through the mount\n").unwrap();
    // The servers and the mount read the file when they started; the
    // library reads it when the program first calls into Shoal.
    let config = cluster.config_path();
    let text = std::fs::read_to_string(config).unwrap();
    std::fs::write(config, format!("from_a_newer_shoal = 1\n{text}")).unwrap();

    let lib = shoal_bin().with_file_name("libshoal_preload.so");
    assert!(lib.exists(), "{} not built", lib.display());
    let out = Command::new("cat")
        .arg(m.path().join("f"))
        .env("LD_PRELOAD", &lib)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through the mount\n");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        said.matches("libshoal_preload: not serving").count(),
        1,
        "{said}"
    );
    assert!(
        said.contains("from_a_newer_shoal"),
        "names the cause: {said}"
    );

    let out = Command::new("cat")
        .arg("/shoal-fallback-test/f")
        .env("LD_PRELOAD", &lib)
        .env("SHOAL_CONFIG", config)
        .env("SHOAL_PREFIX", "/shoal-fallback-test")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("from_a_newer_shoal"),
        "names the cause: {said}"
    );
}

/// An unprivileged user, no readable secret and no broker to ask (the
/// mount's socket gone): the library leaves the mounted cluster to the
/// mount, says so once, counts it in SHOAL_STATS, and the program gets
/// exactly what the mount gives: the world-readable file, a new file in a
/// world-writable directory, EACCES on root's private one.
#[test]
fn without_secret_or_broker_a_user_is_served_by_the_mount() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::builder().servers(2).start();
    std::fs::set_permissions(cluster.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let m = SharedMount::new(&cluster);
    let socket = cluster.config().broker_socket().unwrap();
    shoal_tests::eventually("the mount's broker listens", || socket.exists());
    std::fs::remove_file(&socket).unwrap();
    let dir = m.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::write(dir.join("public"), "for everyone\n").unwrap();
    std::fs::set_permissions(dir.join("public"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(dir.join("private"), "root's\n").unwrap();
    std::fs::set_permissions(dir.join("private"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let stats = tempfile::Builder::new()
        .prefix("shoal-fallback-stats-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(stats.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();

    let lib = shoal_bin().with_file_name("libshoal_preload.so");
    let out = Command::new("setpriv")
        .args(["--reuid=1001", "--regid=1001", "--clear-groups", "sh", "-c"])
        .arg("cat public && echo mine > mine && cat mine && ! cat private")
        .current_dir(&dir)
        .env("LD_PRELOAD", &lib)
        .env("SHOAL_STATS", stats.path().join("sh"))
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "for everyone\nmine\n");
    assert!(said.contains("Permission denied"), "{said}");
    assert!(
        said.contains("no credential broker"),
        "names the cause: {said}"
    );
    // Once per process that met the cluster (sh, and each cat).
    assert_eq!(
        said.matches("libshoal_preload: not serving").count(),
        4,
        "{said}"
    );
    let table = std::fs::read_to_string(stats.path().join("sh")).unwrap();
    assert!(table.contains("# left to the mount: "), "{table}");
    let mine = std::fs::metadata(dir.join("mine")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&mine), 1001);
}
