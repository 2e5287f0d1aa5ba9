//! Key layout of a server's KV store. One ordered keyspace; the first byte says
//! what a key holds, handles are 8 bytes big-endian so keys sort by handle.
//!
//! | key                              | value                                  |
//! |----------------------------------|----------------------------------------|
//! | `O` handle                       | `ObjectRecord` (protobuf, shoal.proto) |
//! | `E` dir-handle hash name-bytes   | entry: handle (8 bytes BE) + kind (1); |
//! |                                  | hash: the name's (8 BE, partitions.rs) |
//! | `B` handle                       | inline bytes of a small datafile       |
//! | `X` handle xattr-name            | xattr value                            |
//! | `P` server-id (4 BE) handle      | empty: a datafile precreated on that   |
//! |                                  | server, in this server's pool for it   |
//! |                                  | (pools.rs encodes these keys)          |
//! | `R` client-id request-id (8+8 BE)| a cached reply: when it was made (ms   |
//! |                                  | since the epoch, 8 BE) + its body      |
//! |                                  | (reply_cache.rs)                       |
//! | `K` client-id (8 BE)             | empty: a client that may hold changes  |
//! |                                  | this server answered and did not make  |
//! |                                  | durable (sync = "replay"; client_table)|
//! | `Q` dir-handle index (4 BE)      | the handle (8 BE) of partition `index` |
//! |                                  | of split directory `dir`, made here    |
//! |                                  | (partitions.rs)                        |
//! | `Cnext_handle`                   | last handle counter allocated (8 BE)   |
//! | `Cobjects`                       | number of objects stored (8 BE)        |
//! | `Ctransno`                       | the commit sequence number of the last |
//! |                                  | transaction applied (8 BE)             |
//! | `Cboot`                          | the verifier of the server's last start|
//! |                                  | (8 BE; sync = "replay": recovery.rs)   |
//! | `Cformat`                        | the layout of these keys (4 BE):       |
//! |                                  | [`FORMAT`]                             |
//! | `Cwal_seq`                       | first sequence number the metadata log |
//! |                                  | may hold after the last checkpoint     |
//! |                                  | (8 BE; written by `kv::wal` only)      |
//!
//! Directory entries of one directory are contiguous and sorted by their
//! names' hash (`shoal_proto::partitions::name_hash`), so a readdir is one
//! prefix scan that resumes after the last name returned, and a split
//! directory's partitions, each a range of hashes, list one after another in
//! that same order.
//!
//! Directory hints ([Kuhn 2008]) have no key of their own: they are a field of
//! the directory's `O` record (`ObjectRecord.hints`), read with it. An `E`
//! entry of kind DATAFILE names a file without a metafile (made in a
//! no_metafile directory); its `O` record holds the file's attributes.

use shoal_proto::partitions::name_hash;
use shoal_proto::{Handle, ObjectKind};

pub const OBJECT: u8 = b'O';
pub const ENTRY: u8 = b'E';
pub const BYTES: u8 = b'B';
pub const XATTR: u8 = b'X';
pub const POOL: u8 = b'P';
pub const REPLY: u8 = b'R';
pub const CLIENT: u8 = b'K';
pub const PARTITION: u8 = b'Q';

pub const NEXT_HANDLE: &[u8] = b"Cnext_handle";
pub const OBJECT_COUNT: &[u8] = b"Cobjects";
pub const WAL_SEQ: &[u8] = b"Cwal_seq";
pub const BOOT: &[u8] = b"Cboot";
pub const TRANSNO: &[u8] = b"Ctransno";
pub const FORMAT_KEY: &[u8] = b"Cformat";
/// The key layout this code reads: 2 since entries sort by their names'
/// hash (1, unmarked: by name).
pub const FORMAT: u32 = 2;

fn tagged(tag: u8, handle: Handle) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(tag);
    k.extend_from_slice(&handle.to_be_bytes());
    k
}

fn tagged_name(tag: u8, handle: Handle, name: &str) -> Vec<u8> {
    let mut k = tagged(tag, handle);
    k.extend_from_slice(name.as_bytes());
    k
}

/// The object a key is about, for a key of an object's record, entries,
/// bytes or xattrs (what a lease on the object covers); None for others.
pub fn object_of(key: &[u8]) -> Option<Handle> {
    match key.first()? {
        &OBJECT | &ENTRY | &BYTES | &XATTR => {
            Some(Handle::from_be_bytes(key.get(1..9)?.try_into().ok()?))
        }
        _ => None,
    }
}

pub fn object(handle: Handle) -> Vec<u8> {
    tagged(OBJECT, handle)
}

pub fn bytes(handle: Handle) -> Vec<u8> {
    tagged(BYTES, handle)
}

pub fn entry(dir: Handle, name: &str) -> Vec<u8> {
    let mut k = tagged(ENTRY, dir);
    k.extend_from_slice(&name_hash(name).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Prefix of all entries of `dir`.
pub fn entries(dir: Handle) -> Vec<u8> {
    tagged(ENTRY, dir)
}

pub fn xattr(handle: Handle, name: &str) -> Vec<u8> {
    tagged_name(XATTR, handle, name)
}

/// Prefix of all xattrs of `handle`.
pub fn xattrs(handle: Handle) -> Vec<u8> {
    tagged(XATTR, handle)
}

/// The handle part of a tagged key.
pub fn handle_of(key: &[u8]) -> Option<Handle> {
    key.get(1..9)?.try_into().ok().map(Handle::from_be_bytes)
}

/// The name part of an xattr key.
pub fn xattr_name_of(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[9..]).into_owned()
}

/// The name part of an entry key.
pub fn entry_name_of(key: &[u8]) -> String {
    String::from_utf8_lossy(key.get(17..).unwrap_or_default()).into_owned()
}

/// The key of the partition `index` of split directory `dir` made here.
pub fn partition(dir: Handle, index: u32) -> Vec<u8> {
    let mut k = tagged(PARTITION, dir);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// The key of the cached reply to request `id` of `client`.
pub fn reply(client: u64, id: u64) -> Vec<u8> {
    let mut k = tagged(REPLY, client);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The key saying that `client` may hold changes to replay.
pub fn client(client: u64) -> Vec<u8> {
    tagged(CLIENT, client)
}

/// The client and request id of a cached reply's key.
pub fn decode_reply(key: &[u8]) -> Option<(u64, u64)> {
    if key.len() != 17 || key[0] != REPLY {
        return None;
    }
    let id = u64::from_be_bytes(key[9..17].try_into().ok()?);
    Some((handle_of(key)?, id))
}

pub fn encode_entry(handle: Handle, kind: ObjectKind) -> Vec<u8> {
    let mut v = handle.to_be_bytes().to_vec();
    v.push(kind as i32 as u8);
    v
}

pub fn decode_entry(value: &[u8]) -> Option<(Handle, ObjectKind)> {
    if value.len() != 9 {
        return None;
    }
    let handle = Handle::from_be_bytes(value[..8].try_into().ok()?);
    let kind = ObjectKind::try_from(value[8] as i32).ok()?;
    Some((handle, kind))
}

pub fn encode_u64(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

pub fn decode_u64(value: &[u8]) -> u64 {
    value.try_into().map(u64::from_be_bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_a_directory_share_a_prefix_and_sort_by_hash() {
        let a = entry(7, "a");
        let b = entry(7, "b");
        assert!(a.starts_with(&entries(7)) && b.starts_with(&entries(7)));
        assert_eq!(a < b, name_hash("a") < name_hash("b"));
        assert!(!entry(8, "a").starts_with(&entries(7)));
        assert_eq!(entry_name_of(&b), "b");
        let v = encode_entry(42, ObjectKind::Metafile);
        assert_eq!(decode_entry(&v), Some((42, ObjectKind::Metafile)));
        assert_eq!(decode_entry(b"short"), None);
    }

    #[test]
    fn reply_keys_round_trip() {
        assert_eq!(decode_reply(&reply(7, u64::MAX)), Some((7, u64::MAX)));
        assert_eq!(decode_reply(&entry(7, "a")), None);
    }
}
