//! Striping arithmetic for simple striping: logical strip `k` of a file lives on
//! datafile `k % n` at local strip `k / n`. Shared by the client (to split I/O and
//! compute sizes) and the server.

use crate::msg::Distribution;

/// Largest file size Shoal supports (1 PiB): every offset + length a client
/// sends stays below it, so no striping arithmetic can overflow.
pub const MAX_FILE_SIZE: u64 = 1 << 50;

/// One piece of a logical byte range that falls on a single datafile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Index of the datafile in the distribution.
    pub datafile: usize,
    /// Offset inside that datafile.
    pub local_offset: u64,
    /// Offset of this piece inside the caller's buffer.
    pub buf_offset: usize,
    pub len: usize,
}

/// Splits the logical range `[offset, offset + len)` into per-strip pieces, in
/// logical order.
pub fn split(strip_size: u64, n: usize, offset: u64, len: usize) -> Vec<Piece> {
    assert!(strip_size > 0 && n > 0);
    let mut pieces = Vec::new();
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let strip = pos / strip_size;
        let within = pos % strip_size;
        let take = ((strip_size - within) as usize).min(len - done);
        pieces.push(Piece {
            datafile: (strip % n as u64) as usize,
            local_offset: (strip / n as u64) * strip_size + within,
            buf_offset: done,
            len: take,
        });
        done += take;
    }
    pieces
}

/// Logical file size given each datafile's local size (index-aligned with the
/// distribution's datafiles).
pub fn file_size(strip_size: u64, local_sizes: &[u64]) -> u64 {
    let n = local_sizes.len() as u64;
    local_sizes
        .iter()
        .enumerate()
        .filter(|(_, s)| **s > 0)
        .map(|(i, s)| {
            let last = s - 1;
            let global_strip = (last / strip_size) * n + i as u64;
            global_strip * strip_size + last % strip_size + 1
        })
        .max()
        .unwrap_or(0)
}

/// The local size datafile `index` must have for the file to be `size` bytes long.
pub fn local_size(strip_size: u64, n: usize, index: usize, size: u64) -> u64 {
    let n = n as u64;
    let i = index as u64;
    let full = size / strip_size;
    let rem = size % strip_size;
    let mut local = (full / n + u64::from(i < full % n)) * strip_size;
    if rem > 0 && full % n == i {
        local += rem;
    }
    local
}

impl Distribution {
    pub fn width(&self) -> usize {
        self.datafiles.len()
    }

    /// The layout of a file without a metafile (a no_metafile directory's
    /// file): its one datafile is the file itself, and one strip spans the
    /// largest file, so it never stripes however far it grows.
    pub fn single(datafile: u64) -> Distribution {
        Distribution {
            strip_size: MAX_FILE_SIZE,
            datafiles: vec![datafile],
            stuffed: false,
            width: 1,
            write_threshold: None,
        }
    }

    /// Whether this is the layout of file `h` without a metafile: a
    /// metafile's datafiles never include the metafile itself.
    pub fn is_single(&self, h: u64) -> bool {
        self.datafiles == [h]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_walks_strips_round_robin() {
        let p = split(4, 3, 2, 12);
        assert_eq!(
            p,
            vec![
                Piece {
                    datafile: 0,
                    local_offset: 2,
                    buf_offset: 0,
                    len: 2
                },
                Piece {
                    datafile: 1,
                    local_offset: 0,
                    buf_offset: 2,
                    len: 4
                },
                Piece {
                    datafile: 2,
                    local_offset: 0,
                    buf_offset: 6,
                    len: 4
                },
                Piece {
                    datafile: 0,
                    local_offset: 4,
                    buf_offset: 10,
                    len: 2
                },
            ]
        );
        assert!(split(4, 3, 100, 0).is_empty());
    }

    #[test]
    fn size_and_local_size_agree_for_every_length() {
        for n in 1..5usize {
            for size in 0..60u64 {
                let locals: Vec<u64> = (0..n).map(|i| local_size(4, n, i, size)).collect();
                assert_eq!(file_size(4, &locals), size, "n={n} size={size}");
                assert_eq!(locals.iter().sum::<u64>(), size);
            }
        }
    }

    #[test]
    fn a_single_datafile_layout_never_stripes() {
        let d = Distribution::single(7);
        assert!(d.is_single(7) && !d.is_single(8));
        let p = split(d.strip_size, d.width(), 3 << 30, 8 << 20);
        assert_eq!(p.len(), 1, "one piece however large");
        assert_eq!((p[0].datafile, p[0].local_offset), (0, 3 << 30));
        assert_eq!(file_size(d.strip_size, &[5 << 30]), 5 << 30);
        assert_eq!(local_size(d.strip_size, 1, 0, MAX_FILE_SIZE), MAX_FILE_SIZE);
    }

    #[test]
    fn size_follows_the_furthest_byte_written() {
        // One byte written at logical offset 9 with strip 4 over 2 datafiles:
        // strip 2 -> datafile 0, local offset 4 + 1.
        let p = split(4, 2, 9, 1)[0];
        let mut locals = vec![0u64; 2];
        locals[p.datafile] = p.local_offset + 1;
        assert_eq!(file_size(4, &locals), 10);
    }
}
