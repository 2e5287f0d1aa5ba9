//! The mount's memory is bounded (issue 51 §5): with small bounds set, every
//! table the mount and its client keep stays under its bound however many
//! files go through it, what was evicted is fetched again (every file still
//! reads right), and when the kernel forgets its inodes the tables let them
//! go. Sizes are read from the mount itself (`shoal stats --mount`).

use std::collections::BTreeMap;
use std::path::Path;

use shoal_tests::{eventually, mount_stats, Cluster};

const ENTRIES: usize = 500;
const KNOWN_NAMES: usize = 300;
const DIRS: usize = 3;
const FILES: usize = 1000;

/// The mount's tables: name -> (entries, bound).
fn tables(mnt: &Path) -> BTreeMap<String, (usize, usize)> {
    let text = mount_stats(mnt, &[]);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("# tables (entries/bound): "))
        .unwrap_or_else(|| panic!("no tables line in\n{text}"));
    line.split(", ")
        .map(|t| {
            let (name, sizes) = t.split_once(' ').unwrap();
            let (len, max) = sizes.split_once('/').unwrap();
            (
                name.to_string(),
                (len.parse().unwrap(), max.parse().unwrap()),
            )
        })
        .collect()
}

fn content(d: usize, i: usize) -> String {
    format!("file {i} of directory {d}\n")
}

#[test]
fn tables_stay_under_their_bounds_and_let_forgotten_inodes_go() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set(&format!("cache_entries={ENTRIES}"))
        .set(&format!("known_names={KNOWN_NAMES}"))
        .start();
    let mnt = cluster.mount();
    for d in 0..DIRS {
        let dir = mnt.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for i in 0..FILES {
            std::fs::write(dir.join(format!("f{i}")), content(d, i)).unwrap();
        }
        let listed = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap())
            .filter(|m| m.is_file())
            .count();
        assert_eq!(listed, FILES);
    }

    let t = tables(&mnt);
    for (name, (len, max)) in &t {
        assert!(
            len <= max,
            "{name}: {len} entries past its bound {max}: {t:?}"
        );
    }
    for name in ["names", "attrs", "layouts", "leases", "parents"] {
        assert_eq!(t[name].1, ENTRIES, "{name} is bounded by cache_entries");
    }
    for name in ["known_names", "made_here"] {
        assert_eq!(t[name].1, KNOWN_NAMES, "{name} is bounded by known_names");
    }
    assert!(
        t["attrs"].0 > ENTRIES / 2,
        "{} files seen, the cache holds what fits: {t:?}",
        DIRS * FILES
    );

    // Evicted entries are fetched again: every file reads right, by name.
    for d in 0..DIRS {
        for i in (0..FILES).rev() {
            let path = mnt.join(format!("d{d}/f{i}"));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), content(d, i));
        }
    }

    // The kernel forgets its inodes (FORGET): the mount lets them go.
    match std::fs::write("/proc/sys/vm/drop_caches", "2\n") {
        Ok(()) => eventually("the forgotten inodes' attributes go", || {
            let t = tables(&mnt);
            t["attrs"].0 < ENTRIES / 10 && t["parents"].0 < DIRS
        }),
        Err(e) => eprintln!("not checking FORGET: dropping the kernel's caches: {e}"),
    }
    for d in 0..DIRS {
        let path = mnt.join(format!("d{d}/f7"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), content(d, 7));
    }
}
