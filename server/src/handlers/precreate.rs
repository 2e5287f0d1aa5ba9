//! Precreate pools and stuffing: being written (issue 3); until then the
//! operations answer ENOTSUP and clients use the baseline create.

use shoal_proto::error::Result;

use super::require;
use crate::service::{Reply, Request, Service};

pub fn create_file(_s: &Service, _r: &Request) -> Result<Reply> {
    require(false, "precreate")?;
    Ok(Reply::default())
}

pub fn unstuff(_s: &Service, _r: &Request) -> Result<Reply> {
    require(false, "stuffing")?;
    Ok(Reply::default())
}
