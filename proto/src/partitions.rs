//! Split directories, after GIGA+ [Patil 2011]: a directory's entries are
//! partitioned by a hash of their names over servers. A directory starts
//! whole on its own server (partition 0, its own record, depth 0); a
//! partition that holds too many entries splits: partition `i` at depth `d`
//! keeps the names whose next hash bit is 0 and hands those whose bit is 1
//! to a new partition `i + 2^d` on another server, both at depth `d + 1`.
//! Each partition splits on its own, when its own server decides, so no
//! server coordinates the directory as a whole.
//!
//! The bits are taken from the top of the hash: partition `i` at depth `d`
//! holds one contiguous range of hashes, and its two halves are its and its
//! new sibling's ranges. Entries are stored in hash order (`server/src/keys.rs`),
//! so a listing in hash order is a listing of the partitions one after the
//! other, and a name (its hash) is a place in it that a split does not move:
//! a listing's cookie stays good across splits.
//!
//! A client routes a name with the partitions it knows of ([`route`]): the
//! deepest one on the name's path. It can only know too few (partitions are
//! never merged), so at worst it asks a partition its name has left, which
//! answers `Errno::MOVED`; the partition's record names the partitions split
//! from it, one step closer.

use xxhash_rust::xxh3::xxh3_64;

/// The deepest a split goes: 2^16 partitions, a partition per server.
pub const MAX_DEPTH: u32 = 16;

/// The hash of an entry's name: xxh3, whose output its specification fixes,
/// so every Shoal orders and places a name alike.
pub fn name_hash(name: &str) -> u64 {
    xxh3_64(name.as_bytes())
}

/// The partition a name of hash `hash` falls in at depth `depth`: its top
/// `depth` bits, most significant as the lowest bit of the index, so that
/// the bit a split at depth `d` looks at adds `2^d` to the index.
pub fn index_at(hash: u64, depth: u32) -> u32 {
    debug_assert!(depth <= MAX_DEPTH);
    (hash.reverse_bits() & ((1u64 << depth) - 1)) as u32
}

/// Whether a partition (`index` at `depth`) holds the name of hash `hash`.
pub fn holds(index: u32, depth: u32, hash: u64) -> bool {
    index_at(hash, depth) == index
}

/// The depth at which partition `index` was made: 0 for the directory
/// itself; `i + 2^d` was split from `i` at depth `d` and made at `d + 1`.
pub fn made_at(index: u32) -> u32 {
    u32::BITS - index.leading_zeros()
}

/// The partition a split of partition `index` at `depth` makes, if a
/// cluster of `servers` servers has room for it: each partition on a server
/// of its own ([`server_of`]).
pub fn split_off(index: u32, depth: u32, servers: u32) -> Option<u32> {
    let new = u64::from(index) + (1u64 << depth);
    (depth < MAX_DEPTH && new < u64::from(servers)).then_some(new as u32)
}

/// The server of partition `index` of a directory whose record is on
/// server `home`.
pub fn server_of(home: u32, index: u32, servers: u32) -> u32 {
    ((u64::from(home) + u64::from(index)) % u64::from(servers.max(1))) as u32
}

/// The partition that answers for `hash` among `known` (handles by index,
/// 0 where none is known; index 0 is the directory): the deepest known
/// partition on the hash's path, clearing the index's top bits one by one.
pub fn route(known: &[u64], hash: u64) -> u32 {
    let mut index = index_at(hash, MAX_DEPTH);
    while index != 0 && known.get(index as usize).is_none_or(|h| *h == 0) {
        index &= !(1 << (u32::BITS - 1 - index.leading_zeros()));
    }
    index
}

/// How deep partition `index` is as far as `known` tells: the depth it was
/// made at, one more for each partition known split from it.
pub fn depth_known(known: &[u64], index: u32) -> u32 {
    let mut depth = made_at(index);
    while depth < MAX_DEPTH
        && known
            .get(index as usize + (1usize << depth))
            .is_some_and(|h| *h != 0)
    {
        depth += 1;
    }
    depth
}

/// The last hash partition `index` at `depth` holds: its range is the hashes
/// whose top `depth` bits are the index's bits reversed.
pub fn last_hash(index: u32, depth: u32) -> u64 {
    if depth == 0 {
        return u64::MAX;
    }
    let top = u64::from(index).reverse_bits() >> (64 - depth) << (64 - depth);
    top | (u64::MAX >> depth)
}

/// Adds what `from` knows of a directory's partitions to `into`.
pub fn merge(into: &mut Vec<u64>, from: &[u64]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (i, h) in from.iter().enumerate().filter(|(_, h)| **h != 0) {
        into[i] = *h;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_halves_a_range_and_the_new_partition_is_index_plus_two_to_the_depth() {
        for hash in [
            0u64,
            1,
            u64::MAX,
            0x8000_0000_0000_0000,
            0x4000_0000_0000_0000,
            12345,
        ] {
            for d in 0..8 {
                let i = index_at(hash, d);
                let next = index_at(hash, d + 1);
                assert!(next == i || next == i + (1 << d), "{hash:#x} at {d}");
                assert!(holds(i, d, hash));
                assert!(hash <= last_hash(i, d));
            }
        }
        // Hash order is partition order: the top bit decides depth 1.
        assert_eq!(index_at(0x7fff_ffff_ffff_ffff, 1), 0);
        assert_eq!(index_at(0x8000_0000_0000_0000, 1), 1);
        assert_eq!(last_hash(0, 1), 0x7fff_ffff_ffff_ffff);
        assert_eq!(last_hash(1, 1), u64::MAX);
        assert_eq!(last_hash(2, 2), 0x7fff_ffff_ffff_ffff);
        assert_eq!(last_hash(0, 2), 0x3fff_ffff_ffff_ffff);
    }

    #[test]
    fn routes_go_to_the_deepest_known_partition() {
        let h = |top: u64| top << 62; // top two bits
                                      // Only the directory: everything is partition 0.
        assert_eq!(route(&[7], h(3)), 0);
        // 0 split to 1 at depth 0: the top bit decides.
        assert_eq!(route(&[7, 8], h(0)), 0);
        assert_eq!(route(&[7, 8], h(2)), 1);
        assert_eq!(route(&[7, 8], h(3)), 1);
        // 1 split to 3 at depth 1: the second bit decides among the top-bit ones.
        assert_eq!(route(&[7, 8, 0, 9], h(3)), 3);
        assert_eq!(route(&[7, 8, 0, 9], h(2)), 1);
        assert_eq!(depth_known(&[7, 8, 0, 9], 0), 1);
        assert_eq!(depth_known(&[7, 8, 0, 9], 1), 2);
        assert_eq!(made_at(3), 2);
    }

    #[test]
    fn splits_stop_at_one_partition_per_server() {
        assert_eq!(split_off(0, 0, 4), Some(1));
        assert_eq!(split_off(0, 1, 4), Some(2));
        assert_eq!(split_off(1, 1, 4), Some(3));
        assert_eq!(split_off(0, 2, 4), None);
        assert_eq!(split_off(0, 0, 1), None);
        assert_eq!(server_of(3, 2, 4), 1);
    }

    #[test]
    fn names_spread_evenly_over_partitions() {
        let mut counts = [0u32; 4];
        for i in 0..40_000 {
            counts[index_at(name_hash(&format!("p{}.f{i}", i % 8)), 2) as usize] += 1;
        }
        assert!(
            counts.iter().all(|c| (9_000..11_000).contains(c)),
            "{counts:?}"
        );
    }
}
