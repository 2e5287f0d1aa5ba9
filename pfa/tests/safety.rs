//! Safety with real processes: ranks in separate processes writing at once
//! never overwrite each other; a writer killed with SIGKILL leaves the
//! container readable up to its last completed store and `check` says what
//! was cut; damaged containers give clear errors, never a panic. On the
//! local disk (ext4 here) and on tmpfs.
//!
//! The writers are this test executable run again with `PFA_CHILD` set
//! (see `child`).

use std::io::{BufRead, BufReader, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use shoal_pfa::tools::check;
use shoal_pfa::{Container, Mode, Options};

const NRANKS: u32 = 6;

fn pattern(name: &str, rank: u32, step: u64, len: usize) -> Vec<u8> {
    let seed = name.len() as u64 * 101 + u64::from(rank) * 7919 + step * 104_729;
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed).wrapping_add(i / 4096) as u8)
        .collect()
}

/// Sizes of the logical files each rank writes (a checkpoint-like one
/// stored incrementally, a record-like one stored whole).
const FILES: [(&str, usize, Mode); 2] = [
    ("ckpt/image", 737_534, Mode::WriteIncremental),
    ("data/record.txt", 272_383, Mode::Write),
];

/// The writer process: opens (or creates) the container and stores
/// `steps` steps of each logical file for its rank, printing each
/// completed step. `steps` 0 means until killed.
#[test]
fn child() {
    if std::env::var_os("PFA_CHILD").is_none() {
        return;
    }
    let _crash_points = fail::FailScenario::setup();
    let path = PathBuf::from(std::env::var("PFA_PATH").unwrap());
    let rank: u32 = std::env::var("PFA_RANK").unwrap().parse().unwrap();
    let steps: u64 = std::env::var("PFA_STEPS").unwrap().parse().unwrap();
    let mut opts = Options::new(NRANKS);
    opts.chunk_size = std::env::var("PFA_CHUNK").unwrap().parse().unwrap();
    let c = Container::open_or_create(&path, &opts).unwrap();
    let mut bufs: Vec<_> = FILES
        .iter()
        .map(|(n, size, mode)| c.mmap(n, *size, rank, *mode).unwrap())
        .collect();
    // Each file goes on after its last complete step (a killed writer may
    // have stored one file of a step and not the other).
    let firsts: Vec<u64> = FILES
        .iter()
        .map(|(n, size, _)| c.mmap(n, *size, rank, Mode::Read).unwrap().steps())
        .collect();
    let out = &mut std::io::stdout().lock();
    writeln!(out, "first {} {}", firsts[0], firsts[1]).unwrap();
    let mut n = 0;
    while steps == 0 || n < steps {
        let mut stored = vec![];
        for (i, (b, (name, size, mode))) in bufs.iter_mut().zip(FILES).enumerate() {
            let step = firsts[i] + n;
            let want = pattern(name, rank, step, size);
            if mode == Mode::WriteIncremental && n > 0 {
                // change about a third of the pages, as a checkpoint does
                let s = b.as_mut_slice();
                for p in (0..size.div_ceil(4096)).filter(|p| (*p as u64 + step).is_multiple_of(3)) {
                    let r = p * 4096..((p + 1) * 4096).min(size);
                    s[r.clone()].copy_from_slice(&want[r]);
                }
            } else {
                b.as_mut_slice().copy_from_slice(&want);
            }
            assert_eq!(b.append(size).unwrap(), step);
            stored.push(step);
        }
        writeln!(out, "stored {} {}", stored[0], stored[1]).unwrap();
        out.flush().unwrap();
        n += 1;
    }
    c.close().unwrap();
}

/// What step `step` of FILES[i] of `rank` must read back as, for a writer
/// whose first step in this session was `first`.
fn expected(i: usize, rank: u32, step: u64, first: u64) -> Vec<u8> {
    let (name, size, mode) = FILES[i];
    if mode != Mode::WriteIncremental || step == first {
        return pattern(name, rank, step, size);
    }
    let mut img = expected(i, rank, step - 1, first);
    let want = pattern(name, rank, step, size);
    for p in 0..size.div_ceil(4096) {
        if (p as u64 + step).is_multiple_of(3) {
            let r = p * 4096..((p + 1) * 4096).min(size);
            img[r.clone()].copy_from_slice(&want[r]);
        }
    }
    img
}

fn spawn(path: &Path, rank: u32, steps: u64, chunk: u64) -> std::process::Child {
    spawn_with(path, rank, steps, chunk, "")
}

fn spawn_with(
    path: &Path,
    rank: u32,
    steps: u64,
    chunk: u64,
    failpoints: &str,
) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .env("FAILPOINTS", failpoints)
        .args(["--exact", "child", "--nocapture", "--test-threads=1", "-q"])
        .env("PFA_CHILD", "writer")
        .env("PFA_PATH", path)
        .env("PFA_RANK", rank.to_string())
        .env("PFA_STEPS", steps.to_string())
        .env("PFA_CHUNK", chunk.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn read_steps(c: &Container, i: usize, rank: u32) -> Vec<Vec<u8>> {
    let (name, size, _) = FILES[i];
    let mut b = c.mmap(name, size, rank, Mode::Read).unwrap();
    let mut out = vec![];
    while !b.eof() {
        out.push(b.as_slice()[..b.len()].to_vec());
        b.seek(SeekFrom::Current(1)).unwrap();
    }
    out
}

fn concurrent_ranks(dir: &Path) {
    let path = dir.join("out.pfa");
    // Small chunks so that stores cross chunks and ranks interleave a lot.
    let chunk = 256 << 10;
    let steps = 6;
    let kids: Vec<_> = (0..NRANKS).map(|r| spawn(&path, r, steps, chunk)).collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let report = check(&path).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(report.cut.is_empty(), "{report:?}");
    assert_eq!(report.steps, (NRANKS as u64 * steps * 2) as usize);
    let c = Container::open_read_only(&path).unwrap();
    for rank in 0..NRANKS {
        for i in 0..FILES.len() {
            let got = read_steps(&c, i, rank);
            assert_eq!(got.len() as u64, steps);
            for (s, img) in got.iter().enumerate() {
                assert!(
                    *img == expected(i, rank, s as u64, 0),
                    "rank {rank} file {i} step {s}"
                );
            }
        }
    }
    // One file for all ranks and steps.
    let files: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert_eq!(files.len(), 1);
}

#[test]
fn concurrent_ranks_on_the_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_ranks(dir.path());
}

#[test]
fn concurrent_ranks_on_tmpfs() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("no /dev/shm: skipped");
        return;
    };
    concurrent_ranks(dir.path());
}

/// Kills a writer (SIGKILL) while it stores, several times, restarting it
/// on the same container each time: every step it reported is readable
/// byte for byte, `check` finds no damage and names what was cut.
#[test]
fn killed_writer_leaves_a_readable_container() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.pfa");
    let rank = 2;
    // per session and file: (first step, last step reported stored)
    let mut sessions: Vec<[(u64, u64); 2]> = Vec::new();
    let mut cut_seen = 0;
    for round in 0..6 {
        let mut kid = spawn(&path, rank, 0, 128 << 10);
        let mut lines = BufReader::new(kid.stdout.take().unwrap()).lines();
        // (the test harness prints lines of its own)
        let mut words = || -> Vec<u64> {
            loop {
                let l = lines.next().unwrap().unwrap();
                if l.starts_with("first ") || l.starts_with("stored ") {
                    return l.split(' ').skip(1).map(|w| w.parse().unwrap()).collect();
                }
            }
        };
        let first = words();
        let mut last = first.clone();
        for _ in 0..(3 + round) {
            last = words();
        }
        // Kill at a different point of a store each round.
        std::thread::sleep(std::time::Duration::from_micros(700 * round));
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(kid.id() as i32, libc::SIGKILL) };
        kid.wait().unwrap();
        sessions.push([(first[0], last[0]), (first[1], last[1])]);
        let report = check(&path).unwrap();
        assert!(report.problems.is_empty(), "{report:?}");
        cut_seen += report.cut.len();
        for w in &report.cut {
            assert!(w.contains("rank 2"), "{w}");
        }
    }
    let c = Container::open_read_only(&path).unwrap();
    for i in 0..FILES.len() {
        let got = read_steps(&c, i, rank);
        for s in &sessions {
            let (first, last) = s[i];
            for step in first..=last {
                assert!(
                    got[step as usize] == expected(i, rank, step, first),
                    "file {i} step {step}"
                );
            }
        }
    }
    eprintln!("cut stores seen over 6 kills: {cut_seen}");
}

/// A writer that dies between two segments of a store (a crash point that
/// aborts the process there): the store is cut, `check` says so, and the
/// steps before it read back.
#[test]
fn writer_dying_mid_store_leaves_the_store_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.pfa");
    let rank = 4;
    // 128 KiB chunks: the 737,534-byte image is 6 or 7 segments a store.
    let mut kid = spawn_with(
        &path,
        rank,
        10,
        128 << 10,
        "pfa::store::between_segments=20*off->return",
    );
    assert!(
        !kid.wait().unwrap().success(),
        "the writer should have died"
    );
    let r = check(&path).unwrap();
    assert!(r.problems.is_empty(), "{r:?}");
    assert_eq!(r.cut.len(), 1, "{r:?}");
    assert!(
        r.cut[0].contains("rank 4: ckpt/image step") && r.cut[0].contains("segments written"),
        "{:?}",
        r.cut
    );
    let c = Container::open_read_only(&path).unwrap();
    let got = read_steps(&c, 0, rank);
    assert!(!got.is_empty());
    for (s, img) in got.iter().enumerate() {
        assert!(*img == expected(0, rank, s as u64, 0), "step {s}");
    }
    let mut out = Vec::new();
    shoal_pfa::tools::ls(&path, false, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("ckpt/image") && out.contains("cut:"), "{out}");
}

/// A torn last write (as a crash in the middle of `pwritev` leaves it):
/// `check` says which store was cut and the steps before it read back.
#[test]
fn torn_last_store_is_reported_as_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pfa");
    let c = Container::create(&path, &Options::new(1)).unwrap();
    let mut b = c.mmap("a", 100_000, 0, Mode::Write).unwrap();
    for step in 0..3 {
        b.as_mut_slice()
            .copy_from_slice(&pattern("a", 0, step, 100_000));
        b.append(100_000).unwrap();
    }
    drop(b);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 5000)
        .unwrap();
    let r = check(&path).unwrap();
    assert!(r.problems.is_empty(), "{r:?}");
    assert_eq!(r.cut.len(), 1, "{r:?}");
    assert!(
        r.cut[0].contains("a step 2") && r.cut[0].contains("torn"),
        "{:?}",
        r.cut
    );
    let mut out = Vec::new();
    shoal_pfa::tools::cat(&path, "a", 0, None, &mut out).unwrap();
    assert!(out == pattern("a", 0, 1, 100_000));
    // A writer going on overwrites the torn store with step 2 again.
    let c = Container::open(&path).unwrap();
    let mut b = c.mmap("a", 100_000, 0, Mode::Write).unwrap();
    assert_eq!(b.append(100_000).unwrap(), 2);
    drop(b);
    let r = check(&path).unwrap();
    assert!(r.problems.is_empty() && r.cut.is_empty(), "{r:?}");
}

fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

fn small_container(dir: &Path) -> PathBuf {
    let path = dir.join("c.pfa");
    let mut opts = Options::new(2);
    opts.chunk_size = 64 << 10;
    let c = Container::create(&path, &opts).unwrap();
    for rank in 0..2 {
        let mut b = c.mmap("f", 50_000, rank, Mode::WriteIncremental).unwrap();
        for step in 0..8 {
            b.as_mut_slice()[(step as usize * 6000)..][..6000]
                .copy_from_slice(&pattern("f", rank, step, 6000));
            b.append(50_000).unwrap();
        }
    }
    path
}

#[test]
fn damaged_containers_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = small_container(dir.path());
    let chunk = 64 << 10;

    // A header cut short, or not a container at all.
    let short = dir.path().join("short.pfa");
    std::fs::write(&short, b"SHOALPFA\x01").unwrap();
    let e = Container::open_read_only(&short).err().unwrap();
    assert!(e.to_string().contains("cut short"), "{e}");
    std::fs::write(&short, vec![7u8; 8192]).unwrap();
    let e = check(&short).unwrap_err();
    assert!(e.to_string().contains("not a PFA container"), "{e}");

    // A damaged header.
    let copy = dir.path().join("copy.pfa");
    std::fs::copy(&path, &copy).unwrap();
    flip(&copy, 17);
    let e = Container::open_read_only(&copy).err().unwrap();
    assert!(e.to_string().contains("checksum"), "{e}");

    // Damaged data in the middle of rank 0's chain: check names it, reading
    // that step fails with a message, earlier steps still read.
    std::fs::copy(&path, &copy).unwrap();
    flip(&copy, chunk + 4096 + 100); // rank 0, step 0's data
    let r = check(&copy).unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("data checksum")),
        "{r:?}"
    );
    let mut out = Vec::new();
    let e = shoal_pfa::tools::cat(&copy, "f", 0, Some(3), &mut out).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
    shoal_pfa::tools::cat(&copy, "f", 1, Some(3), &mut out).unwrap();

    // A damaged segment header in the middle: the chain picks up again at
    // the rank's next chunk and check says what was lost.
    std::fs::copy(&path, &copy).unwrap();
    flip(&copy, chunk + 40);
    let r = check(&copy).unwrap();
    assert!(r.problems.iter().any(|p| p.contains("lost")), "{r:?}");
}

/// Random damage anywhere: never a panic, always an answer or an error.
#[test]
fn random_damage_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = small_container(dir.path());
    let len = std::fs::metadata(&path).unwrap().len();
    let copy = dir.path().join("copy.pfa");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..150 {
        std::fs::copy(&path, &copy).unwrap();
        for _ in 0..3 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            flip(&copy, x % len);
        }
        if x.is_multiple_of(5) {
            let f = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
            f.set_len(x % len).unwrap();
        }
        let _ = check(&copy);
        let _ = shoal_pfa::tools::ls(&copy, true, &mut Vec::new());
        let mut out = Vec::new();
        let _ = shoal_pfa::tools::cat(&copy, "f", 1, None, &mut out);
        let _ = shoal_pfa::tools::extract(&copy, &dir.path().join("x"), false);
    }
}

#[test]
fn stores_on_the_local_disk_and_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let c = Container::create(dir.path().join("c.pfa"), &Options::new(1)).unwrap();
    let mut b = c.mmap("f", 5000, 0, Mode::Write).unwrap();
    b.append(5000).unwrap();
    eprintln!("local disk: {:?}", c.direct_io_note());
    if let Ok(dir) = tempfile::tempdir_in("/dev/shm") {
        let c = Container::create(dir.path().join("c.pfa"), &Options::new(1)).unwrap();
        let mut b = c.mmap("f", 5000, 0, Mode::Write).unwrap();
        b.append(5000).unwrap();
        // tmpfs takes O_DIRECT since Linux 6.6; before, the store falls
        // back to the page cache and says so. Either way the data is there.
        eprintln!("tmpfs: {:?}", c.direct_io_note());
        drop(b);
        assert_eq!(c.mmap("f", 5000, 0, Mode::Read).unwrap().steps(), 1);
    }
}
