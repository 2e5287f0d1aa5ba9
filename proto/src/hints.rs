//! Directory hints [Kuhn 2008], docs/design.md section 4: their names, the values each
//! accepts, and what they make of a new file. The servers validate every
//! change with [`set`]; clients and tools show hints with [`list`].
//!
//! | hint          | accepted values                                   | when not set                  |
//! |---------------|---------------------------------------------------|-------------------------------|
//! | `strip_size`  | 4096 to 1073741824 bytes (suffix K, M or G)       | the cluster's `strip_size`    |
//! | `num_dfiles`  | 1 to the number of servers                        | the cluster's `num_dfiles`    |
//! | `dist`        | `simple_stripe` or `simple_stripe:strip_size=N`   | simple striping               |
//! | `no_metafile` | `1`/`true` (on) or `0`/`false` (off, clears it)   | off                           |
//! | `write_threshold` | 0 to 67108864 bytes (suffix K or M) or `auto` | the cluster's (or mount's)   |
//! | `split_entries` | 0 (never) to 1000000000 entries (suffix K or M) | the cluster's `split_entries` |
//!
//! `split_entries` [Patil 2011] is not a file's: a partition of the
//! directory holding more entries splits (`proto/src/partitions.rs`).
//!
//! `write_threshold` [Hildebrand 2006] goes into each new file's layout
//! (`Distribution.write_threshold`), as the paper's layout driver hands it
//! out; a file without a metafile has no layout and takes the cluster's.
//! A hint applies to files created in its directory from then on; files that
//! exist keep their layout. `no_metafile` beats the other three (such a file
//! is one datafile and never stripes); a `strip_size` hint beats the
//! `strip_size` parameter of `dist`.
//!
//! Inheritance: a new subdirectory starts with a copy of its parent's hints,
//! taken when it is created (`mkdir`). Changing a directory's hints later
//! does not reach subdirectories that already exist.
//!
//! Users see each hint that is set as the extended attribute
//! `user.shoal.<name>` of its directory, its value as text.

use crate::cluster::{ClusterConfig, WriteThreshold};
use crate::error::{Result, ShoalError};
use crate::msg::DirHints;

/// Extended attribute names of hints start with this.
pub const XATTR_PREFIX: &str = "user.shoal.";

const STRIP_MIN: u64 = 4096;
const STRIP_MAX: u64 = 1 << 30;
/// The one distribution Shoal has (docs/design.md, section 1).
const SIMPLE_STRIPE: &str = "simple_stripe";
/// The parameter of `simple_stripe`.
const STRIP_PARAM: &str = "strip_size";
/// The largest write threshold a hint may set: the largest `gather_buffer`.
const THRESHOLD_MAX: u64 = 64 << 20;
/// The largest split limit a hint may set.
const SPLIT_MAX: u64 = 1_000_000_000;

/// One directory hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    StripSize,
    NumDfiles,
    Dist,
    NoMetafile,
    WriteThreshold,
    SplitEntries,
}

impl Hint {
    pub const ALL: [Hint; 6] = [
        Hint::StripSize,
        Hint::NumDfiles,
        Hint::Dist,
        Hint::NoMetafile,
        Hint::WriteThreshold,
        Hint::SplitEntries,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Hint::StripSize => "strip_size",
            Hint::NumDfiles => "num_dfiles",
            Hint::Dist => "dist",
            Hint::NoMetafile => "no_metafile",
            Hint::WriteThreshold => "write_threshold",
            Hint::SplitEntries => "split_entries",
        }
    }

    /// The hint called `name`, or an error listing the hints there are.
    pub fn parse(name: &str) -> Result<Hint> {
        Hint::ALL
            .into_iter()
            .find(|h| h.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Hint::ALL.iter().map(|h| h.name()).collect();
                ShoalError::invalid(format!(
                    "unknown hint {name:?}; hints: {}",
                    known.join(", ")
                ))
            })
    }

    /// The extended attribute that shows this hint.
    pub fn xattr(self) -> String {
        format!("{XATTR_PREFIX}{}", self.name())
    }

    /// The hint an extended attribute name stands for: None for a name
    /// outside `user.shoal.`, an error for an unknown hint inside it.
    pub fn from_xattr(name: &str) -> Option<Result<Hint>> {
        name.strip_prefix(XATTR_PREFIX).map(Hint::parse)
    }

    /// What the hint accepts, for error messages.
    fn accepted(self, servers: u32) -> String {
        match self {
            Hint::StripSize => {
                format!("{STRIP_MIN} to {STRIP_MAX} bytes (a suffix K, M or G may follow)")
            }
            Hint::NumDfiles => format!("1 to {servers} (the servers in this cluster)"),
            Hint::Dist => format!("{SIMPLE_STRIPE} or {SIMPLE_STRIPE}:{STRIP_PARAM}=N"),
            Hint::NoMetafile => "1, 0, true or false".to_string(),
            Hint::WriteThreshold => {
                format!("0 to {THRESHOLD_MAX} bytes (a suffix K or M may follow) or auto")
            }
            Hint::SplitEntries => {
                format!("0 (never) to {SPLIT_MAX} entries (a suffix K or M may follow)")
            }
        }
    }

    fn refuse(self, value: &str, servers: u32) -> ShoalError {
        ShoalError::invalid(format!(
            "hint {}: {value:?} is not accepted; accepted: {}",
            self.name(),
            self.accepted(servers)
        ))
    }
}

/// A size in bytes with an optional binary suffix (K, M, G).
fn parse_size(text: &str) -> Option<u64> {
    let (digits, shift) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 10),
        (i, 'm' | 'M') => (&text[..i], 20),
        (i, 'g' | 'G') => (&text[..i], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn strip_size(text: &str) -> Option<u64> {
    parse_size(text).filter(|s| (STRIP_MIN..=STRIP_MAX).contains(s))
}

/// A `dist` value in its stored form, with its strip size parameter if any.
fn parse_dist(text: &str) -> Option<(String, Option<u64>)> {
    let (name, params) = match text.split_once(':') {
        Some((name, params)) => (name, Some(params)),
        None => (text, None),
    };
    if name != SIMPLE_STRIPE {
        return None;
    }
    let Some(params) = params else {
        return Some((SIMPLE_STRIPE.to_string(), None));
    };
    let (key, value) = params.split_once('=')?;
    let size = strip_size(value).filter(|_| key == STRIP_PARAM)?;
    Some((format!("{SIMPLE_STRIPE}:{STRIP_PARAM}={size}"), Some(size)))
}

/// Sets `hint` to `value` (surrounding blanks ignored), or an error naming the
/// hint and what it accepts. `servers` is the cluster's size.
pub fn set(hints: &mut DirHints, hint: Hint, value: &str, servers: u32) -> Result<()> {
    let text = value.trim();
    let refuse = || hint.refuse(text, servers);
    match hint {
        Hint::StripSize => hints.strip_size = strip_size(text).ok_or_else(refuse)?,
        Hint::NumDfiles => {
            hints.num_dfiles = text
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=servers).contains(n))
                .ok_or_else(refuse)?
        }
        Hint::Dist => hints.dist = parse_dist(text).ok_or_else(refuse)?.0,
        Hint::NoMetafile => {
            hints.no_metafile = match text {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => return Err(refuse()),
            }
        }
        Hint::WriteThreshold => {
            let threshold = match text {
                "auto" => WriteThreshold::AUTO,
                _ => parse_size(text)
                    .filter(|b| *b <= THRESHOLD_MAX)
                    .map(|b| WriteThreshold::Bytes(b as u32))
                    .ok_or_else(refuse)?,
            };
            hints.write_threshold = Some(threshold.to_wire());
        }
        Hint::SplitEntries => {
            let limit = parse_size(text).filter(|n| *n <= SPLIT_MAX);
            hints.split_entries = Some(limit.ok_or_else(refuse)?);
        }
    }
    Ok(())
}

/// EINVAL unless `v` is a write threshold a hint could set (on the wire:
/// bytes, or `auto`'s value), for a layout a client asks for.
pub fn check_write_threshold(v: u32) -> Result<()> {
    match WriteThreshold::from_wire(v).bytes() {
        Some(b) if u64::from(b) > THRESHOLD_MAX => {
            Err(Hint::WriteThreshold.refuse(&b.to_string(), 0))
        }
        _ => Ok(()),
    }
}

/// Clears `hint`; false if it was not set.
pub fn unset(hints: &mut DirHints, hint: Hint) -> bool {
    let was = get(hints, hint).is_some();
    match hint {
        Hint::StripSize => hints.strip_size = 0,
        Hint::NumDfiles => hints.num_dfiles = 0,
        Hint::Dist => hints.dist.clear(),
        Hint::NoMetafile => hints.no_metafile = false,
        Hint::WriteThreshold => hints.write_threshold = None,
        Hint::SplitEntries => hints.split_entries = None,
    }
    was
}

/// The value of `hint` as text, or None if it is not set.
pub fn get(hints: &DirHints, hint: Hint) -> Option<String> {
    match hint {
        Hint::StripSize => (hints.strip_size != 0).then(|| hints.strip_size.to_string()),
        Hint::NumDfiles => (hints.num_dfiles != 0).then(|| hints.num_dfiles.to_string()),
        Hint::Dist => (!hints.dist.is_empty()).then(|| hints.dist.clone()),
        Hint::NoMetafile => hints.no_metafile.then(|| "1".to_string()),
        Hint::WriteThreshold => hints
            .write_threshold
            .map(|v| match WriteThreshold::from_wire(v) {
                WriteThreshold::Bytes(b) => b.to_string(),
                WriteThreshold::Auto(_) => "auto".to_string(),
            }),
        Hint::SplitEntries => hints.split_entries.map(|n| n.to_string()),
    }
}

/// The hints that are set, with their values.
pub fn list(hints: &DirHints) -> Vec<(Hint, String)> {
    Hint::ALL
        .into_iter()
        .filter_map(|h| get(hints, h).map(|v| (h, v)))
        .collect()
}

/// Splits `name=value` as `shoal hint set` takes it.
pub fn parse_assignment(text: &str) -> Result<(Hint, &str)> {
    let (name, value) = text.split_once('=').ok_or_else(|| {
        ShoalError::invalid(format!("{text:?} is not hint=value (e.g. no_metafile=1)"))
    })?;
    Ok((Hint::parse(name)?, value))
}

/// What a file created under a directory's hints is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewFile {
    /// One datafile named by the entry, no metafile.
    pub no_metafile: bool,
    pub strip_size: u64,
    /// Datafiles of a striped file.
    pub num_dfiles: u32,
    /// The layout's write threshold (`Distribution.write_threshold`).
    pub write_threshold: Option<u32>,
}

/// The layout of a file created in a directory with `hints`, in `config`'s
/// cluster.
pub fn new_file(hints: &DirHints, config: &ClusterConfig) -> NewFile {
    let dist_strip = parse_dist(&hints.dist).and_then(|(_, s)| s);
    let strip_size = match hints.strip_size {
        0 => dist_strip.unwrap_or(config.settings.strip_size),
        s => s,
    };
    let num_dfiles = match hints.num_dfiles {
        _ if hints.no_metafile => 1,
        0 => config.dfiles_per_file(),
        n => n.min(config.num_servers()),
    };
    NewFile {
        no_metafile: hints.no_metafile,
        strip_size,
        num_dfiles,
        write_threshold: hints.write_threshold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ServerEntry, Settings};

    fn config(servers: u32) -> ClusterConfig {
        ClusterConfig {
            secret_file: None,
            broker_socket: None,
            loaded_from: None,
            settings: Settings::default(),
            servers: (0..servers)
                .map(|id| ServerEntry {
                    id,
                    addr: "127.0.0.1:1".parse().unwrap(),
                    data: "/tmp".into(),
                    metrics_addr: None,
                })
                .collect(),
        }
    }

    #[test]
    fn values_are_parsed_and_shown_back() {
        let mut h = DirHints::default();
        set(&mut h, Hint::StripSize, "64K", 4).unwrap();
        set(&mut h, Hint::NumDfiles, " 2\n", 4).unwrap();
        set(&mut h, Hint::Dist, "simple_stripe:strip_size=1M", 4).unwrap();
        set(&mut h, Hint::NoMetafile, "true", 4).unwrap();
        assert_eq!(
            list(&h),
            vec![
                (Hint::StripSize, "65536".to_string()),
                (Hint::NumDfiles, "2".to_string()),
                (Hint::Dist, "simple_stripe:strip_size=1048576".to_string()),
                (Hint::NoMetafile, "1".to_string()),
            ]
        );
        assert!(unset(&mut h, Hint::NoMetafile));
        assert!(!unset(&mut h, Hint::NoMetafile), "not set any more");
        set(&mut h, Hint::NoMetafile, "0", 4).unwrap();
        assert_eq!(get(&h, Hint::NoMetafile), None, "0 clears it");
    }

    #[test]
    fn bad_values_name_the_hint_and_the_accepted_range() {
        let mut h = DirHints::default();
        let cases = [
            (Hint::StripSize, "100", "4096 to 1073741824"),
            (Hint::StripSize, "2G", "4096 to 1073741824"),
            (Hint::StripSize, "lots", "4096 to 1073741824"),
            (Hint::NumDfiles, "0", "1 to 4"),
            (Hint::NumDfiles, "5", "1 to 4"),
            (Hint::Dist, "raid5", "simple_stripe"),
            (Hint::Dist, "simple_stripe:width=2", "strip_size=N"),
            (Hint::NoMetafile, "maybe", "1, 0, true or false"),
        ];
        for (hint, value, accepted) in cases {
            let e = set(&mut h, hint, value, 4).unwrap_err();
            assert!(
                e.message.contains(hint.name()) && e.message.contains(accepted),
                "{}={value}: {}",
                hint.name(),
                e.message
            );
        }
        assert_eq!(h, DirHints::default(), "nothing set by a refused value");
        let e = Hint::parse("stripsize").unwrap_err();
        assert!(e.message.contains("no_metafile"), "{}", e.message);
        assert!(parse_assignment("no_metafile").is_err());
        assert_eq!(
            parse_assignment("dist=simple_stripe").unwrap(),
            (Hint::Dist, "simple_stripe")
        );
        assert_eq!(
            Hint::from_xattr("user.shoal.num_dfiles").unwrap().unwrap(),
            Hint::NumDfiles
        );
        assert!(Hint::from_xattr("user.shoal.nope").unwrap().is_err());
        assert!(Hint::from_xattr("user.other").is_none());
    }

    #[test]
    fn a_new_file_follows_the_hints_with_the_documented_precedence() {
        let c = config(4);
        let plain = new_file(&DirHints::default(), &c);
        assert_eq!(
            plain,
            NewFile {
                no_metafile: false,
                strip_size: 1 << 20,
                num_dfiles: 4,
                write_threshold: None,
            }
        );
        let mut h = DirHints::default();
        set(&mut h, Hint::Dist, "simple_stripe:strip_size=8K", 4).unwrap();
        assert_eq!(new_file(&h, &c).strip_size, 8192, "dist's parameter");
        set(&mut h, Hint::StripSize, "16K", 4).unwrap();
        assert_eq!(new_file(&h, &c).strip_size, 16384, "strip_size wins");
        set(&mut h, Hint::NumDfiles, "2", 4).unwrap();
        assert_eq!(new_file(&h, &c).num_dfiles, 2);
        set(&mut h, Hint::NoMetafile, "1", 4).unwrap();
        let single = new_file(&h, &c);
        assert!(single.no_metafile);
        assert_eq!(single.num_dfiles, 1, "never stripes");
    }

    #[test]
    fn a_write_threshold_hint_is_bytes_or_auto_and_goes_into_the_layout() {
        let c = config(2);
        let mut h = DirHints::default();
        set(&mut h, Hint::WriteThreshold, "4K", 2).unwrap();
        assert_eq!(get(&h, Hint::WriteThreshold).as_deref(), Some("4096"));
        assert_eq!(new_file(&h, &c).write_threshold, Some(4096));
        set(&mut h, Hint::WriteThreshold, "0", 2).unwrap();
        assert_eq!(new_file(&h, &c).write_threshold, Some(0), "0 is a value");
        set(&mut h, Hint::WriteThreshold, "auto", 2).unwrap();
        assert_eq!(get(&h, Hint::WriteThreshold).as_deref(), Some("auto"));
        let w = new_file(&h, &c).write_threshold.unwrap();
        assert_eq!(WriteThreshold::from_wire(w), WriteThreshold::AUTO);
        let e = set(&mut h, Hint::WriteThreshold, "65M", 2).unwrap_err();
        assert!(e.message.contains("write_threshold"), "{}", e.message);
        assert!(check_write_threshold(u32::MAX).is_ok(), "auto");
        assert!(check_write_threshold(65 << 20).is_err());
        assert!(unset(&mut h, Hint::WriteThreshold));
        assert_eq!(new_file(&h, &c).write_threshold, None);
    }
}
