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
