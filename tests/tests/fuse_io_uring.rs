//! FUSE over io_uring (`vendor/fuser/src/uring.rs`): when the kernel offers
//! it (`/sys/module/fuse/parameters/enable_uring`, which
//! `scripts/install-deps` turns on), the mount registers one ring per
//! possible CPU and the kernel sends it requests through them instead of
//! `/dev/fuse`; with `fuse_io_uring=false` it keeps to `/dev/fuse`. Ordinary
//! tools see the same file system either way (with the switch on, the rest of
//! the FUSE tests run over the rings too).

use std::path::Path;
use std::process::Command;

use shoal_tests::{eventually, pattern, Cluster};

/// Whether the kernel offers FUSE over io_uring to new mounts.
fn kernel_offers_rings() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| v.trim() == "Y")
}

/// The io_uring instances process `pid` holds, as their fdinfo texts.
fn rings_of(pid: u32) -> Vec<String> {
    let mut rings = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd = fd.unwrap();
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        if target.to_string_lossy() == "anon_inode:[io_uring]" {
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            rings.push(ring_info(&info));
        }
    }
    rings
}

/// A ring's fdinfo with its counters. The kernel here prints them only when it gets
/// the ring's lock at once (`io_uring_show_fdinfo` trylocks it), so a read
/// while a mount thread holds it shows none: read again.
fn ring_info(path: &str) -> String {
    for _ in 0..10_000 {
        let info = std::fs::read_to_string(path).unwrap();
        if info.contains("CqHead:") {
            return info;
        }
        std::thread::yield_now();
    }
    panic!("{path}: the ring's counters never showed");
}

/// Completions the process's rings have delivered (each a FUSE request).
fn completions(pid: u32) -> u64 {
    rings_of(pid)
        .iter()
        .map(|info| {
            let line = info.lines().find(|l| l.starts_with("CqHead:")).unwrap();
            line["CqHead:".len()..].trim().parse::<u64>().unwrap()
        })
        .sum()
}

/// CPUs the kernel may run callers on: one FUSE queue each.
fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    text.trim()
        .split(',')
        .map(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            hi.parse::<usize>().unwrap() + 1 - lo.parse::<usize>().unwrap()
        })
        .sum()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Copies a tree in, compares it, writes and reads a file larger than one
/// request, lists a large directory and removes everything.
fn exercise(mnt: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    run(Command::new("cp").arg("-r").arg(&src).arg(mnt.join("tree")));
    run(Command::new("diff")
        .arg("-r")
        .arg(&src)
        .arg(mnt.join("tree")));
    let data = pattern(7, 5 << 20);
    std::fs::write(mnt.join("big"), &data).unwrap();
    assert!(
        std::fs::read(mnt.join("big")).unwrap() == data,
        "big file differs"
    );
    std::fs::create_dir(mnt.join("many")).unwrap();
    for i in 0..600 {
        std::fs::write(
            mnt.join(format!("many/file-with-a-longish-name-{i:04}")),
            b"x",
        )
        .unwrap();
    }
    assert_eq!(std::fs::read_dir(mnt.join("many")).unwrap().count(), 600);
    run(Command::new("rm")
        .arg("-r")
        .arg(mnt.join("tree"))
        .arg(mnt.join("many")));
    std::fs::remove_file(mnt.join("big")).unwrap();
    assert_eq!(std::fs::read_dir(mnt).unwrap().count(), 0);
}

/// A cluster of `servers` mounted with its rings up, and the mount's pid;
/// None (the test skipped) if the kernel does not offer FUSE over io_uring.
fn mounted_on_rings(servers: u32) -> Option<(Cluster, std::path::PathBuf, u32)> {
    if !kernel_offers_rings() {
        eprintln!("skipped: the kernel does not offer FUSE over io_uring (enable_uring off)");
        return None;
    }
    let mut cluster = Cluster::builder().servers(servers).start();
    let mnt = cluster.mount();
    let pid = cluster.mount_pid().unwrap();
    // The mount point answers once the kernel has it; the rings are made
    // after the INIT that follows, so they may come a moment later.
    eventually("one ring per possible CPU", || {
        rings_of(pid).len() == possible_cpus()
    });
    Some((cluster, mnt, pid))
}

#[test]
fn the_mount_serves_through_one_ring_per_cpu_when_the_kernel_offers_them() {
    let Some((_cluster, mnt, pid)) = mounted_on_rings(2) else {
        return;
    };
    let before = completions(pid);
    exercise(&mnt);
    let served = completions(pid) - before;
    // 600 creates alone are 1,200 requests (LOOKUP and CREATE).
    assert!(
        served > 2_000,
        "only {served} requests came through the rings"
    );
}

#[test]
fn with_fuse_io_uring_off_the_mount_keeps_to_dev_fuse() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("fuse_io_uring=false")
        .start();
    let mnt = cluster.mount();
    let pid = cluster.mount_pid().unwrap();
    exercise(&mnt);
    assert!(
        rings_of(pid).is_empty(),
        "the mount made rings with fuse_io_uring off"
    );
}

/// The mount's page cache of `path` dropped, so that its next read goes to
/// the mount (the file's pages must be clean: written back by an fsync).
fn drop_cached(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: advice on an open descriptor, over the whole file.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise");
}

/// A read served through a ring lands in the entry straight from the
/// socket (`fuse/src/reads_in_place.rs`), including a read of a hole, a
/// read of a strip the file has no data in, and the short read at the end.
#[test]
fn reads_over_the_rings_land_in_place_with_holes_and_the_end_as_written() {
    use std::os::unix::fs::FileExt;
    let Some((_cluster, mnt, _)) = mounted_on_rings(3) else {
        return;
    };
    // Data in strips 0-2, a hole through strips 3-4 and the start of 5, a
    // little data in strip 5, a hole to the end: 7 MiB + 4,321 bytes.
    const MIB: usize = 1 << 20;
    let size = 7 * MIB + 4321;
    let mut want = vec![0u8; size];
    let head = pattern(3, 5 * MIB / 2);
    let island = pattern(4, 100);
    want[..head.len()].copy_from_slice(&head);
    want[5 * MIB + 77..5 * MIB + 177].copy_from_slice(&island);
    let path = mnt.join("sparse");
    let f = std::fs::File::create(&path).unwrap();
    f.write_all_at(&head, 0).unwrap();
    f.write_all_at(&island, (5 * MIB + 77) as u64).unwrap();
    f.set_len(size as u64).unwrap();
    f.sync_all().unwrap();
    drop(f);
    drop_cached(&path);
    shoal_tests::mount_stats(&mnt, &["--reset"]);

    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), size);
    assert!(
        got == want,
        "the file read back differs from what was written"
    );
    drop_cached(&path);
    let mut tail = vec![0u8; 10_000];
    let n = std::fs::File::open(&path)
        .unwrap()
        .read_at(&mut tail, (size - 4321 - 17) as u64)
        .unwrap();
    assert_eq!(n, 4321 + 17, "a read across the end is short");
    assert!(tail[..n] == want[size - n..]);

    let stats = shoal_tests::mount_stats(&mnt, &[]);
    let line = stats
        .lines()
        .find(|l| l.starts_with("# read replies in io_uring entries"))
        .unwrap_or_else(|| panic!("no read replies line in:\n{stats}"));
    let landed: u64 = line
        .split("landed in place ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no landed count in {line:?}"));
    assert!(landed >= 4, "too few read replies landed in place: {line}");
}
