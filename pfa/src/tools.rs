//! `shoal pfa ls|cat|extract|check`: look into a container from the shell
//! (on any file system, a Shoal mount included).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::format::{owner_of, SegHeader};
use crate::index::{self, Store, Verify};
use crate::Container;

#[derive(clap::Args, Debug)]
pub struct PfaArgs {
    #[command(subcommand)]
    pub command: PfaCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum PfaCommand {
    /// List the logical files: name, rank, steps, logical size of the last
    /// step, bytes stored.
    Ls {
        container: PathBuf,
        /// Also list each step's extents (file offset and bytes of each
        /// segment).
        #[arg(long)]
        extents: bool,
    },
    /// Print one step of a logical file, rebuilt from its full image and
    /// increments.
    Cat {
        container: PathBuf,
        name: String,
        #[arg(long, default_value_t = 0)]
        rank: u32,
        /// The step (default: the last).
        #[arg(long)]
        step: Option<u64>,
    },
    /// Write the logical files back as one file each:
    /// DIR/r<RANK>/s<STEP>/<NAME> (with --last, DIR/r<RANK>/<NAME>).
    Extract {
        container: PathBuf,
        dir: PathBuf,
        /// Only the last step of each logical file.
        #[arg(long)]
        last: bool,
    },
    /// Check the container: the header, every rank's index chain, every
    /// checksum, chunk ownership, and that every step can be rebuilt. Says
    /// what a killed writer cut off; fails on damage.
    Check { container: PathBuf },
}

pub fn run(args: PfaArgs) -> io::Result<()> {
    let out = &mut io::stdout().lock();
    match args.command {
        PfaCommand::Ls { container, extents } => ls(&container, extents, out),
        PfaCommand::Cat {
            container,
            name,
            rank,
            step,
        } => cat(&container, &name, rank, step, out),
        PfaCommand::Extract {
            container,
            dir,
            last,
        } => extract(&container, &dir, last).map(|n| {
            let _ = writeln!(out, "{n} files written under {}", dir.display());
        }),
        PfaCommand::Check { container } => {
            let r = check(&container)?;
            r.print(out)?;
            if r.problems.is_empty() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {} problems", container.display(), r.problems.len()),
                ))
            }
        }
    }
}

/// Every rank's stores, by (name, rank).
type Catalog = BTreeMap<(String, u32), Vec<Store>>;

fn catalog(c: &Container, verify: Verify) -> io::Result<(Catalog, Vec<index::Chain>)> {
    let mut cat = Catalog::new();
    let mut chains = Vec::new();
    for rank in 0..c.header().nranks {
        let chain = c.chain(rank, verify)?;
        for (name, stores) in index::stores(&chain) {
            cat.insert((name, rank), stores);
        }
        chains.push(chain);
    }
    Ok((cat, chains))
}

/// The stores that make readable steps: those before the first cut one.
fn readable(stores: &[Store]) -> &[Store] {
    &stores[..stores.iter().take_while(|s| s.complete).count()]
}

pub fn ls(path: &Path, extents: bool, out: &mut impl Write) -> io::Result<()> {
    let c = Container::open_read_only(path)?;
    let h = c.header();
    let (cat, chains) = catalog(&c, Verify::Tail)?;
    writeln!(
        out,
        "{}: {} ranks, chunk {} bytes (strip {}), {} bytes",
        path.display(),
        h.nranks,
        h.chunk_size,
        h.strip,
        c.inner.file.metadata()?.len()
    )?;
    writeln!(
        out,
        "{:<32} {:>6} {:>6} {:>12} {:>14}",
        "NAME", "RANK", "STEPS", "LAST SIZE", "STORED"
    )?;
    for ((name, rank), stores) in &cat {
        let ok = readable(stores);
        let stored: u64 = ok.iter().map(Store::data_bytes).sum();
        let last = ok.last().map(|s| s.logical_len).unwrap_or(0);
        writeln!(
            out,
            "{name:<32} {rank:>6} {:>6} {last:>12} {stored:>14}",
            ok.len()
        )?;
        if extents {
            for s in ok {
                let ext: Vec<String> = s
                    .segs
                    .iter()
                    .map(|g| format!("{}+{}", g.offset, u64::from(h.page_size) + g.hdr.data_len))
                    .collect();
                writeln!(
                    out,
                    "    step {} {:?} {} bytes: {}",
                    s.step,
                    s.kind,
                    s.logical_len,
                    ext.join(" ")
                )?;
            }
        }
    }
    for chain in &chains {
        for w in &chain.cut {
            writeln!(out, "cut: {w}")?;
        }
    }
    for w in cut_stores(&cat) {
        writeln!(out, "cut: {w}")?;
    }
    Ok(())
}

/// Stores whose segments are not all there (their writer died mid-store).
fn cut_stores(cat: &Catalog) -> Vec<String> {
    let mut cut = Vec::new();
    for ((name, rank), stores) in cat {
        for s in stores.iter().filter(|s| !s.complete) {
            cut.push(format!(
                "rank {rank}: {name} step {}: {} of {} segments written",
                s.step,
                s.segs.len(),
                s.segs.first().map(|g| g.hdr.seg_count).unwrap_or(0)
            ));
        }
    }
    cut
}

/// Rebuilds step `step` (or the last) of `name` of `rank`.
pub fn image(c: &Container, name: &str, rank: u32, step: Option<u64>) -> io::Result<Vec<u8>> {
    let chain = c.chain(rank, Verify::Tail)?;
    let stores = index::stores(&chain).remove(name).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no logical file {name} of rank {rank}"),
        )
    })?;
    let ok = readable(&stores);
    let step = match step.or(ok.last().map(|s| s.step)) {
        Some(s) => s,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name} of rank {rank} has no complete step"),
            ))
        }
    };
    rebuild(c, ok, step)
}

fn rebuild(c: &Container, stores: &[Store], step: u64) -> io::Result<Vec<u8>> {
    let p = u64::from(c.header().page_size);
    let path = index::plan(stores, step)?;
    let top = path.iter().map(|s| s.logical_len).max().unwrap_or(0);
    let mut img = vec![0u8; (top.div_ceil(p) * p) as usize];
    for s in path {
        index::apply(&c.inner.file, p, s, &mut img)?;
    }
    let len = path.last().map(|s| s.logical_len).unwrap_or(0);
    img.truncate(len as usize);
    Ok(img)
}

pub fn cat(
    path: &Path,
    name: &str,
    rank: u32,
    step: Option<u64>,
    out: &mut impl Write,
) -> io::Result<()> {
    let c = Container::open_read_only(path)?;
    out.write_all(&image(&c, name, rank, step)?)?;
    out.flush()
}

/// Writes every (or the last) step of every logical file as its own file;
/// returns how many.
pub fn extract(path: &Path, dir: &Path, last_only: bool) -> io::Result<u64> {
    let c = Container::open_read_only(path)?;
    let (cat, _) = catalog(&c, Verify::Tail)?;
    let mut n = 0;
    for ((name, rank), stores) in &cat {
        let ok = readable(stores);
        let steps: Vec<u64> = if last_only {
            ok.last().map(|s| s.step).into_iter().collect()
        } else {
            ok.iter().map(|s| s.step).collect()
        };
        // Increments apply in order: rebuild step by step.
        let p = u64::from(c.header().page_size);
        let top = ok.iter().map(|s| s.logical_len).max().unwrap_or(0);
        let mut img = vec![0u8; (top.div_ceil(p) * p) as usize];
        let mut at = None;
        for step in steps {
            let plan = index::plan(ok, step)?;
            let skip = match at {
                Some(prev) if plan[0].step <= prev => (prev + 1 - plan[0].step) as usize,
                _ => {
                    img.fill(0);
                    0
                }
            };
            for s in &plan[skip..] {
                index::apply(&c.inner.file, p, s, &mut img)?;
            }
            at = Some(step);
            let len = plan.last().map(|s| s.logical_len).unwrap_or(0) as usize;
            let file = if last_only {
                dir.join(format!("r{rank}")).join(name)
            } else {
                dir.join(format!("r{rank}"))
                    .join(format!("s{step}"))
                    .join(name)
            };
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&file, &img[..len])?;
            n += 1;
        }
    }
    Ok(n)
}

/// What `pfa check` found.
#[derive(Debug, Default)]
pub struct Report {
    pub ranks: u32,
    pub logical_files: usize,
    pub steps: usize,
    pub stored_bytes: u64,
    /// What a killed writer left unfinished: not readable, not damage.
    pub cut: Vec<String>,
    /// Damage: the container is not what its index says.
    pub problems: Vec<String>,
}

impl Report {
    pub fn print(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(
            out,
            "{} ranks, {} logical files, {} readable steps, {} data bytes",
            self.ranks, self.logical_files, self.steps, self.stored_bytes
        )?;
        for w in &self.cut {
            writeln!(out, "cut: {w}")?;
        }
        for w in &self.problems {
            writeln!(out, "problem: {w}")?;
        }
        if self.problems.is_empty() {
            if self.cut.is_empty() {
                writeln!(out, "ok")?;
            } else {
                writeln!(out, "ok: readable up to each rank's last completed store")?;
            }
        }
        Ok(())
    }
}

pub fn check(path: &Path) -> io::Result<Report> {
    let c = Container::open_read_only(path)?;
    let h = c.header().clone();
    let (cat, chains) = catalog(&c, Verify::All)?;
    let mut r = Report {
        ranks: h.nranks,
        ..Report::default()
    };
    let mut extents = Vec::new();
    for chain in &chains {
        r.cut.extend(chain.cut.iter().cloned());
        r.problems.extend(chain.problems.iter().cloned());
        for s in &chain.segs {
            extents.push((
                s.offset,
                s.offset + u64::from(h.page_size) + s.hdr.data_len,
                chain.rank,
            ));
        }
    }
    // Extents never overlap, and each lies in a chunk of its own rank.
    extents.sort();
    for w in extents.windows(2) {
        if w[1].0 < w[0].1 {
            r.problems.push(format!(
                "extents overlap: rank {} at {}..{} and rank {} at {}..{}",
                w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1
            ));
        }
    }
    for &(from, to, rank) in &extents {
        let chunk = from / h.chunk_size;
        if chunk == 0 || (to - 1) / h.chunk_size != chunk || owner_of(h.nranks, chunk).0 != rank {
            r.problems.push(format!(
                "rank {rank}'s extent {from}..{to} is outside its own chunks"
            ));
        }
    }
    // Chunks that start with a segment of a rank that does not own them.
    let len = c.inner.file.metadata()?.len();
    let mut page = vec![0u8; h.page_size as usize];
    for chunk in 1..len.div_ceil(h.chunk_size) {
        use std::os::unix::fs::FileExt;
        if c.inner.file.read_at(&mut page, chunk * h.chunk_size)? == page.len() {
            if let Some(s) = SegHeader::decode(&page) {
                let owner = owner_of(h.nranks, chunk).0;
                if s.rank != owner {
                    r.problems.push(format!(
                        "chunk {chunk} belongs to rank {owner} but holds a segment of rank {}",
                        s.rank
                    ));
                }
            }
        }
    }
    r.cut.extend(cut_stores(&cat));
    for ((name, rank), stores) in &cat {
        r.logical_files += 1;
        let ok = readable(stores);
        if ok.len() < stores.iter().filter(|s| s.complete).count() {
            r.problems.push(format!(
                "rank {rank}: {name}: complete steps after a cut one"
            ));
        }
        for s in ok {
            match index::plan(ok, s.step) {
                Ok(_) => {
                    r.steps += 1;
                    r.stored_bytes += s.data_bytes();
                }
                Err(e) => r.problems.push(format!("rank {rank}: {name}: {e}")),
            }
        }
    }
    Ok(r)
}
