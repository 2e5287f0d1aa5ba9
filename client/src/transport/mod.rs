//! Talking to the servers: one multiplexed connection per server (`conn`),
//! the pool that opens, reopens and fences them (`pool`), what a new
//! connection proves (`authority`: the secret or a user credential), and
//! read data received straight into a caller's memory (`landing`).

pub(crate) mod authority;
pub(crate) mod conn;
pub(crate) mod landing;
pub(crate) mod pool;
