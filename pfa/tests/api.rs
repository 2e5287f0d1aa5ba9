//! The API on a local file system, in one process: stores read back byte
//! for byte, incremental stores write only changed pages, reopening goes on.

use std::io::SeekFrom;

use shoal_pfa::{Container, Mode, Options};

fn pattern(step: u64, rank: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + step * 7 + u64::from(rank) * 13) as u8)
        .collect()
}

fn read_all(c: &Container, name: &str, size: usize, rank: u32) -> Vec<Vec<u8>> {
    let mut b = c.mmap(name, size, rank, Mode::Read).unwrap();
    let mut out = vec![];
    while !b.eof() {
        out.push(b.as_slice()[..b.len()].to_vec());
        b.seek(SeekFrom::Current(1)).unwrap();
    }
    out
}

#[test]
fn full_stores_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pfa");
    let c = Container::create(&path, &Options::new(3)).unwrap();
    let size = 272_383;
    for rank in 0..3 {
        let mut b = c.mmap("foo.txt", size, rank, Mode::Write).unwrap();
        for step in 0..5 {
            b.as_mut_slice().copy_from_slice(&pattern(step, rank, size));
            assert_eq!(b.append(size - step as usize).unwrap(), step);
        }
    }
    c.sync().unwrap();
    let c = Container::open_read_only(&path).unwrap();
    for rank in 0..3 {
        let steps = read_all(&c, "foo.txt", size, rank);
        assert_eq!(steps.len(), 5);
        for (step, got) in steps.iter().enumerate() {
            let want = &pattern(step as u64, rank, size)[..size - step];
            assert!(got == want, "rank {rank} step {step}");
        }
    }
    assert_eq!(read_all(&c, "other", 10, 0).len(), 0);
}

#[test]
fn incremental_stores_only_changed_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pfa");
    let c = Container::create(&path, &Options::new(1)).unwrap();
    let size = 737_534;
    let page = 4096;
    let mut b = c.mmap("ckpt", size, 0, Mode::WriteIncremental).unwrap();
    let mut images = vec![];
    let mut img = pattern(0, 0, size);
    b.as_mut_slice().copy_from_slice(&img);
    b.append(size).unwrap();
    images.push(img.clone());
    for step in 1..6u64 {
        // change about 30% of the pages
        for p in (0..size.div_ceil(page)).filter(|p| (p * 7 + step as usize) % 10 < 3) {
            let at = p * page + (step as usize % 100);
            if at < size {
                img[at] = img[at].wrapping_add(1);
                b.as_mut_slice()[at] = img[at];
            }
        }
        b.append(size).unwrap();
        images.push(img.clone());
    }
    drop(b);
    let chain = c.chain(0, shoal_pfa::index::Verify::All).unwrap();
    assert!(chain.problems.is_empty() && chain.cut.is_empty());
    let stores = shoal_pfa::index::stores(&chain).remove("ckpt").unwrap();
    let pages = size.div_ceil(page) as u64;
    assert_eq!(stores[0].data_bytes(), pages * page as u64);
    for s in &stores[1..] {
        let changed = s.data_bytes() / page as u64;
        assert!(
            changed <= pages * 35 / 100,
            "step {} wrote {changed} pages",
            s.step
        );
        assert!(
            changed >= pages * 25 / 100,
            "step {} wrote {changed} pages",
            s.step
        );
    }
    assert_eq!(read_all(&c, "ckpt", size, 0), images);
    // Reading steps out of order rebuilds from the base.
    let mut r = c.mmap("ckpt", size, 0, Mode::Read).unwrap();
    for step in [4u64, 2, 5, 0, 3] {
        r.seek(SeekFrom::Start(step)).unwrap();
        assert!(r.as_slice() == &images[step as usize][..]);
    }
    r.seek(SeekFrom::End(0)).unwrap();
    assert!(r.eof());
}

#[test]
fn reopening_goes_on_after_the_last_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pfa");
    let opts = Options::new(2);
    for session in 0..3u64 {
        let c = Container::open_or_create(&path, &opts).unwrap();
        let mut b = c.mmap("f", 10_000, 1, Mode::WriteIncremental).unwrap();
        for step in 0..2 {
            b.as_mut_slice()
                .copy_from_slice(&pattern(session * 2 + step, 1, 10_000));
            assert_eq!(b.append(10_000).unwrap(), session * 2 + step);
        }
        c.close().unwrap();
    }
    let c = Container::open(&path).unwrap();
    let steps = read_all(&c, "f", 10_000, 1);
    assert_eq!(steps.len(), 6);
    for (s, got) in steps.iter().enumerate() {
        assert_eq!(got, &pattern(s as u64, 1, 10_000));
    }
    assert!(c.mmap("f", 10, 0, Mode::Write).is_ok());
    let _held = c.mmap("g", 10, 0, Mode::Write).unwrap();
    assert!(
        c.mmap("g", 10, 0, Mode::Write).is_err(),
        "mapped twice for writing"
    );
    assert!(
        c.mmap("g", 10, 2, Mode::Write).is_err(),
        "rank out of range"
    );
}

#[test]
fn stores_larger_than_a_chunk_span_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pfa");
    let mut opts = Options::new(2);
    opts.chunk_size = 64 << 10;
    let c = Container::create(&path, &opts).unwrap();
    let size = 1 << 20;
    for rank in 0..2 {
        let mut b = c.mmap("big", size, rank, Mode::WriteIncremental).unwrap();
        for step in 0..3 {
            b.as_mut_slice().copy_from_slice(&pattern(step, rank, size));
            b.append(size).unwrap();
        }
    }
    for rank in 0..2 {
        let steps = read_all(&c, "big", size, rank);
        assert_eq!(steps.len(), 3);
        for (s, got) in steps.iter().enumerate() {
            assert!(got == &pattern(s as u64, rank, size));
        }
    }
}
