//! The 64-bit handle space, partitioned into one range per server.
//!
//! The top 16 bits of a handle are the owning server's id, the low 48 bits a
//! counter local to that server, starting at 1. Handle 0 is never used. The root
//! directory is the first handle of server 0, so its handle is 1, which is also
//! FUSE's root inode number: handles serve as inode numbers unchanged.

pub type Handle = u64;

const SERVER_SHIFT: u32 = 48;
const COUNTER_MASK: u64 = (1 << SERVER_SHIFT) - 1;

/// Largest number of servers a cluster can have (the last id is left unused so
/// that every range's end fits in a u64).
pub const MAX_SERVERS: u32 = (1 << 16) - 1;

/// Handle reservations (a directory delegation's, `DelegateDir`) a server
/// holds per client, the oldest dropped for a new one. A client holds no
/// more per server than this, asking one at a time, so that the one a
/// server drops is always one the client no longer uses.
pub const MAX_RESERVATIONS: usize = 64;

/// The root directory's handle.
pub const ROOT: Handle = 1;

/// The server that owns `handle`.
pub fn server_of(handle: Handle) -> u32 {
    (handle >> SERVER_SHIFT) as u32
}

/// The handle with counter value `counter` on server `server`.
pub fn make(server: u32, counter: u64) -> Handle {
    assert!(
        counter > 0 && counter <= COUNTER_MASK,
        "handle counter out of range"
    );
    ((server as u64) << SERVER_SHIFT) | counter
}

/// The counter part of a handle.
pub fn counter_of(handle: Handle) -> u64 {
    handle & COUNTER_MASK
}

/// Half-open range `[low, high)` of the handles owned by `server`.
pub fn range_of(server: u32) -> (Handle, Handle) {
    let low = (server as u64) << SERVER_SHIFT;
    (low + 1, low + COUNTER_MASK + 1)
}

/// Whether `handle` can name an object in a cluster of `servers` servers.
pub fn is_valid(handle: Handle, servers: u32) -> bool {
    counter_of(handle) != 0 && server_of(handle) < servers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_name_their_server() {
        for server in [0, 1, 3, MAX_SERVERS - 1] {
            let h = make(server, 42);
            assert_eq!(server_of(h), server);
            assert_eq!(counter_of(h), 42);
            let (low, high) = range_of(server);
            assert!(low <= h && h < high);
        }
        assert_eq!(make(0, 1), ROOT);
        assert!(!is_valid(0, 4));
        assert!(!is_valid(make(4, 1), 4));
        assert!(is_valid(make(3, 1), 4));
    }
}
