//! What this client proves when it opens a connection: the cluster secret
//! if the process can read it (the servers' peers, the mount, root's
//! programs), else a user credential from the node's broker
//! (`shoal_net::broker`), which lets it act only as the user the kernel
//! says it is. A cluster file without a secret proves nothing.
//!
//! A credential is asked for when the client starts and again whenever a
//! connection is opened with less than half of its life left, so that every
//! connection lives at least a quarter of `credential_ttl_s`; a connection
//! with less than a quarter left is replaced at its next use
//! ([`Authority::expiring`]), before its server would end it.

use std::path::PathBuf;
use std::sync::Mutex;

use shoal_proto::auth::{Proof, Secret};
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::credential::Issued;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Cred;

pub enum Authority {
    /// A cluster without a secret: scratch, nothing to prove.
    Open,
    Secret(Secret),
    /// A user credential, and the broker that renews it (None: one given
    /// to the client, [`Authority::given`], used until it expires).
    Credential {
        /// The user it names: every renewal must name the same one.
        user: Cred,
        broker: Option<PathBuf>,
        lifetime_s: u64,
        held: Box<Mutex<Issued>>,
    },
    /// Neither readable secret nor broker: why, for every connection.
    None(ShoalError),
}

/// What a new connection proves: owned, so it outlives the lock on the
/// held credential.
pub enum Proving {
    Nothing,
    Secret(Secret),
    Credential(Box<Issued>),
}

impl Proving {
    pub fn proof(&self) -> Option<Proof<'_>> {
        match self {
            Proving::Nothing => None,
            Proving::Secret(s) => Some(Proof::Secret(s)),
            Proving::Credential(i) => Some(Proof::Credential(i)),
        }
    }

    /// When the connection's credential expires (seconds since the
    /// epoch), for one opened with a credential.
    pub fn expires_s(&self) -> Option<u64> {
        match self {
            Proving::Credential(i) => Some(i.credential.expires_s),
            _ => None,
        }
    }
}

impl Authority {
    /// The cluster secret if it can be read; else, if it cannot for want of
    /// permission, a credential from this node's broker.
    pub fn of(config: &ClusterConfig) -> Authority {
        let unreadable = match config.secret() {
            Ok(None) => return Authority::Open,
            Ok(Some(secret)) => return Authority::Secret(secret),
            Err(e) if [Errno::EACCES, Errno::EPERM].contains(&e.errno) => e,
            Err(e) => return Authority::None(e),
        };
        let Some(socket) = config.broker_socket() else {
            return Authority::None(unreadable);
        };
        match shoal_net::broker::ask(&socket) {
            Ok(issued) => Authority::Credential {
                user: issued.credential.cred,
                broker: Some(socket),
                lifetime_s: config.settings.credential_ttl_s as u64,
                held: Box::new(Mutex::new(issued)),
            },
            Err(e) => Authority::None(ShoalError::new(
                Errno::EACCES,
                format!("{}; and {}", unreadable.message, e.message),
            )),
        }
    }

    /// A credential issued elsewhere (a broker asked by another process,
    /// or made by a holder of the secret), used until it expires.
    pub fn given(issued: Issued, config: &ClusterConfig) -> Authority {
        Authority::Credential {
            user: issued.credential.cred,
            broker: None,
            lifetime_s: config.settings.credential_ttl_s as u64,
            held: Box::new(Mutex::new(issued)),
        }
    }

    /// Whom a credential lets this client act for (None: anyone it says,
    /// with the secret or on a cluster without one).
    pub fn user(&self) -> Option<Cred> {
        match self {
            Authority::Credential { user, .. } => Some(*user),
            _ => None,
        }
    }

    /// Why this client cannot open a connection at all, if it cannot.
    pub fn refused(&self) -> Option<&ShoalError> {
        match self {
            Authority::None(e) => Some(e),
            _ => None,
        }
    }

    /// What the next connection proves: with a credential, one with at
    /// least half its life left (asking the broker for a new one if need
    /// be, for the same user: a process whose identity changed under the
    /// library is refused rather than served as the new one).
    pub fn proving(&self) -> Result<Proving> {
        match self {
            Authority::Open => Ok(Proving::Nothing),
            Authority::Secret(s) => Ok(Proving::Secret(s.clone())),
            Authority::None(e) => Err(e.clone()),
            Authority::Credential {
                user,
                broker,
                lifetime_s,
                held,
            } => {
                let mut held = lock(held);
                let now = shoal_proto::time::now_s();
                if let Some(socket) = broker
                    .as_ref()
                    .filter(|_| held.credential.expires_s < now + lifetime_s / 2)
                {
                    let fresh = shoal_net::broker::ask(socket)?;
                    if fresh.credential.cred != *user {
                        return Err(ShoalError::new(
                            Errno::EACCES,
                            format!(
                                "this process acts as {:?} now, its connections as {user:?}",
                                fresh.credential.cred
                            ),
                        ));
                    }
                    *held = fresh;
                }
                Ok(Proving::Credential(Box::new(held.clone())))
            }
        }
    }

    /// Whether a connection whose credential expires at `expires_s` should
    /// be replaced before its next use.
    pub fn expiring(&self, expires_s: Option<u64>) -> bool {
        match (self, expires_s) {
            (
                Authority::Credential {
                    broker: Some(_),
                    lifetime_s,
                    ..
                },
                Some(at),
            ) => shoal_proto::time::now_s() + lifetime_s / 4 >= at,
            _ => false,
        }
    }
}

fn lock(held: &Mutex<Issued>) -> std::sync::MutexGuard<'_, Issued> {
    held.lock().unwrap_or_else(|e| e.into_inner())
}
