//! What both sides of the wire share beyond the wire format itself
//! (`shoal-proto`): opening a connection to a server ([`connect`], used by
//! the client's connections and a server's connections to its peers), the
//! sending side of a connection ([`sink`], used by the client's connections
//! and the server's listener), how much the receiving side of those buffers
//! ([`receive`]), TCP keepalive on a server's connections
//! ([`keepalive`]) and free loopback ports for local clusters ([`ports`],
//! used by `shoal up` and the test kit); and a client node's credential
//! broker ([`broker`]: the mount and `shoal agent` serve it, libshoal asks).

pub mod broker;
pub mod connect;
pub mod keepalive;
pub mod ports;
pub mod receive;
pub mod sink;
