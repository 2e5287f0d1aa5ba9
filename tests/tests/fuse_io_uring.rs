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
            rings.push(std::fs::read_to_string(info).unwrap());
        }
    }
    rings
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

#[test]
fn the_mount_serves_through_one_ring_per_cpu_when_the_kernel_offers_them() {
    if !kernel_offers_rings() {
        eprintln!("skipped: the kernel does not offer FUSE over io_uring (enable_uring off)");
        return;
    }
    let mut cluster = Cluster::builder().servers(2).start();
    let mnt = cluster.mount();
    let pid = cluster.mount_pid().unwrap();
    // The mount point answers once the kernel has it; the rings are made
    // after the INIT that follows, so they may come a moment later.
    eventually("one ring per possible CPU", || {
        rings_of(pid).len() == possible_cpus()
    });
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
