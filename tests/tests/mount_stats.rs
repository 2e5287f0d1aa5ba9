//! `shoal stats --mount DIR`: the mount counts every request it answers and
//! the time the caller waited, per request type (Table 2 of [Vilayannur
//! 2004]). Known work through the mount must show up as exact counts.

use std::process::Command;

use shoal_tests::{mount_stat_rows as rows, mount_stats as stats, shoal_bin, Cluster};

#[test]
fn the_mount_counts_what_it_answers() {
    let mut cluster = Cluster::builder().servers(2).set("sync=none").start();
    let mnt = cluster.mount();
    stats(&mnt, &["--reset"]);
    let t = rows(&stats(&mnt, &[]));
    assert_eq!(t.keys().collect::<Vec<_>>(), ["total"], "{t:?}");
    assert_eq!(t["total"].0, 0);

    let dir = mnt.join("d");
    for d in 0..3 {
        std::fs::create_dir_all(dir.join(format!("sub{d}"))).unwrap();
    }
    for i in 0..7 {
        std::fs::write(dir.join(format!("f{i}")), vec![b'x'; 5000]).unwrap();
    }
    for i in 0..7 {
        assert_eq!(
            std::fs::read(dir.join(format!("f{i}"))).unwrap().len(),
            5000
        );
    }
    for i in 0..7 {
        std::fs::remove_file(dir.join(format!("f{i}"))).unwrap();
    }
    for d in 0..3 {
        std::fs::remove_dir(dir.join(format!("sub{d}"))).unwrap();
    }

    let text = stats(&mnt, &[]);
    let t = rows(&text);
    // mkdir d and sub0..2; a create per new file; an unlink and rmdir each.
    assert_eq!(t["mkdir"].0, 4, "{text}");
    assert_eq!(t["create"].0, 7, "{text}");
    assert_eq!(t["unlink"].0, 7, "{text}");
    assert_eq!(t["rmdir"].0, 3, "{text}");
    // The creates' opens answer with the CREATE; the reads open again.
    assert_eq!(t["open"].0, 7, "{text}");
    assert!(t["write"].0 >= 7, "{text}");
    assert!(t["read"].0 >= 7, "{text}");
    assert!(t["release"].0 >= 14, "{text}");
    // Only the writers' closes flush (FOPEN_NOFLUSH on a read-only open).
    assert_eq!(t["flush"].0, 7, "{text}");
    // Writes of 5,000 bytes are under the write threshold: buffered, each file's
    // sent at its close.
    assert!(
        text.contains("gathered 7 writes 35000 bytes, sent as 7 writes"),
        "{text}"
    );
    let sum: u64 = t
        .iter()
        .filter(|(k, _)| *k != "total")
        .map(|(_, r)| r.0)
        .sum();
    assert_eq!(t["total"].0, sum, "{text}");
    for (op, (count, mean, p99)) in &t {
        assert!(*count > 0, "{op}: {text}");
        assert!(*mean > 0.0 && *p99 >= 0.0, "{op}: {text}");
    }
    // Something a server answered takes longer than a microsecond.
    assert!(t["create"].1 >= 1.0, "{text}");

    let json: serde_json::Value = serde_json::from_str(&stats(&mnt, &["--json"])).unwrap();
    assert_eq!(json["ops"]["create"]["count"], 7, "{json}");

    // Not a Shoal mount: a clear error, not an empty table.
    let out = Command::new(shoal_bin())
        .args(["stats", "--mount"])
        .arg(cluster.dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Shoal mount"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.unmount();
}
