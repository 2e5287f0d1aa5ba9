//! The tokio runtime of the benchmarks that call the native client.

use shoal_proto::error::Result;

/// The runtime for native-client calls: two worker threads, as the CLI's.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
