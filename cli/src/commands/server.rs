//! `shoal server --config C --id N`: one server in the foreground.

use std::path::Path;

use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::Result;

pub fn run(config: &Path, id: u32) -> Result<()> {
    let cluster = ClusterConfig::load(config)?;
    cluster.server(id)?;
    shoal_server::run(cluster, id)
}
