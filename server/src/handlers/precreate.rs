//! Precreate pools and stuffing (being written).

use shoal_proto::error::Result;

use super::require;
use crate::service::{Reply, Request, Service};

pub fn create_file(s: &Service, _r: &Request) -> Result<Reply> {
    require(false && s.config.settings.precreate, "precreate")?;
    Ok(Reply::default())
}

pub fn unstuff(s: &Service, _r: &Request) -> Result<Reply> {
    require(false && s.config.settings.stuffing, "stuffing")?;
    Ok(Reply::default())
}
