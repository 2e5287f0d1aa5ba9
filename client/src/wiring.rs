//! Building a [`Client`]: its shared state, and the hooks its connections
//! call back into (a server's recall, the fence before other requests).
//! The one file that knows every part, so that no part needs to know it.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use shoal_proto::cluster::ClusterConfig;
use shoal_proto::credential::Issued;

use crate::client::{Client, Inner};
use crate::consistency::cache::{self, TtlCache};
use crate::consistency::{delegations, known_dirs, lease_ledger, leases, name_cache};
use crate::data::caps;
use crate::data::dists::DistCache;
use crate::namespace;
use crate::transport::authority::Authority;
use crate::transport::pool::Pool;
use crate::types::current_cred;

impl Client {
    /// A client of the cluster described by `config`. Connections open lazily;
    /// call [`Client::ping_all`] to check that every server answers.
    pub fn new(config: ClusterConfig) -> Client {
        let authority = Authority::of(&config);
        Client::with_authority(config, authority)
    }

    /// A client that opens its connections with the user credential
    /// `issued` (from a broker, `shoal_net::broker::ask`), and so acts only
    /// for the user it names, until it expires, even in a process that
    /// could read the cluster secret.
    pub fn with_credential(config: ClusterConfig, issued: Issued) -> Client {
        let authority = Authority::given(issued, &config);
        Client::with_authority(config, authority)
    }

    fn with_authority(config: ClusterConfig, authority: Authority) -> Client {
        let ttl = Duration::from_millis(config.settings.cache_ttl_ms);
        let entries = config.settings.cache_entries as usize;
        let known_names = config.settings.known_names as usize;
        let first = std::process::id() % config.num_servers();
        let delay = Duration::from_millis(config.settings.delegated_flush_ms as u64);
        // With a credential, the client acts for the user it names, and
        // only for that user.
        let cred = authority.user().unwrap_or_else(current_cred);
        let client = Client {
            inner: Arc::new_cyclic(|me| Inner {
                names: name_cache::NameCache::new(ttl, entries),
                attrs: TtlCache::bounded(ttl, entries),
                hints: TtlCache::bounded(cache::FOREVER, entries),
                dists: DistCache::new(ttl, entries),
                caps: TtlCache::bounded(caps::keep_for(config.settings.capability_ttl_s), entries),
                known_dirs: known_dirs::KnownDirs::new(ttl, known_names),
                partitions: Default::default(),
                next_server: AtomicU32::new(first),
                uncommitted_writes: Default::default(),
                gathering: Default::default(),
                write_behind: Default::default(),
                listings_ahead: Default::default(),
                leases: lease_ledger::Ledger::new(entries),
                delegated: delegations::DelegatedCreates::new(delay, known_names),
                pool: Pool::new(config, authority, leases::on_recall(me.clone())),
            }),
            cred,
        };
        let fence = namespace::delegated::fence(Arc::downgrade(&client.inner));
        client.inner.pool.set_fence(fence);
        client
    }
}
