//! Streamed reads through the mount (`fuse/src/read_streams.rs`): a large
//! file opened read-only is read past the kernel's page cache, from the
//! mount's own read-ahead. Readers must see exactly what they saw through
//! the page cache: every byte, this mount's own changes at once, growth,
//! and shared maps; and a file read in small pieces goes back to the page
//! cache at its next open. Also: the page cache's readahead window.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use shoal_tests::{eventually, mount_stats, pattern, Cluster};

const MIB: usize = 1 << 20;

/// Streamed reads on, for files of 8 MiB and more.
const STREAM: &str = "stream_reads=8388608";

/// Larger than `STREAM`'s 8 MiB, so it streams.
const BIG: usize = 24 * MIB;

/// A file of `BIG` bytes (a pattern from `seed`) written through a fresh
/// mount of `servers` servers with `settings`. The cluster lives as long
/// as `_cluster` does: a test binds it by name (a `..` would drop it).
struct BigFile {
    _cluster: Cluster,
    mnt: PathBuf,
    path: PathBuf,
    data: Vec<u8>,
}

fn big_file(servers: u32, settings: Option<&str>, seed: u64) -> BigFile {
    let mut builder = Cluster::builder().servers(servers);
    if let Some(kv) = settings {
        builder = builder.set(kv);
    }
    let mut cluster = builder.start();
    let mnt = cluster.mount();
    let path = mnt.join(format!("big{seed}"));
    let data = pattern(seed, BIG);
    std::fs::write(&path, &data).unwrap();
    BigFile {
        _cluster: cluster,
        mnt,
        path,
        data,
    }
}

/// Reads `f` to its end in reads of `size` bytes.
fn read_in(f: &mut File, size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; size];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Read requests the mount at `mnt` has answered since it started.
fn reads_answered(mnt: &Path) -> u64 {
    let json: serde_json::Value = serde_json::from_str(&mount_stats(mnt, &["--json"])).unwrap();
    json["ops"]["read"]["count"].as_u64().unwrap_or(0)
}

#[test]
fn every_byte_comes_back_at_any_read_size_and_offset() {
    let BigFile {
        _cluster,
        mnt: _,
        path,
        data,
    } = big_file(4, Some(STREAM), 1);
    // Aligned and unaligned sizes, smaller and larger than a strip, and
    // reads that cross pieces.
    for size in [MIB, 3 * MIB + 5, 128 << 10, 1000] {
        let mut f = File::open(&path).unwrap();
        assert!(read_in(&mut f, size) == data, "reads of {size} bytes");
    }
    // Jumps: each one starts the run again.
    let f = File::open(&path).unwrap();
    for (at, len) in [(5 * MIB + 3, MIB), (MIB, 2 * MIB), (20 * MIB, 4 * MIB + 1)] {
        let mut buf = vec![0u8; len];
        let end = (at + len).min(BIG);
        let n = f.read_at(&mut buf, at as u64).unwrap();
        assert_eq!(n, end - at, "a read at {at}");
        assert!(buf[..n] == data[at..end], "a read at {at}");
    }
    // Past the end: nothing.
    let mut buf = [0u8; 16];
    assert_eq!(f.read_at(&mut buf, BIG as u64 + 10).unwrap(), 0);
}

#[test]
fn a_change_through_the_mount_is_read_at_once_even_where_it_was_read_ahead() {
    let BigFile {
        _cluster,
        mnt: _,
        path,
        mut data,
    } = big_file(4, Some(STREAM), 2);
    let mut reader = File::open(&path).unwrap();
    // A sequential run: pieces are fetched ahead, past 4 MiB.
    let mut head = vec![0u8; 2 * MIB];
    reader.read_exact(&mut head).unwrap();
    assert!(head == data[..2 * MIB]);

    let newer = pattern(3, MIB);
    let writer = OpenOptions::new().write(true).open(&path).unwrap();
    writer.write_all_at(&newer, 4 * MIB as u64).unwrap();
    data[4 * MIB..5 * MIB].copy_from_slice(&newer);
    let mut rest = vec![0u8; 4 * MIB];
    reader.read_exact(&mut rest).unwrap();
    assert!(
        rest == data[2 * MIB..6 * MIB],
        "the reader sees this mount's write, not what it fetched before"
    );

    // A truncate too.
    writer.set_len(7 * MIB as u64).unwrap();
    let tail = read_in(&mut reader, MIB);
    assert!(
        tail == data[6 * MIB..7 * MIB],
        "the truncate is read at once"
    );
}

#[test]
fn a_streamed_reader_reads_what_was_appended_after_it_reached_the_end() {
    let BigFile {
        _cluster,
        mnt: _,
        path,
        data,
    } = big_file(4, Some(STREAM), 4);
    let mut reader = File::open(&path).unwrap();
    assert!(read_in(&mut reader, MIB) == data, "to the end");

    let more = pattern(5, 3 * MIB / 2);
    let mut writer = OpenOptions::new().append(true).open(&path).unwrap();
    writer.write_all(&more).unwrap();
    writer.sync_all().unwrap();
    assert!(
        read_in(&mut reader, MIB) == more,
        "the same open reads on past its old end"
    );
    reader.seek(SeekFrom::Start(0)).unwrap();
    assert_eq!(read_in(&mut reader, 4 * MIB).len(), BIG + more.len());
}

#[test]
fn a_streamed_file_maps_shared() {
    let BigFile {
        _cluster,
        mnt: _,
        path,
        data,
    } = big_file(2, Some(STREAM), 6);
    let f = File::open(&path).unwrap();
    // SAFETY: a fresh read-only shared map of the whole file, unmapped below;
    // nothing else maps it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            BIG,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        map,
        libc::MAP_FAILED,
        "a shared map of a streamed open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the map holds BIG readable bytes until the munmap.
    let seen = unsafe { std::slice::from_raw_parts(map.cast::<u8>(), BIG) };
    assert!(seen == &data[..], "the map shows the file");
    // SAFETY: the map made above, no longer borrowed.
    assert_eq!(unsafe { libc::munmap(map, BIG) }, 0);
}

#[test]
fn a_file_read_in_small_pieces_opens_through_the_page_cache_next_time() {
    let BigFile {
        _cluster,
        mnt,
        path,
        data,
    } = big_file(2, Some(STREAM), 7);
    let small = |expect: &str| {
        let mut f = File::open(&path).unwrap();
        let before = reads_answered(&mnt);
        let mut buf = [0u8; 4096];
        for i in 0..32 {
            f.read_exact(&mut buf).unwrap();
            assert!(buf[..] == data[i * 4096..(i + 1) * 4096], "{expect}");
        }
        reads_answered(&mnt) - before
    };
    let streamed = small("first open");
    assert!(
        streamed >= 32,
        "streamed, each 4 KiB read reaches the mount: {streamed} reads"
    );
    let cached = small("second open");
    assert!(
        cached < 8,
        "through the page cache, readahead answers them: {cached} reads"
    );
}

#[test]
fn by_default_files_are_read_through_the_page_cache() {
    let BigFile {
        _cluster,
        mnt,
        path,
        data,
    } = big_file(2, None, 8);
    let mut f = File::open(&path).unwrap();
    let before = reads_answered(&mnt);
    let mut buf = [0u8; 4096];
    for i in 0..32 {
        f.read_exact(&mut buf).unwrap();
        assert!(buf[..] == data[i * 4096..(i + 1) * 4096]);
    }
    let n = reads_answered(&mnt) - before;
    assert!(
        n < 8,
        "the kernel's readahead answers 4 KiB reads: {n} reads"
    );
}

#[test]
fn the_page_cache_reads_ahead_four_strips() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root may set a mount's readahead window");
        return;
    }
    let mut cluster = Cluster::builder().servers(2).start();
    let mnt = cluster.mount();
    let want = mnt.to_str().unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dev = info
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(want))
        .filter_map(|l| l.split(' ').nth(2))
        .next_back()
        .expect("the mount in mountinfo");
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    let strip_kb = cluster.config().settings.strip_size / 1024;
    // Set by the mount once its mount point exists, so a moment after it
    // answers.
    eventually("the readahead window is four strips", || {
        let kb = std::fs::read_to_string(&knob).unwrap();
        kb.trim().parse::<u64>().unwrap() == 4 * strip_kb
    });
}
