//! `shoal config defaults`: a cluster file with every setting at its default,
//! each under its documentation, so the reference cannot drift from the code;
//! `shoal config durability`: what a cluster's settings make of durability
//! (`shoal_proto::durability`).
//!
//! The values come from `Settings::default()` at run time. The documentation
//! is the doc comment of each field in `proto/src/cluster.rs`, the one place
//! where settings are defined: that file is compiled into this binary as text
//! and its `///` lines are read field by field. The last of them, `Tier:
//! NAME.`, is the setting's tier (`TIERS`), printed as a tag before its
//! documentation. The tests fail if a setting has no documentation or no
//! tier, if a documented field is not a setting, if the printed file does
//! not read back as the defaults, or if docs/operations.md lists a setting
//! under another tier than the code.

use std::path::PathBuf;

use shoal_proto::cluster::{ClusterConfig, Settings};
use shoal_proto::durability::durability;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle::MAX_SERVERS;

/// The source that defines the cluster file and its settings.
const CLUSTER_RS: &str = include_str!("../../../proto/src/cluster.rs");

/// Width of the printed comment lines.
const WIDTH: usize = 78;

/// The tiers a setting may be in (its doc comment's `Tier: NAME.` line), with
/// what each means (as the doc comment of `Settings` says).
const TIERS: [(&str, &str); 3] = [
    (
        "stable",
        "a switch or policy whose default is what production runs, under the \
         tests (and measured, where it costs or buys speed)",
    ),
    (
        "tuning",
        "a size, interval or limit: any value the servers accept works, \
         trading speed or memory against what its documentation says",
    ),
    (
        "experimental",
        "off by default, or on by default from limited evidence (its \
         documentation says which); its default, or the setting, may change",
    ),
];

#[derive(clap::Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print a cluster file with every setting at its default, documented.
    ///
    /// The TOML printed is a complete cluster file of one server: `shoal
    /// config defaults > cluster.toml`, then edit the [[server]] entries and
    /// keep the settings you change (every key of [settings] is optional).
    Defaults,
    /// Say when a cluster's changes are durable and what a crash can take,
    /// as its settings make it (the defaults without --config).
    Durability {
        /// The cluster file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Durable 4 KiB writes per second the disk was measured to make:
        /// also say how that bounds creates and unlinks.
        #[arg(long)]
        flush_rate: Option<u64>,
    },
}

pub fn run(command: ConfigCommand) -> Result<()> {
    match command {
        ConfigCommand::Defaults => print!("{}", defaults()?),
        ConfigCommand::Durability { config, flush_rate } => {
            let settings = match config {
                Some(path) => ClusterConfig::load(&path)?.settings,
                None => Settings::default(),
            };
            for sentence in durability(&settings, flush_rate) {
                print!("{}", wrap(&sentence, ""));
            }
        }
    }
    Ok(())
}

/// A field of a struct of the cluster file and its doc comment, in one line,
/// with its tier taken out of it (`Tier: NAME.`, None without one).
#[derive(Debug, PartialEq, Eq)]
struct FieldDoc {
    name: String,
    doc: String,
    tier: Option<String>,
}

/// The fields of `pub struct NAME` in `source`, in order, with their doc
/// comments (`///` lines joined by spaces; attributes and `//` comments
/// between them are skipped) and tiers (a `/// Tier: NAME.` line).
fn field_docs(source: &str, name: &str) -> Vec<FieldDoc> {
    let header = format!("pub struct {name} {{");
    let mut lines = source
        .lines()
        .skip_while(|l| l.trim_start() != header)
        .skip(1);
    let mut fields = Vec::new();
    let mut doc: Vec<&str> = Vec::new();
    let mut tier = None;
    for line in lines.by_ref() {
        let line = line.trim();
        if line == "}" {
            break;
        }
        if let Some(text) = line.strip_prefix("///") {
            match text.trim().strip_prefix("Tier:") {
                Some(t) => tier = Some(t.trim().trim_end_matches('.').to_string()),
                None => doc.push(text.trim()),
            }
        } else if let Some(field) = line.strip_prefix("pub ") {
            if let Some((field, _ty)) = field.split_once(':') {
                fields.push(FieldDoc {
                    name: field.trim().to_string(),
                    doc: doc.join(" "),
                    tier: tier.take(),
                });
            }
            doc.clear();
            tier = None;
        }
    }
    fields
}

/// `text` as `# ` comment lines of at most `WIDTH` columns.
fn comment(text: &str) -> String {
    wrap(text, "# ")
}

/// `text` as lines of at most `WIDTH` columns, each starting with `prefix`.
pub fn wrap(text: &str, prefix: &str) -> String {
    let mut out = String::new();
    let mut line = String::from(prefix);
    for word in text.split_whitespace() {
        if line.len() > prefix.len() && line.len() + 1 + word.len() > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from(prefix);
        }
        if line.len() > prefix.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// The cluster file with every setting at its default, documented.
pub fn defaults() -> Result<String> {
    let values = toml::Table::try_from(Settings::default())
        .map_err(|e| ShoalError::invalid(format!("settings: {e}")))?;
    let docs = field_docs(CLUSTER_RS, "Settings");
    let doc_of = |fields: &[FieldDoc], name: &str| -> Result<String> {
        fields
            .iter()
            .find(|f| f.name == name && !f.doc.is_empty())
            .map(|f| f.doc.clone())
            .ok_or_else(|| {
                ShoalError::invalid(format!("{name} has no doc comment in proto/src/cluster.rs"))
            })
    };
    let tier_of = |field: &FieldDoc| -> Result<&'static str> {
        let tier = field.tier.as_deref().unwrap_or_default();
        TIERS
            .iter()
            .map(|(name, _)| *name)
            .find(|name| *name == tier)
            .ok_or_else(|| {
                ShoalError::invalid(format!(
                    "{} has no tier (a last doc line `Tier: NAME.`, NAME one of {}) \
                     in proto/src/cluster.rs",
                    field.name,
                    TIERS.map(|(name, _)| name).join(", ")
                ))
            })
    };
    let mut out = comment(
        "A Shoal cluster file: every setting at its default, under its documentation \
         (generated from proto/src/cluster.rs by `shoal config defaults`). The same file \
         goes to every server and client. Every key of [settings] is optional: keep the \
         ones you change.",
    );
    out.push_str("#\n");
    out.push_str(&comment(
        "Each setting's documentation starts with its tier in brackets:",
    ));
    for (name, meaning) in TIERS {
        // Hanging lines, under the tag's text.
        let item = wrap(&format!("[{name}] {meaning}."), "#     ");
        out.push_str(&item.replacen("#     ", "#   ", 1));
    }
    let mut experimental = Vec::new();
    for field in &docs {
        if tier_of(field)? == "experimental" {
            experimental.push(field.name.as_str());
        }
    }
    out.push_str(&comment(&format!(
        "Experimental here: {}.",
        experimental.join(", ")
    )));
    out.push('\n');
    let cluster = field_docs(CLUSTER_RS, "ClusterConfig");
    out.push_str(&comment(&doc_of(&cluster, "secret_file")?));
    out.push_str("# secret_file = \"secret\"\n\n[settings]\n");
    for field in &docs {
        let value = values.get(&field.name).ok_or_else(|| {
            ShoalError::invalid(format!(
                "{} is documented in Settings but is not a setting",
                field.name
            ))
        })?;
        let tier = tier_of(field)?;
        out.push_str(&comment(&format!(
            "[{tier}] {}",
            doc_of(&docs, &field.name)?
        )));
        out.push_str(&format!("{} = {value}\n", field.name));
    }
    for key in values.keys() {
        // A setting that the reading above missed (a field without `pub`, a
        // serde rename) must not go unprinted.
        doc_of(&docs, key)?;
    }
    let server = field_docs(CLUSTER_RS, "ServerEntry");
    out.push('\n');
    out.push_str(&comment(&format!(
        "One [[server]] table per server, ids 0..N in order, at most {MAX_SERVERS} servers.",
    )));
    out.push_str("[[server]]\n");
    for (key, example) in [
        ("id", "0"),
        ("addr", "\"127.0.0.1:7070\""),
        ("data", "\"/var/lib/shoal/server-0\""),
    ] {
        out.push_str(&comment(&doc_of(&server, key)?));
        out.push_str(&format!("{key} = {example}\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_names_the_default_sync_mode_as_the_default() {
        // The front page's account of durability is written once; the mode
        // it calls the default must be the one the code has.
        let readme = include_str!("../../../README.md");
        let values = toml::Table::try_from(Settings::default()).unwrap();
        let mode = values["sync"].as_str().unwrap();
        let claim = format!("(`sync = \"{mode}\"`, the default)");
        assert!(readme.contains(&claim), "README.md does not say {claim}");
    }

    #[test]
    fn defaults_read_back_as_the_defaults() {
        let text = defaults().unwrap();
        let config: ClusterConfig = toml::from_str(&text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.settings, Settings::default());
        assert_eq!(config.secret_file, None);
        // Every setting is written out, not left to its default by omission.
        let table: toml::Table = toml::from_str(&text).unwrap();
        let written = table["settings"].as_table().unwrap();
        let all = toml::Table::try_from(Settings::default()).unwrap();
        assert_eq!(
            written.keys().collect::<Vec<_>>(),
            all.keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_setting_is_under_its_own_doc() {
        let text = defaults().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let docs = field_docs(CLUSTER_RS, "Settings");
        assert!(docs.len() >= 20, "{docs:?}");
        for field in &docs {
            let at = lines
                .iter()
                .position(|l| l.starts_with(&format!("{} = ", field.name)))
                .unwrap_or_else(|| panic!("{} not printed", field.name));
            assert!(lines[at - 1].starts_with("# "), "{}", field.name);
            assert!(lines.iter().all(|l| l.len() <= WIDTH), "{}", field.name);
        }
        let sync = docs.iter().find(|f| f.name == "sync").unwrap();
        assert_eq!(
            sync.doc,
            "Durability of metadata: \"replay\" (default), \"full\" or \"none\" (scratch)."
        );
    }

    /// The settings of each tier, as the code gives them, in order.
    fn settings_by_tier() -> Vec<(&'static str, Vec<String>)> {
        let docs = field_docs(CLUSTER_RS, "Settings");
        TIERS
            .iter()
            .map(|(tier, _)| {
                let names = docs
                    .iter()
                    .filter(|f| f.tier.as_deref() == Some(tier))
                    .map(|f| f.name.clone())
                    .collect();
                (*tier, names)
            })
            .collect()
    }

    #[test]
    fn every_setting_has_a_tier() {
        let docs = field_docs(CLUSTER_RS, "Settings");
        let all = toml::Table::try_from(Settings::default()).unwrap();
        for key in all.keys() {
            let field = docs.iter().find(|f| &f.name == key).unwrap();
            let tier = field.tier.as_deref();
            assert!(
                TIERS.iter().any(|(name, _)| Some(*name) == tier),
                "{key} has tier {tier:?}, not one of {TIERS:?}"
            );
        }
        let experimental = &settings_by_tier()[2];
        assert_eq!(experimental.0, "experimental");
        for key in ["stream_reads", "fuse_io_uring", "uncached_reads"] {
            assert!(experimental.1.iter().any(|k| k == key), "{key}");
        }
        // Printed as a tag before each setting's documentation.
        let text = defaults().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for field in &docs {
            let at = lines
                .iter()
                .position(|l| l.starts_with(&format!("{} = ", field.name)))
                .unwrap();
            let first = lines[..at]
                .iter()
                .rposition(|l| !l.starts_with("# ") || l.starts_with("# ["))
                .unwrap();
            let tag = format!("# [{}] ", field.tier.as_deref().unwrap());
            assert!(lines[first].starts_with(&tag), "{}", field.name);
        }
        // The comment wraps.
        let flat = text.replace("\n# ", " ");
        assert!(flat.contains(
            "Experimental here: split_entries, stream_reads, uncached_reads, fuse_io_uring."
        ));
    }

    #[test]
    fn the_operations_guide_lists_every_setting_under_its_tier() {
        let guide = include_str!("../../../docs/operations.md");
        for (tier, names) in settings_by_tier() {
            let row = guide
                .lines()
                .find(|l| l.starts_with(&format!("| {tier} |")))
                .unwrap_or_else(|| panic!("docs/operations.md has no row for {tier}"));
            let listed: Vec<String> = row
                .rsplit('|')
                .nth(1)
                .unwrap()
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect();
            assert_eq!(listed, names, "docs/operations.md's {tier} row");
        }
    }

    #[test]
    fn field_docs_join_lines_and_skip_attributes_and_comments() {
        let source = "pub struct A {\n    /// One\n    /// two.\n    /// Tier: tuning.\n    \
                      #[serde(default)]\n    \
                      pub x: u32,\n\n    // a group comment\n    /// Three.\n    pub y: bool,\n}\n\
                      pub struct B {\n    /// Not A's.\n    pub z: u8,\n}\n";
        assert_eq!(
            field_docs(source, "A"),
            vec![
                FieldDoc {
                    name: "x".into(),
                    doc: "One two.".into(),
                    tier: Some("tuning".into()),
                },
                FieldDoc {
                    name: "y".into(),
                    doc: "Three.".into(),
                    tier: None,
                },
            ]
        );
        assert_eq!(field_docs(source, "C"), vec![]);
    }

    #[test]
    fn comments_wrap_at_the_width() {
        let long = "word ".repeat(40);
        let c = comment(&long);
        assert!(c.lines().count() > 1);
        assert!(c.lines().all(|l| l.starts_with("# ") && l.len() <= WIDTH));
    }
}
