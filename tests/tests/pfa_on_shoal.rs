//! Parallel file aggregation ([Kato 2011], `shoal-pfa`) on a Shoal mount:
//! four ranks store their logical files into one container concurrently,
//! one of them incrementally; everything reads back byte for byte, `pfa
//! check` finds the container whole, and the mount holds one file, not a
//! file per rank per step.

use std::io::SeekFrom;

use shoal_pfa::{Container, Mode, Options};
use shoal_tests::{pattern, Cluster};

const RANKS: u32 = 4;
const STEPS: u64 = 6;
/// The paper's record size.
const RECORD: usize = 272_383;

fn record(rank: u32, step: u64) -> Vec<u8> {
    pattern(u64::from(rank) * 1000 + step, RECORD)
}

#[test]
fn ranks_aggregate_into_one_container_on_the_mount() {
    let mut cluster = Cluster::builder().servers(4).start();
    let mnt = cluster.mount();
    let path = mnt.join("out.pfa");
    Container::create(&path, &Options::new(RANKS)).unwrap();
    std::thread::scope(|s| {
        for rank in 0..RANKS {
            let path = &path;
            s.spawn(move || {
                let c = Container::open(path).unwrap();
                let mode = if rank == 0 {
                    Mode::WriteIncremental
                } else {
                    Mode::Write
                };
                let mut b = c.mmap("field", RECORD, rank, mode).unwrap();
                for step in 0..STEPS {
                    let want = record(rank, step);
                    if rank == 0 && step > 0 {
                        // A checkpoint that changes only its first pages.
                        b.as_mut_slice()[..20_000].copy_from_slice(&want[..20_000]);
                    } else {
                        b.as_mut_slice().copy_from_slice(&want);
                    }
                    assert_eq!(b.append(RECORD).unwrap(), step);
                }
                c.close().unwrap();
            });
        }
    });

    let c = Container::open_read_only(&path).unwrap();
    for rank in 0..RANKS {
        let mut b = c.mmap("field", RECORD, rank, Mode::Read).unwrap();
        let mut image = record(rank, 0);
        for step in 0..STEPS {
            assert!(!b.eof(), "rank {rank} step {step} is there");
            if rank == 0 {
                image[..20_000].copy_from_slice(&record(rank, step)[..20_000]);
            } else {
                image = record(rank, step);
            }
            assert!(
                b.as_slice()[..b.len()] == image[..],
                "rank {rank} step {step} reads back"
            );
            b.seek(SeekFrom::Current(1)).unwrap();
        }
        assert!(b.eof());
    }
    let report = shoal_pfa::tools::check(&path).unwrap();
    assert!(
        report.problems.is_empty() && report.cut.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.steps as u64, u64::from(RANKS) * STEPS);
    let files: Vec<_> = std::fs::read_dir(&mnt).unwrap().collect();
    assert_eq!(files.len(), 1, "one container, no file per rank or step");
}
