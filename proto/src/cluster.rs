//! The cluster file: which servers exist and the settings they all share.
//!
//! ```toml
//! secret_file = "secret"  # optional; relative to this file's directory
//!
//! [settings]            # every key optional; defaults below
//! sync = "replay"
//!
//! [[server]]
//! id = 0
//! addr = "127.0.0.1:7070"
//! data = "/var/lib/shoal/server-0"
//! metrics_addr = "127.0.0.1:9470"  # optional: serve /metrics to Prometheus
//! ```
//!
//! [`Settings`] is the one place where each setting and its default is documented.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, ShoalError};
use crate::handle::MAX_SERVERS;
use crate::secret::Secret;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The cluster secret every connection proves (see `auth`); a relative
    /// path is resolved against the cluster file's directory when loaded.
    /// Without it connections are not authenticated: scratch clusters only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// Where a client node's credential broker (the mount, `shoal agent`)
    /// listens, for processes that cannot read the secret
    /// (`credential`); a relative path is resolved as `secret_file` is.
    /// Default: `/run/shoal/broker-<hash of this file's path>.sock`
    /// ([`ClusterConfig::broker_socket`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_socket: Option<PathBuf>,
    /// This file's own path, as loaded (canonical): names the default
    /// broker socket.
    #[serde(skip)]
    pub loaded_from: Option<PathBuf>,
    #[serde(default)]
    pub settings: Settings,
    #[serde(rename = "server")]
    pub servers: Vec<ServerEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// Dense id, 0..N: also the top bits of every handle the server owns.
    pub id: u32,
    /// Address the server listens on and clients connect to.
    pub addr: SocketAddr,
    /// Directory for the server's KV store and large datafiles.
    pub data: PathBuf,
    /// Where the server answers Prometheus scrapes (`GET /metrics`, the
    /// counters and latency histograms of `shoal stats`), if anywhere: a
    /// per-server address, as `addr` is, so each machine's firewall and
    /// each server's port stay the operator's choice. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<SocketAddr>,
}

/// When a modifying metadata request becomes durable.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Durable before the reply.
    Full,
    /// Scratch mode: never wait for the disk; a crash may lose recent changes.
    None,
    /// Replayed commits (Lustre's; the default): a change from a client is answered once
    /// it is applied, with its place in the server's commit sequence; the
    /// server makes its changes durable in groups every `replay_flush_ms`
    /// (and at once for an fsync), and the client keeps each request until a
    /// reply says the server's durable sequence passed it. A server that
    /// crashed gets the lost requests again from their clients, in their
    /// original order, before it serves anything new (server/src/recovery.rs).
    Replay,
}

/// The default write threshold, and the largest write `"auto"` keeps: under
/// it, one client's sequential writes went faster gathered than direct
/// behind the writer (`shoal bench writesize`).
pub const DEFAULT_WRITE_THRESHOLD: u32 = 128 << 10;

/// The write threshold [Hildebrand 2006]: a number of bytes, or `"auto"`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum WriteThreshold {
    Bytes(u32),
    /// Each client finds the crossover of the two paths from what its own
    /// writes cost, and follows it as the load changes.
    Auto(Auto),
}

/// The word `auto` (a unit variant: serde reads and writes it as the string).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Auto {
    Auto,
}

impl WriteThreshold {
    pub const AUTO: WriteThreshold = WriteThreshold::Auto(Auto::Auto);
    /// `auto` in a message (`Distribution.write_threshold`, `DirHints`).
    const AUTO_ON_WIRE: u32 = u32::MAX;

    pub fn from_wire(v: u32) -> WriteThreshold {
        match v {
            Self::AUTO_ON_WIRE => Self::AUTO,
            b => WriteThreshold::Bytes(b),
        }
    }

    pub fn to_wire(self) -> u32 {
        self.bytes().unwrap_or(Self::AUTO_ON_WIRE)
    }

    /// The bytes of a fixed threshold; None for `auto`.
    pub fn bytes(self) -> Option<u32> {
        match self {
            WriteThreshold::Bytes(b) => Some(b),
            WriteThreshold::Auto(_) => None,
        }
    }
}

/// Cluster-wide settings. Every field has a default; the cluster file may set any.
///
/// Each field's doc comment ends with its tier, one line `Tier: NAME.`,
/// which `shoal config defaults` shows (and its tests require of every
/// setting):
/// - `stable`: a switch or policy whose default is what production runs,
///   under the tests (and measured, where it costs or buys speed); change
///   it for what its doc says it does.
/// - `tuning`: a size, interval or limit; any value `validate` accepts
///   works, trading speed or memory against what its doc says (how stale a
///   cache, how long a wait, how much a crash may take).
/// - `experimental`: off by default, or on by default from limited
///   evidence (its doc says which); its default, or the setting, may
///   change.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Durability of metadata: "replay" (default), "full" or "none" (scratch).
    /// Tier: stable.
    pub sync: SyncMode,
    /// Strip size of new files, in bytes. Default 1 MiB.
    /// Tier: tuning.
    pub strip_size: u64,
    /// Datafiles per new file; 0 means one on every server. Default 0.
    /// Tier: tuning.
    pub num_dfiles: u32,
    /// Datafiles up to this many bytes keep their bytes in the KV store. Default 64 KiB.
    /// Tier: tuning.
    pub inline_max: u64,
    /// Directory entries per readdir request. Default 512.
    /// Tier: tuning.
    pub readdir_batch: u32,
    /// Client name and attribute cache lifetime in milliseconds. Default 100.
    /// Tier: tuning.
    pub cache_ttl_ms: u64,
    /// Entries each of a client's caches and tables of objects keeps at
    /// most: names, attributes, layouts, capabilities, the leases it
    /// noted, in the mount the directories' parents and what the kernel
    /// was given under leases, in the preload library what listings
    /// brought (emptied past it). Past it the least used go (an
    /// evicted entry is asked for again); an inode the kernel forgets
    /// (FUSE FORGET) goes at once. Each table's size is in `shoal stats
    /// --mount`. A few hundred bytes an entry and table: at the default
    /// the mount's resident memory stays under 256 MiB however many files
    /// it sees (185 MiB after 1,000,000, `bench/results/mount-memory.md`).
    /// Default 65536.
    /// Tier: tuning.
    pub cache_entries: u32,
    /// Names a client keeps of the directories it made and follows change
    /// by change (`client/src/consistency/known_dirs.rs`: negative lookups without a
    /// message, and the directory delegations that need them), in all.
    /// Past it, the directory least lately confirmed is forgotten: its
    /// lookups go to its server again. Default 131072.
    /// Tier: tuning.
    pub known_names: u32,
    /// Metadata changes become durable by appending to a write-ahead log
    /// (one small fdatasync) instead of by a durable commit of the KV store's
    /// B-tree (several scattered page writes and an fsync); the store is
    /// checkpointed every 16 MiB of log. Default true; false is for measuring
    /// what it buys (`bench/results/kv-engine.md`).
    /// Tier: stable.
    pub metadata_log: bool,
    /// Requests a client keeps in flight per server connection. Default 256.
    /// Tier: tuning.
    pub max_inflight: u32,
    /// Requests a server handles at once per connection. Default 256.
    /// Tier: tuning.
    pub server_inflight: u32,
    /// Largest data payload of one request, in bytes; larger transfers are split
    /// into pipelined requests. Default 1 MiB.
    /// Tier: tuning.
    pub max_transfer: u32,
    /// Root squash: requests from uid 0 act as uid 65534 (`nobody`), and
    /// group 0 as group 65534, as NFS's `root_squash` does, so root on a
    /// client machine has no more rights than an unprivileged user. Default
    /// false.
    /// Tier: stable.
    pub root_squash: bool,
    /// How long a client waits for a server it cannot reach (down, or
    /// restarting) before a call fails with EHOSTUNREACH, in milliseconds:
    /// it tries to connect again now and then and sends the request once
    /// the server is back, so a restart within this time is never seen by
    /// applications. A request lost in flight (the server died holding it)
    /// is sent again; a create, rename, unlink or link whose first copy was
    /// applied is answered from the server's reply cache (`Op::reply_cached`).
    /// 0 fails at once (NFS's soft mount); a large value waits as NFS's hard
    /// mount does. A mount may choose its own (`-o restart_wait_ms=N`).
    /// Default 60000.
    /// Tier: tuning.
    pub restart_wait_ms: u32,
    /// With `sync = "replay"`: the longest a change waits in a server's
    /// memory before the group flush that makes it durable, in
    /// milliseconds. Default 5.
    /// Tier: tuning.
    pub replay_flush_ms: u32,
    /// With `sync = "replay"`: how long a restarted server waits for the
    /// clients that may hold changes it lost to replay them before it
    /// serves anything new, in milliseconds (Lustre's recovery window). A
    /// client that has not come back by then cannot replay, and its
    /// unflushed changes are lost. Default 20000.
    /// Tier: tuning.
    pub recovery_window_ms: u32,
    /// How often each server makes durable what it applied and nobody
    /// synced, in milliseconds: file data held in its store and not
    /// fsynced, and with `sync = "none"` every metadata change. A local
    /// file system's commit interval (ext4's `commit=`): a server killed,
    /// or its machine crashing, loses at most this much of such writes.
    /// Default 1000.
    /// Tier: tuning.
    pub data_flush_ms: u32,
    /// Lifetime of a capability, in seconds: the data right a file's server
    /// grants a user with its attributes, which the servers holding the
    /// data check (`capability.rs`). A chmod or chown reaches a user who
    /// already holds one within this time. Default 60.
    /// Tier: tuning.
    pub capability_ttl_s: u32,
    /// Lifetime of a user credential, in seconds: what a client node's
    /// broker issues a process that cannot read the cluster secret
    /// (`credential.rs`). A connection opened with one ends when it
    /// expires; the library asks for a new one before that. Longer is
    /// fewer broker round trips and reconnections; shorter, a stolen
    /// credential or a user's changed groups outlive less. Default 600.
    /// Tier: tuning.
    pub credential_ttl_s: u32,
    /// Leases: a server's answer to a lookup, getattr, listing or create
    /// lets the asking client cache what it names for this many
    /// milliseconds (renewed by each answer), and the server recalls it
    /// before another client's change to it returns. 0: no leases, every
    /// client cache lives `cache_ttl_ms`. Default 30000.
    /// Tier: tuning.
    pub lease_ms: u32,
    /// The longest a change waits for a client to acknowledge a recall of
    /// its lease, in milliseconds; a client that has not answered by then
    /// loses its leases on this server and the change goes on. Default 1000.
    /// Tier: tuning.
    pub lease_recall_ms: u32,
    /// Leases one server keeps at most (each one a client's on one object,
    /// about 64 bytes); when full, answers grant none and clients cache for
    /// `cache_ttl_ms` as without leases. Default 1000000.
    /// Tier: tuning.
    pub max_leases: u32,
    /// Directory delegations (`server/src/delegations.rs`): a client that
    /// knows every entry of a directory may take its delegation, answer
    /// creates of new files there itself, and send them many to a message
    /// within `delegated_flush_ms`; the server recalls the delegation (the
    /// client sends its unsent changes) before anyone else reads or changes
    /// the directory. Needs leases. A create that fails when it is sent (a
    /// server that restarted meanwhile lost the handles it reserved) is
    /// reported by the file's fsync and close (EIO). Unlinks of files the
    /// client made there are answered and sent the same way. A client that
    /// dies loses what it answered and had not sent (docs/reliability.md).
    /// No effect with `sync = "full"`, which answers nothing before it is
    /// durable. Default true.
    /// Tier: stable.
    pub dir_delegations: bool,
    /// How long a client keeps the creates it answered under a delegation
    /// before it sends them, in milliseconds (sooner when 256 wait in one
    /// directory, or when anything else is sent). Default 5.
    /// Tier: tuning.
    pub delegated_flush_ms: u32,
    /// A directory partition holding more entries than this splits: half
    /// its entries (by their names' hash) move to a new partition on the
    /// next server, until the directory has a partition on every server
    /// (GIGA+ [Patil 2011]; proto/src/partitions.rs). Lookups, creates and
    /// removes then go straight to the name's partition. A directory whose
    /// delegation a client holds does not split: its creates come from that
    /// one client already, many to a message. 0: directories never split.
    /// Default 0 (split directories are new: rename across partitions and
    /// fsck of partitions are still to come).
    /// Tier: experimental.
    pub split_entries: u64,

    // The write threshold [Hildebrand 2006]: the gathering path for small
    // writes, the direct path for large ones.
    /// Writes smaller than this many bytes take the gathering path: the
    /// client buffers them in a per-file gathering buffer that joins touching
    /// and overlapping writes and sends them later as a few large writes;
    /// larger writes go straight to the servers holding the strips. 0: every
    /// write goes direct. A mount may use another (`shoal mount -o
    /// write_threshold=N`). `"auto"`: each client follows the crossover of
    /// the two paths that its own writes' costs show, as it moves with the
    /// load. Default 128 KiB: below it one client's sequential writes went
    /// faster gathered than direct behind the writer (`shoal bench
    /// writesize`).
    /// Tier: tuning.
    pub write_threshold: WriteThreshold,
    /// Bytes a file's gathering buffer holds before it is sent. Default 1 MiB.
    /// Tier: tuning.
    pub gather_buffer: u32,
    /// Milliseconds a buffered write waits at most before it is sent, if
    /// nothing sends it sooner (a full buffer, fsync, close, a read or a
    /// large write of the file); a client with no thread of its own
    /// (libshoal, the preload library) sends on its next write or read
    /// after that, and everything at exit.
    /// Default 20.
    /// Tier: tuning.
    pub gather_delay_ms: u32,
    /// Write-behind on the direct path: a write of at least 32 KiB returns
    /// once it is on its way, while the file has fewer than this many bytes
    /// of such writes in flight (a write waits for room); a failed one is
    /// reported at the file's next fsync or close. 0: every direct write
    /// waits for its reply. Default 8 MiB (`bench/results/changes.md`).
    /// Other clients see a write once its writer's close or fsync returned
    /// (close-to-open), as with the gathering path's buffered writes.
    /// Tier: tuning.
    pub write_behind: u32,
    /// Streamed reads through the mount: a file at least this big opened
    /// read-only is read past the kernel's page cache, and the mount keeps
    /// up to this many bytes of it fetched ahead of a sequential reader
    /// (`fuse/src/read_streams.rs`). Ahead for four cold readers of 1 MiB
    /// pieces (1.08x-2.01x, `bench/results/read-streams.md`), but
    /// re-reads of files the page cache would hold go to the servers again
    /// (5-8x slower; with `uncached_reads`, to their disks) and a first open
    /// read in pieces of a few KiB is far behind
    /// (`bench/results/read-streams.md`), so off by default: 0, every
    /// file is read through the page cache with the kernel's readahead.
    /// Experimental: off by default, for mounts whose programs read large
    /// files in large pieces.
    /// Tier: experimental.
    pub stream_reads: u32,
    /// Server reads of at least this many bytes of a datafile pass through
    /// the page cache without staying there (`RWF_DONTCACHE`, asked of Linux
    /// 6.16 and later; an older kernel, or a file system without it, caches
    /// them as any other read), so that large streams leave the servers'
    /// memory to small files and small reads. A read is at most a strip and
    /// `max_transfer` long, so only strips at least this big qualify. On
    /// this machine's VM, where a first touch of memory freed long ago costs
    /// a fault in the host, cold streaming reads through the mount went
    /// 2.1x-2.2x; where memory is warm the kernel reads ahead less for them
    /// (0.8x-0.85x), and a large file read again by another client (or
    /// through `stream_reads`) comes from the servers' disks again
    /// (`bench/results/changes.md`). 0: every read stays in the page
    /// cache. Default 256 KiB. Experimental: the default was set from one
    /// VM's measurement (this 2-core Firecracker VM, whose host takes back
    /// memory the guest freed): 2.1x-2.2x there for cold memory, but 0.8x
    /// where memory is warm (as it is on a machine whose freed memory is
    /// not taken back, or in a loaded one that reuses it at once), where 0
    /// may do better.
    /// Tier: experimental.
    pub uncached_reads: u32,
    /// Scattered buffered writes (a buffer of several extents) go to the
    /// file's gathering server, its metafile's, which merges every
    /// client's into strip-aligned large writes; off, each extent goes
    /// straight to the strips' servers. Default true.
    /// Tier: stable.
    pub gather_on_server: bool,
    /// The mount takes its requests from the kernel through io_uring rings
    /// (FUSE over io_uring, Linux 6.14+) when the kernel offers them, which
    /// it does once root turns on `/sys/module/fuse/parameters/enable_uring`
    /// (`scripts/install-deps` does); off, or not offered, through reads
    /// and writes of `/dev/fuse`. Creates through the mount 1.13x-1.43x
    /// (`bench/results/changes.md`); in smallfile, reads of files
    /// held open since their create 0.82x and unlinks after closes 0.85x
    /// (`bench/results/changes.md`). Default true.
    /// Experimental: on by default from A/Bs on one VM and kernel (6.18),
    /// with some workloads slower; a kernel without the rings, or without
    /// `enable_uring`, never uses them, so most mounts run without.
    /// Tier: experimental.
    pub fuse_io_uring: bool,

    // The small-file techniques of [Carns 2009], each a switch (all on by default;
    // `shoal up --baseline` turns all five off).
    /// Precreate: servers keep pools of datafile handles created ahead on every
    /// other server, so a create is one augmented request plus the entry.
    /// Tier: stable.
    pub precreate: bool,
    /// Datafiles requested from a server in one batch when a pool is refilled.
    /// Tier: tuning.
    pub precreate_batch: u32,
    /// A pool under this many handles is refilled in the background.
    /// Tier: tuning.
    pub precreate_low_mark: u32,
    /// Stuffing: a new file has one datafile, on its metafile's server, until it
    /// grows past the first strip.
    /// Tier: stable.
    pub stuffing: bool,
    /// Commit coalescing: modifying requests that arrive together share a sync.
    /// Tier: stable.
    pub coalescing: bool,
    /// Sync at once while fewer than this many modifying requests are queued.
    /// Tier: tuning.
    pub low_watermark: u32,
    /// Sync once this many completions are waiting.
    /// Tier: tuning.
    pub high_watermark: u32,
    /// Eager I/O: data up to `eager_limit` travels inside the request (write)
    /// or the reply (read); above it, or with `eager` off, a rendezvous first.
    /// Tier: stable.
    pub eager: bool,
    /// Bytes carried eagerly. Default 16 KiB.
    /// Tier: tuning.
    pub eager_limit: u32,
    /// Readdirplus: directory listings with attributes fetched in batches
    /// (one listattr per server) instead of one getattr per entry.
    /// Tier: stable.
    pub readdirplus: bool,
    /// Beyond the papers: a new file's metafile lives on its parent directory's
    /// server, so a create (with precreate or stuffing) is one message that
    /// also adds the entry, and removing a stuffed file is one message.
    /// Tier: stable.
    pub colocate: bool,
    /// Mounts of this cluster let every user of the machine use them (FUSE
    /// `allow_other`; the mount checks permissions for each caller, and the
    /// servers check them again), as a multi-user node needs. Off: only
    /// the user who mounted may use a mount (`shoal mount --allow-other`
    /// turns it on for one mount).
    /// Tier: stable.
    pub allow_other: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync: SyncMode::Replay,
            strip_size: 1 << 20,
            num_dfiles: 0,
            inline_max: 64 << 10,
            readdir_batch: 512,
            cache_ttl_ms: 100,
            cache_entries: 1 << 16,
            known_names: 1 << 17,
            metadata_log: true,
            max_inflight: 256,
            server_inflight: 256,
            max_transfer: 1 << 20,
            root_squash: false,
            capability_ttl_s: 60,
            credential_ttl_s: 600,
            lease_ms: 30_000,
            lease_recall_ms: 1_000,
            max_leases: 1_000_000,
            dir_delegations: true,
            delegated_flush_ms: 5,
            split_entries: 0,
            restart_wait_ms: 60_000,
            replay_flush_ms: 5,
            recovery_window_ms: 20_000,
            data_flush_ms: 1_000,
            write_threshold: WriteThreshold::Bytes(DEFAULT_WRITE_THRESHOLD),
            gather_buffer: 1 << 20,
            gather_delay_ms: 20,
            write_behind: 8 << 20,
            stream_reads: 0,
            uncached_reads: 256 << 10,
            gather_on_server: true,
            fuse_io_uring: true,
            precreate: true,
            precreate_batch: 512,
            precreate_low_mark: 128,
            stuffing: true,
            coalescing: true,
            low_watermark: 1,
            high_watermark: 8,
            eager: true,
            eager_limit: 16 << 10,
            readdirplus: true,
            colocate: true,
            allow_other: false,
        }
    }
}

impl Settings {
    /// The names of the five technique switches of [Carns 2009].
    pub const TECHNIQUES: [&'static str; 5] = [
        "precreate",
        "stuffing",
        "coalescing",
        "eager",
        "readdirplus",
    ];

    /// Switches for what Shoal adds beyond the papers, on by default too.
    pub const BEYOND_PAPERS: [&'static str; 1] = ["colocate"];

    /// Every switch off, and every change durable before its reply: the
    /// baseline protocol of [Carns 2009].
    pub fn baseline() -> Settings {
        Settings {
            sync: SyncMode::Full,
            precreate: false,
            stuffing: false,
            coalescing: false,
            eager: false,
            readdirplus: false,
            colocate: false,
            ..Settings::default()
        }
    }

    /// Whether clients take directory delegations and answer creates and
    /// unlinks there themselves: `dir_delegations`, with leases (a holder
    /// must be recallable), and not under `sync = "full"`, whose every
    /// acknowledged change must survive the client's crash too.
    pub fn delegates_dirs(&self) -> bool {
        self.dir_delegations && self.lease_ms > 0 && self.sync != SyncMode::Full
    }

    /// Every switch name, [Carns 2009]'s five first.
    pub fn switches() -> impl Iterator<Item = &'static str> {
        Self::TECHNIQUES.into_iter().chain(Self::BEYOND_PAPERS)
    }

    /// Applies `key=value` (as given to `shoal up --set`).
    pub fn set(&mut self, assignment: &str) -> Result<()> {
        let (key, value) = assignment.split_once('=').ok_or_else(|| {
            ShoalError::invalid(format!("setting {assignment:?} is not key=value"))
        })?;
        let mut table = toml::Table::try_from(&*self)
            .map_err(|e| ShoalError::invalid(format!("settings: {e}")))?;
        if !table.contains_key(key) {
            return Err(ShoalError::invalid(format!(
                "unknown setting {key:?}; known: {}",
                table.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let parsed: toml::Value = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        table.insert(key.to_string(), parsed);
        let updated: Settings = table
            .try_into()
            .map_err(|e| ShoalError::invalid(format!("setting {key}={value}: {e}")))?;
        updated.validate()?;
        *self = updated;
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        let check = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(ShoalError::invalid(format!("setting {what}")))
            }
        };
        check(
            self.strip_size >= 4096 && self.strip_size <= 1 << 30,
            "strip_size must be between 4096 and 1 GiB",
        )?;
        check(
            self.inline_max <= 1 << 20,
            "inline_max must be at most 1 MiB",
        )?;
        check(
            (1..=4096).contains(&self.readdir_batch),
            "readdir_batch must be 1..=4096",
        )?;
        check(self.cache_entries >= 1, "cache_entries must be at least 1")?;
        check(self.max_inflight >= 1, "max_inflight must be at least 1")?;
        check(
            (1..=60_000).contains(&self.replay_flush_ms),
            "replay_flush_ms must be 1..=60000",
        )?;
        check(
            (1..=60_000).contains(&self.data_flush_ms),
            "data_flush_ms must be 1..=60000",
        )?;
        check(
            (1..=60_000).contains(&self.delegated_flush_ms),
            "delegated_flush_ms must be 1..=60000",
        )?;
        check(
            self.server_inflight >= 1,
            "server_inflight must be at least 1",
        )?;
        check(
            (4096..=crate::frame::MAX_PAYLOAD as u32).contains(&self.max_transfer),
            "max_transfer must be between 4096 and 16 MiB",
        )?;
        check(
            (1..=3600).contains(&self.capability_ttl_s),
            "capability_ttl_s must be 1..=3600",
        )?;
        check(
            (10..=crate::credential::MAX_LIFETIME_S as u32).contains(&self.credential_ttl_s),
            "credential_ttl_s must be 10..=86400",
        )?;
        check(
            (1..=4096).contains(&self.precreate_batch),
            "precreate_batch must be 1..=4096",
        )?;
        check(
            self.precreate_low_mark < self.precreate_batch,
            "precreate_low_mark must be below precreate_batch",
        )?;
        check(
            self.low_watermark >= 1 && self.high_watermark >= self.low_watermark,
            "watermarks need 1 <= low_watermark <= high_watermark",
        )?;
        check(
            self.eager_limit <= self.max_transfer,
            "eager_limit must be at most max_transfer",
        )?;
        check(
            (4096..=64 << 20).contains(&self.gather_buffer),
            "gather_buffer must be between 4096 and 64 MiB",
        )?;
        check(
            self.write_threshold
                .bytes()
                .is_none_or(|b| b <= self.gather_buffer),
            "write_threshold must be at most gather_buffer",
        )?;
        check(
            (1..=60_000).contains(&self.gather_delay_ms),
            "gather_delay_ms must be 1..=60000",
        )?;
        check(
            self.write_behind <= 64 << 20,
            "write_behind must be at most 64 MiB",
        )?;
        check(
            self.stream_reads <= 64 << 20,
            "stream_reads must be at most 64 MiB",
        )?;
        check(
            self.uncached_reads <= self.max_transfer,
            "uncached_reads must be at most max_transfer (no read is longer; 0 turns it off)",
        )
    }
}

impl ClusterConfig {
    /// The cluster file at `path`, checked (`validate`).
    pub fn load(path: &Path) -> Result<ClusterConfig> {
        let config = ClusterConfig::read(path)?;
        config
            .validate()
            .map_err(|e| e.context(format!("cluster file {}", path.display())))?;
        Ok(config)
    }

    /// The cluster file at `path` as written, not checked yet: for `shoal
    /// up`, which repairs the ports of a file it wrote before checking it.
    pub fn read(path: &Path) -> Result<ClusterConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ShoalError::from(e).context(format!("cluster file {}", path.display())))?;
        let mut config: ClusterConfig = toml::from_str(&text)
            .map_err(|e| ShoalError::invalid(format!("cluster file {}: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for file in [&mut config.secret_file, &mut config.broker_socket] {
            if let Some(f) = file.as_mut().filter(|p| p.is_relative()) {
                *f = dir.join(&*f);
            }
        }
        config.loaded_from = Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.into()));
        Ok(config)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = toml::to_string_pretty(self)
            .map_err(|e| ShoalError::invalid(format!("cluster file: {e}")))?;
        std::fs::write(path, text)
            .map_err(|e| ShoalError::from(e).context(format!("writing {}", path.display())))
    }

    pub fn validate(&self) -> Result<()> {
        if self.servers.is_empty() {
            return Err(ShoalError::invalid("no [[server]] entries"));
        }
        if self.servers.len() as u64 > MAX_SERVERS as u64 {
            return Err(ShoalError::invalid("too many servers"));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.id as usize != i {
                return Err(ShoalError::invalid(format!(
                    "server ids must be 0..N in order; entry {i} has id {}",
                    s.id
                )));
            }
            // Two entries at one address would be one server taking the
            // requests meant for both (and, locally, two that cannot both
            // listen). Port 0 is "not chosen yet" (`shoal up` chooses).
            if let Some(other) = self.servers[..i]
                .iter()
                .find(|o| o.addr == s.addr && s.addr.port() != 0)
            {
                return Err(ShoalError::invalid(format!(
                    "servers {} and {} both have the address {}",
                    other.id, s.id, s.addr
                )));
            }
            // Likewise a metrics address: no server could listen there.
            if let Some(m) = s.metrics_addr {
                let taken = self
                    .servers
                    .iter()
                    .find(|o| o.addr == m || (o.id < s.id && o.metrics_addr == Some(m)));
                if let Some(other) = taken.filter(|_| m.port() != 0) {
                    return Err(ShoalError::invalid(format!(
                        "server {}'s metrics_addr {m} is taken by server {}",
                        s.id, other.id
                    )));
                }
            }
        }
        self.settings.validate()
    }

    /// The cluster secret, read from `secret_file`; `None` when the cluster
    /// has none (connections are then not authenticated).
    pub fn secret(&self) -> Result<Option<Secret>> {
        self.secret_file.as_deref().map(Secret::load).transpose()
    }

    /// Where this cluster's credential broker listens on this node: the
    /// file's `broker_socket`, else one under `/run/shoal` named by a hash
    /// of the cluster file's path (the mount and the library find the same
    /// one without being told), None for a cluster without a secret or a
    /// file not loaded from disk.
    pub fn broker_socket(&self) -> Option<PathBuf> {
        use sha2::Digest;
        self.secret_file.as_ref()?;
        if let Some(p) = &self.broker_socket {
            return Some(p.clone());
        }
        let path = self.loaded_from.as_ref()?;
        let hash = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
        let name: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
        Some(PathBuf::from(format!("/run/shoal/broker-{name}.sock")))
    }

    pub fn server(&self, id: u32) -> Result<&ServerEntry> {
        self.servers.get(id as usize).ok_or_else(|| {
            ShoalError::invalid(format!(
                "no server with id {id} (the cluster has {})",
                self.servers.len()
            ))
        })
    }

    pub fn num_servers(&self) -> u32 {
        self.servers.len() as u32
    }

    /// Datafiles per new file, with 0 meaning all servers.
    pub fn dfiles_per_file(&self) -> u32 {
        match self.settings.num_dfiles {
            0 => self.num_servers(),
            n => n.min(self.num_servers()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_minimal_file_with_defaults() {
        let c: ClusterConfig =
            toml::from_str("[[server]]\nid = 0\naddr = \"127.0.0.1:7000\"\ndata = \"/tmp/s0\"\n")
                .unwrap();
        c.validate().unwrap();
        assert_eq!(c.settings, Settings::default());
        assert_eq!(c.dfiles_per_file(), 1);
    }

    #[test]
    fn two_servers_at_one_address_are_refused() {
        let file = |port1| {
            format!(
                "[[server]]\nid = 0\naddr = \"127.0.0.1:7000\"\ndata = \"/tmp/s0\"\n\
                 [[server]]\nid = 1\naddr = \"127.0.0.1:{port1}\"\ndata = \"/tmp/s1\"\n"
            )
        };
        let same: ClusterConfig = toml::from_str(&file(7000)).unwrap();
        let e = same.validate().unwrap_err();
        assert!(
            e.message
                .contains("servers 0 and 1 both have the address 127.0.0.1:7000"),
            "{}",
            e.message
        );
        let distinct: ClusterConfig = toml::from_str(&file(7001)).unwrap();
        distinct.validate().unwrap();
    }

    #[test]
    fn a_metrics_address_is_checked() {
        let file = |metrics: &str| {
            format!(
                "[[server]]\nid = 0\naddr = \"127.0.0.1:7000\"\ndata = \"/tmp/s0\"\n\
                 metrics_addr = \"{metrics}\"\n\
                 [[server]]\nid = 1\naddr = \"127.0.0.1:7001\"\ndata = \"/tmp/s1\"\n"
            )
        };
        let good: ClusterConfig = toml::from_str(&file("127.0.0.1:9470")).unwrap();
        good.validate().unwrap();
        assert_eq!(
            good.servers[0].metrics_addr,
            Some("127.0.0.1:9470".parse().unwrap())
        );
        assert_eq!(good.servers[1].metrics_addr, None);
        let e = toml::from_str::<ClusterConfig>(&file("localhost")).unwrap_err();
        assert!(e.to_string().contains("metrics_addr"), "{e}");
        let taken: ClusterConfig = toml::from_str(&file("127.0.0.1:7001")).unwrap();
        let e = taken.validate().unwrap_err();
        assert!(
            e.message
                .contains("server 0's metrics_addr 127.0.0.1:7001 is taken by server 1"),
            "{}",
            e.message
        );
    }

    #[test]
    fn set_changes_one_key_and_rejects_bad_ones() {
        let mut s = Settings::default();
        s.set("strip_size=65536").unwrap();
        assert_eq!(s.strip_size, 65536);
        s.set("sync=none").unwrap();
        assert_eq!(s.sync, SyncMode::None);
        assert!(s
            .set("strip_size=1")
            .unwrap_err()
            .message
            .contains("strip_size"));
        assert!(s
            .set("no_such=1")
            .unwrap_err()
            .message
            .contains("unknown setting"));
        assert!(s.set("garbage").is_err());
    }

    #[test]
    fn the_write_threshold_is_bytes_or_auto() {
        let mut s = Settings::default();
        assert_eq!(s.write_threshold, WriteThreshold::Bytes(128 << 10));
        s.set("write_threshold=auto").unwrap();
        assert_eq!(s.write_threshold, WriteThreshold::AUTO);
        s.set("write_threshold=4096").unwrap();
        assert_eq!(s.write_threshold.bytes(), Some(4096));
        assert!(s.set("write_threshold=often").is_err());
        assert!(
            s.set("write_threshold=2097152").is_err(),
            "over gather_buffer"
        );
        let text = toml::to_string(&Settings {
            write_threshold: WriteThreshold::AUTO,
            ..Settings::default()
        })
        .unwrap();
        assert!(text.contains("write_threshold = \"auto\""), "{text}");
    }

    #[test]
    fn baseline_turns_every_technique_off() {
        let b = Settings::baseline();
        assert!(!b.precreate && !b.stuffing && !b.coalescing && !b.eager && !b.readdirplus);
        assert!(!b.colocate);
        assert_eq!(b.sync, SyncMode::Full);
        let d = Settings::default();
        assert!(d.precreate && d.stuffing && d.coalescing && d.eager && d.readdirplus);
        for t in Settings::switches() {
            let mut s = Settings::baseline();
            s.set(&format!("{t}=true")).unwrap();
            assert_ne!(s, Settings::baseline(), "{t} is a setting");
        }
    }

    #[test]
    fn a_relative_secret_file_is_resolved_against_the_cluster_file() {
        let dir = std::env::temp_dir().join(format!("shoal-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.toml");
        std::fs::write(
            &path,
            "secret_file = \"secret\"\n[[server]]\nid = 0\naddr = \"127.0.0.1:7000\"\ndata = \"/tmp/s0\"\n",
        )
        .unwrap();
        let c = ClusterConfig::load(&path).unwrap();
        assert_eq!(c.secret_file.as_deref(), Some(&*dir.join("secret")));
        assert!(c.secret().is_err(), "a missing secret file is an error");
        std::fs::write(dir.join("secret"), "abc\n").unwrap();
        assert_eq!(c.secret().unwrap(), Some(Secret::new(b"abc").unwrap()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_behind_past_its_bound_is_refused_by_name() {
        let mut s = Settings::default();
        s.set("write_behind=8388608").unwrap();
        assert_eq!(s.write_behind, 8 << 20);
        let e = s
            .set(&format!("write_behind={}", (64 << 20) + 1))
            .unwrap_err();
        assert!(e.message.contains("write_behind"), "{e}");
        assert_eq!(s.write_behind, 8 << 20, "a refused value changes nothing");
    }

    #[test]
    fn uncached_reads_longer_than_any_read_are_refused_by_name() {
        let mut s = Settings::default();
        s.set("uncached_reads=0").unwrap();
        s.set(&format!("uncached_reads={}", s.max_transfer))
            .unwrap();
        let e = s
            .set(&format!("uncached_reads={}", s.max_transfer + 1))
            .unwrap_err();
        assert!(e.message.contains("uncached_reads"), "{e}");
        assert_eq!(
            s.uncached_reads, s.max_transfer,
            "a refused value changes nothing"
        );
    }

    #[test]
    fn ids_must_be_dense() {
        let c: std::result::Result<ClusterConfig, _> =
            toml::from_str("[[server]]\nid = 1\naddr = \"127.0.0.1:7000\"\ndata = \"/tmp/s0\"\n");
        assert!(c.unwrap().validate().is_err());
    }
}
