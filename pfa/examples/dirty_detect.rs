//! How much finding the changed pages costs, per store interval, for the
//! checkpoint workload of [Kato 2011] (a 737,534-byte image, about 30% of
//! its pages changed each step): page protection (what shoal-pfa uses)
//! against soft-dirty bits, and against no tracking at all.
//!
//! `cargo run --release -p shoal-pfa --example dirty_detect`

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use shoal_pfa::dirty::{page_size, Tracker};

const SIZE: usize = 737_534;
const ROUNDS: usize = 2000;

fn map(len: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p as *mut u8
}

/// The pages changed in round `r`: about 30%, a different set each round.
fn changed(r: usize, pages: usize) -> impl Iterator<Item = usize> {
    (0..pages).filter(move |p| (p * 7 + r * 3) % 10 < 3)
}

fn main() {
    let p = page_size();
    let pages = SIZE.div_ceil(p);
    let len = pages * p;
    let per = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;

    // No tracking: the writes alone.
    let buf = map(len);
    let t = Instant::now();
    for r in 0..ROUNDS {
        for n in changed(r, pages) {
            // SAFETY: inside the mapping.
            unsafe { *buf.add(n * p) = r as u8 };
        }
    }
    let base = per(t);
    println!("writes alone:           {base:8.1} us per step");

    // Page protection: a fault per first write to a page, then one
    // mprotect per stored run.
    let buf = map(len);
    let tr = Tracker::new(buf, pages).unwrap();
    let mut found = 0;
    let t = Instant::now();
    for r in 0..ROUNDS {
        for n in changed(r, pages) {
            // SAFETY: inside the mapping (faults once, then writable).
            unsafe { *buf.add(n * p) = r as u8 };
        }
        for n in 0..pages {
            if tr.is_dirty(n) {
                found += 1;
                tr.clean(n, 1).unwrap();
            }
        }
    }
    let prot = per(t);
    let want: usize = (0..ROUNDS).map(|r| changed(r, pages).count()).sum();
    assert_eq!(found, want, "page protection missed pages");
    println!(
        "page protection:        {prot:8.1} us per step ({:.2} us per changed page)",
        (prot - base) / (want as f64 / ROUNDS as f64)
    );
    drop(tr);

    // Soft-dirty bits: clear the whole process's bits, write, read
    // /proc/self/pagemap (bit 55) for the buffer's pages.
    let buf = map(len);
    let clear = OpenOptions::new().write(true).open("/proc/self/clear_refs");
    let pagemap = File::open("/proc/self/pagemap");
    match (clear, pagemap) {
        (Ok(mut clear), Ok(pm)) => {
            let mut entries = vec![0u8; pages * 8];
            let at = (buf as usize / p * 8) as u64;
            let mut found = 0;
            let mut extra = 0;
            let t = Instant::now();
            for r in 0..ROUNDS {
                clear.write_all(b"4").unwrap();
                for n in changed(r, pages) {
                    // SAFETY: inside the mapping.
                    unsafe { *buf.add(n * p) = r as u8 };
                }
                pm.read_exact_at(&mut entries, at).unwrap();
                let dirty: Vec<usize> = (0..pages)
                    .filter(|&n| {
                        let e = u64::from_le_bytes(entries[n * 8..n * 8 + 8].try_into().unwrap());
                        e & (1 << 55) != 0
                    })
                    .collect();
                found += dirty.len();
                extra += dirty.iter().filter(|&&n| (n * 7 + r * 3) % 10 >= 3).count();
            }
            let soft = per(t);
            if found == 0 {
                println!(
                    "soft-dirty bits:        never set: this kernel has no CONFIG_MEM_SOFT_DIRTY"
                );
                return;
            }
            println!(
                "soft-dirty bits:        {soft:8.1} us per step ({:.2} us per changed page; {} of {} pages reported, {} not written)",
                (soft - base) / (want as f64 / ROUNDS as f64),
                found,
                want,
                extra
            );
        }
        _ => println!("soft-dirty bits:        not available here"),
    }
}
