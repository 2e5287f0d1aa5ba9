//! kvbench: measure candidate embedded KV engines on Shoal's own metadata pattern.
//!
//! Every engine sits behind the same tiny `Engine` trait. Phases (per engine, per run):
//!   durable       2,000 ops; op = one txn putting 2 keys (16 B keys, 120 B values:
//!                 metadata object + directory entry), then made durable.
//!   grouped8      same 2,000 ops, applied non-durably; one durable sync after every 8
//!                 (commit coalescing as the commit queue would do it).
//!   grouped8_txn  (extra) same 2,000 ops, 8 ops folded into one durable transaction.
//!   nondurable    20,000 ops, each one 8 KiB inline-data put, never synced individually;
//!                 one sync at the end (included in the timing).
//!   get           100,000 random point gets over 20,000 metadata keys (120 B values).
//!   scan          20 directories x 1,000 entries; each directory read fully in batches
//!                 of 64 by "start after key", a fresh read snapshot per batch (one
//!                 readdir RPC each). Rate is entries/s.
//! Runs alternate the engine order (rotation) so machine noise spreads evenly.
//! Raw rows are CSV on stdout; medians on stderr.
//!
//! Usage: kvbench [--runs N] [--dir PATH] [--engines redb,fjall,heed]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

type Kv<'a> = (&'a [u8], &'a [u8]);

trait Engine {
    /// Apply all pairs in one atomic write; make it durable before returning iff `durable`.
    fn put(&mut self, kvs: &[Kv<'_>], durable: bool);
    /// Make every earlier non-durable write durable.
    fn sync(&mut self);
    /// Point get; returns the value length (the value is read, not copied).
    fn get(&self, key: &[u8]) -> Option<usize>;
    /// Keys with `prefix` strictly after `after` (or from the start), at most `limit`,
    /// read under one fresh snapshot. Appends owned keys to `out`, returns bytes of values seen.
    fn scan_after(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize, out: &mut Vec<Vec<u8>>) -> usize;
}

/// Smallest key greater than every key starting with `prefix` (prefix never all-0xff here).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    panic!("prefix has no upper bound");
}

// ---------------------------------------------------------------------------------------
#[cfg(feature = "redb")]
mod redb_engine {
    use super::*;
    use redb::{Durability, ReadableDatabase, TableDefinition};
    use std::ops::Bound;

    const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

    pub struct RedbEngine {
        db: redb::Database,
    }

    impl RedbEngine {
        pub fn open(dir: &Path) -> Self {
            std::fs::create_dir_all(dir).unwrap();
            let db = redb::Database::create(dir.join("shoal.redb")).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(T).unwrap();
            tx.commit().unwrap();
            RedbEngine { db }
        }
    }

    impl Engine for RedbEngine {
        fn put(&mut self, kvs: &[Kv<'_>], durable: bool) {
            let mut tx = self.db.begin_write().unwrap();
            tx.set_durability(if durable { Durability::Immediate } else { Durability::None })
                .unwrap();
            {
                let mut t = tx.open_table(T).unwrap();
                for (k, v) in kvs {
                    t.insert(*k, *v).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        fn sync(&mut self) {
            // An Immediate commit persists every earlier Durability::None commit.
            let mut tx = self.db.begin_write().unwrap();
            tx.set_durability(Durability::Immediate).unwrap();
            tx.commit().unwrap();
        }
        fn get(&self, key: &[u8]) -> Option<usize> {
            let tx = self.db.begin_read().unwrap();
            let t = tx.open_table(T).unwrap();
            t.get(key).unwrap().map(|g| g.value().len())
        }
        fn scan_after(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize, out: &mut Vec<Vec<u8>>) -> usize {
            let tx = self.db.begin_read().unwrap();
            let t = tx.open_table(T).unwrap();
            let end = prefix_end(prefix);
            let lo = match after {
                Some(a) => Bound::Excluded(a),
                None => Bound::Included(prefix),
            };
            let mut bytes = 0;
            for item in t.range::<&[u8]>((lo, Bound::Excluded(end.as_slice()))).unwrap().take(limit) {
                let (k, v) = item.unwrap();
                bytes += v.value().len();
                out.push(k.value().to_vec());
            }
            bytes
        }
    }
}

// ---------------------------------------------------------------------------------------
#[cfg(feature = "fjall")]
mod fjall_engine {
    use super::*;
    use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
    use std::ops::Bound;

    pub struct FjallEngine {
        db: Database,
        ks: Keyspace,
    }

    impl FjallEngine {
        pub fn open(dir: &Path) -> Self {
            let db = Database::builder(dir).open().unwrap();
            let ks = db.keyspace("kv", KeyspaceCreateOptions::default).unwrap();
            FjallEngine { db, ks }
        }
    }

    impl Engine for FjallEngine {
        fn put(&mut self, kvs: &[Kv<'_>], durable: bool) {
            let mut b = self.db.batch();
            for (k, v) in kvs {
                b.insert(&self.ks, *k, *v);
            }
            b.commit().unwrap();
            if durable {
                self.db.persist(PersistMode::SyncAll).unwrap();
            }
        }
        fn sync(&mut self) {
            self.db.persist(PersistMode::SyncAll).unwrap();
        }
        fn get(&self, key: &[u8]) -> Option<usize> {
            self.ks.get(key).unwrap().map(|v| v.len())
        }
        fn scan_after(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize, out: &mut Vec<Vec<u8>>) -> usize {
            let end = prefix_end(prefix);
            let lo = match after {
                Some(a) => Bound::Excluded(a),
                None => Bound::Included(prefix),
            };
            let mut bytes = 0;
            for g in self.ks.range::<&[u8], _>((lo, Bound::Excluded(end.as_slice()))).take(limit) {
                let (k, v) = g.into_inner().unwrap();
                bytes += v.len();
                out.push(k.to_vec());
            }
            bytes
        }
    }
}

// ---------------------------------------------------------------------------------------
#[cfg(feature = "heed")]
mod heed_engine {
    use super::*;
    use heed::types::Bytes;
    use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode};
    use std::ops::Bound;

    pub struct HeedEngine {
        env: Env,
        db: Database<'static, Bytes, Bytes>,
        nosync: bool,
    }

    impl HeedEngine {
        pub fn open(dir: &Path) -> Self {
            std::fs::create_dir_all(dir).unwrap();
            let env = unsafe {
                EnvOpenOptions::new()
                    .map_size(8 << 30)
                    .max_dbs(4)
                    .open(dir)
                    .unwrap()
            };
            let w = env.write_txn().unwrap();
            let db = env
                .create_databases_and_commit(w, |wdo, w| -> heed::Result<_> {
                    let db = wdo.create_database::<Bytes, Bytes>(w, Some("kv"))?;
                    Ok(CommitOrAbort::<_, ()>::Commit(db))
                })
                .unwrap()
                .unwrap_commit();
            HeedEngine { env, db, nosync: false }
        }
        fn set_nosync(&mut self, on: bool) {
            if self.nosync != on {
                // Single-threaded bench: no concurrent flag changes.
                let mode = if on { FlagSetMode::Enable } else { FlagSetMode::Disable };
                unsafe { self.env.set_flags(EnvFlags::NO_SYNC, mode).unwrap() };
                self.nosync = on;
            }
        }
    }

    impl Engine for HeedEngine {
        fn put(&mut self, kvs: &[Kv<'_>], durable: bool) {
            // Durable: a plain LMDB commit (fsyncs data then meta page).
            // Non-durable: commit under MDB_NOSYNC; a later sync() makes it durable.
            self.set_nosync(!durable);
            let mut w = self.env.write_txn().unwrap();
            for (k, v) in kvs {
                self.db.put(&mut w, k, v).unwrap();
            }
            w.commit().unwrap();
        }
        fn sync(&mut self) {
            self.env.force_sync().unwrap();
        }
        fn get(&self, key: &[u8]) -> Option<usize> {
            let r = self.env.read_txn().unwrap();
            self.db.get(&r, key).unwrap().map(|v| v.len())
        }
        fn scan_after(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize, out: &mut Vec<Vec<u8>>) -> usize {
            let r = self.env.read_txn().unwrap();
            let end = prefix_end(prefix);
            let lo = match after {
                Some(a) => Bound::Excluded(a),
                None => Bound::Included(prefix),
            };
            let range = (lo, Bound::Excluded(end.as_slice()));
            let mut bytes = 0;
            for item in self.db.range(&r, &range).unwrap().take(limit) {
                let (k, v) = item.unwrap();
                bytes += v.len();
                out.push(k.to_vec());
            }
            bytes
        }
    }
}

// ---------------------------------------------------------------------------------------

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let x = self.next().to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
    }
}

/// 16-byte key: tag byte, 8-byte big-endian id, 7 bytes of tail.
fn key16(tag: u8, id: u64, tail: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[0] = tag;
    k[1..9].copy_from_slice(&id.to_be_bytes());
    k[9..16].copy_from_slice(&tail.to_be_bytes()[1..]);
    k
}

fn dir_prefix(dir: u64) -> Vec<u8> {
    let mut p = vec![b'e'];
    p.extend_from_slice(&dir.to_be_bytes());
    p
}

const ENGINES: &[&str] = &["redb", "fjall", "heed"];

fn open_engine(name: &str, dir: &Path) -> Box<dyn Engine> {
    match name {
        #[cfg(feature = "redb")]
        "redb" => Box::new(redb_engine::RedbEngine::open(dir)),
        #[cfg(feature = "fjall")]
        "fjall" => Box::new(fjall_engine::FjallEngine::open(dir)),
        #[cfg(feature = "heed")]
        "heed" => Box::new(heed_engine::HeedEngine::open(dir)),
        other => panic!("engine {other} not compiled in"),
    }
}

struct Row {
    phase: &'static str,
    ops: u64,
    unit: &'static str,
    secs: f64,
}

fn run_engine(name: &str, dir: &Path, seed: u64) -> Vec<Row> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut rows = Vec::new();
    let mut rng = Rng(seed | 1);
    let mut e = open_engine(name, dir);

    let mut v120 = vec![0u8; 120];
    let mut v8k = vec![0u8; 8192];

    // 1. durable small puts: 2 keys per op, durable each.
    let n = 2_000u64;
    let t = Instant::now();
    for i in 0..n {
        rng.fill(&mut v120);
        let ko = key16(b'o', i, 0);
        let kd = key16(b'd', 1, i);
        e.put(&[(&ko, &v120), (&kd, &v120[..64])], true);
    }
    rows.push(Row { phase: "durable", ops: n, unit: "ops", secs: t.elapsed().as_secs_f64() });

    // 2. grouped: same ops, non-durable, one sync per 8.
    let t = Instant::now();
    for i in 0..n {
        rng.fill(&mut v120);
        let ko = key16(b'o', 100_000 + i, 0);
        let kd = key16(b'd', 2, i);
        e.put(&[(&ko, &v120), (&kd, &v120[..64])], false);
        if i % 8 == 7 {
            e.sync();
        }
    }
    e.sync();
    rows.push(Row { phase: "grouped8", ops: n, unit: "ops", secs: t.elapsed().as_secs_f64() });

    // 2b. grouped into one durable transaction per 8 ops.
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        let mut keys = Vec::with_capacity(16);
        let mut vals = Vec::with_capacity(8);
        for j in i..i + 8 {
            rng.fill(&mut v120);
            keys.push(key16(b'o', 200_000 + j, 0));
            keys.push(key16(b'd', 3, j));
            vals.push(v120.clone());
        }
        let kvs: Vec<Kv<'_>> = (0..16)
            .map(|x| {
                let v = &vals[x / 2];
                (&keys[x][..], if x % 2 == 0 { &v[..] } else { &v[..64] })
            })
            .collect();
        e.put(&kvs, true);
        i += 8;
    }
    rows.push(Row { phase: "grouped8_txn", ops: n, unit: "ops", secs: t.elapsed().as_secs_f64() });

    // 3. non-durable 8 KiB inline data puts, one sync at the end.
    let n3 = 20_000u64;
    let t = Instant::now();
    for i in 0..n3 {
        rng.fill(&mut v8k[..64]); // vary the head; keep cost on the engine, not the RNG
        v8k[64..72].copy_from_slice(&i.to_le_bytes());
        let k = key16(b'f', i, 0);
        e.put(&[(&k, &v8k)], false);
    }
    e.sync();
    rows.push(Row { phase: "nondurable", ops: n3, unit: "ops", secs: t.elapsed().as_secs_f64() });

    // 4. point gets over 20,000 metadata keys (load untimed, 1,000 per txn).
    let nk = 20_000u64;
    for chunk in 0..nk / 1000 {
        let keys: Vec<[u8; 16]> = (0..1000).map(|j| key16(b'm', chunk * 1000 + j, 0)).collect();
        let kvs: Vec<Kv<'_>> = keys.iter().map(|k| (&k[..], &v120[..])).collect();
        e.put(&kvs, false);
    }
    e.sync();
    let ng = 100_000u64;
    let mut found = 0usize;
    let t = Instant::now();
    for _ in 0..ng {
        let id = rng.next() % nk;
        let k = key16(b'm', id, 0);
        found += e.get(&k).expect("key missing");
    }
    rows.push(Row { phase: "get", ops: ng, unit: "ops", secs: t.elapsed().as_secs_f64() });
    assert_eq!(found, ng as usize * 120);

    // 5. prefix scan: 20 dirs x 1,000 entries, batches of 64 by start-after.
    let (ndirs, nents) = (20u64, 1_000u64);
    for d in 0..ndirs {
        let p = dir_prefix(1000 + d);
        let keys: Vec<Vec<u8>> = (0..nents)
            .map(|j| {
                let mut k = p.clone();
                k.extend_from_slice(format!("file-{:06}.dat", (j * 7919) % nents).as_bytes());
                k
            })
            .collect();
        let kvs: Vec<Kv<'_>> = keys.iter().map(|k| (&k[..], &v120[..40])).collect();
        e.put(&kvs, false);
    }
    e.sync();
    let t = Instant::now();
    let mut total = 0u64;
    let mut batch = Vec::with_capacity(64);
    for d in 0..ndirs {
        let p = dir_prefix(1000 + d);
        let mut last: Option<Vec<u8>> = None;
        let mut seen = 0;
        loop {
            batch.clear();
            e.scan_after(&p, last.as_deref(), 64, &mut batch);
            seen += batch.len();
            match batch.pop() {
                Some(k) => last = Some(k),
                None => break,
            }
            if seen % 64 != 0 {
                break; // short batch: end of directory
            }
        }
        assert_eq!(seen as u64, nents, "{name}: dir {d} scanned {seen}");
        total += seen as u64;
    }
    rows.push(Row { phase: "scan", ops: total, unit: "entries", secs: t.elapsed().as_secs_f64() });

    drop(e);
    let _ = std::fs::remove_dir_all(dir);
    rows
}

fn main() {
    let mut runs = 3usize;
    let mut base = PathBuf::from("/tmp/kvbench-data");
    let mut engines: Vec<String> = ENGINES
        .iter()
        .filter(|e| match **e {
            "redb" => cfg!(feature = "redb"),
            "fjall" => cfg!(feature = "fjall"),
            "heed" => cfg!(feature = "heed"),
            _ => false,
        })
        .map(|s| s.to_string())
        .collect();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().unwrap().parse().unwrap(),
            "--dir" => base = PathBuf::from(args.next().unwrap()),
            "--engines" => engines = args.next().unwrap().split(',').map(String::from).collect(),
            _ => panic!("usage: kvbench [--runs N] [--dir PATH] [--engines a,b,c]"),
        }
    }

    println!("engine,run,phase,ops,unit,seconds,rate_per_s");
    let mut all: BTreeMap<(String, &'static str), Vec<f64>> = BTreeMap::new();
    for run in 0..runs {
        for k in 0..engines.len() {
            let name = &engines[(run + k) % engines.len()];
            // Flush other engines' dirty pages so they don't bill this one.
            let _ = std::process::Command::new("sync").status();
            let rows = run_engine(name, &base.join(name), 0x5eed + run as u64);
            for r in rows {
                let rate = r.ops as f64 / r.secs;
                println!("{name},{},{},{},{},{:.4},{:.0}", run + 1, r.phase, r.ops, r.unit, r.secs, rate);
                eprintln!("run {} {name:6} {:13} {:>12.0} {}/s", run + 1, r.phase, rate, r.unit);
                all.entry((name.clone(), r.phase)).or_default().push(rate);
            }
        }
    }
    eprintln!("\nmedians over {runs} runs:");
    for ((name, phase), mut v) in all {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        eprintln!("{name:6} {phase:13} {:>12.0}", v[v.len() / 2]);
    }
}
