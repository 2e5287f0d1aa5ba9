//! Readdirplus listattr (being written).

use shoal_proto::error::Result;

use super::require;
use crate::service::{Reply, Request, Service};

pub fn listattr(s: &Service, _r: &Request) -> Result<Reply> {
    require(false && s.config.settings.readdirplus, "readdirplus")?;
    Ok(Reply::default())
}
