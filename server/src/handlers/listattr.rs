//! Readdirplus listattr: being written (issue 3); until then ENOTSUP and
//! clients list with one getattr per entry.

use shoal_proto::error::Result;

use super::require;
use crate::service::{Reply, Request, Service};

pub fn listattr(_s: &Service, _r: &Request) -> Result<Reply> {
    require(false, "readdirplus")?;
    Ok(Reply::default())
}
