//! What this client may cache and answer itself, and for how long: the TTL
//! caches (`cache`, `name_cache`), the leases servers grant and recall
//! (`leases`, its ledger in `lease_ledger`), directories whose every entry
//! is known (`known_dirs`), directory delegations and the creates answered
//! under them (`delegations`), the kept changes of `sync = "replay"`
//! (`kept_changes`), and the partitions of split directories
//! (`partition_maps`).

pub mod cache;
pub(crate) mod delegations;
pub(crate) mod kept_changes;
pub(crate) mod known_dirs;
pub(crate) mod lease_ledger;
pub(crate) mod leases;
pub(crate) mod name_cache;
pub(crate) mod partition_maps;
