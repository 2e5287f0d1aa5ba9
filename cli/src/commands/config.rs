//! `shoal config defaults`: a cluster file with every setting at its default,
//! each under its documentation, so the reference cannot drift from the code;
//! `shoal config durability`: what a cluster's settings make of durability
//! (`shoal_proto::durability`).
//!
//! The values come from `Settings::default()` at run time. The documentation
//! is the doc comment of each field in `proto/src/cluster.rs`, the one place
//! where settings are defined: that file is compiled into this binary as text
//! and its `///` lines are read field by field. The tests fail if a setting
//! has no documentation, if a documented field is not a setting, or if the
//! printed file does not read back as the defaults.

use std::path::PathBuf;

use shoal_proto::cluster::{ClusterConfig, Settings};
use shoal_proto::durability::durability;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle::MAX_SERVERS;

/// The source that defines the cluster file and its settings.
const CLUSTER_RS: &str = include_str!("../../../proto/src/cluster.rs");

/// Width of the printed comment lines.
const WIDTH: usize = 78;

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

/// A field of a struct of the cluster file and its doc comment, in one line.
#[derive(Debug, PartialEq, Eq)]
struct FieldDoc {
    name: String,
    doc: String,
}

/// The fields of `pub struct NAME` in `source`, in order, with their doc
/// comments (`///` lines joined by spaces; attributes and `//` comments
/// between them are skipped).
fn field_docs(source: &str, name: &str) -> Vec<FieldDoc> {
    let header = format!("pub struct {name} {{");
    let mut lines = source
        .lines()
        .skip_while(|l| l.trim_start() != header)
        .skip(1);
    let mut fields = Vec::new();
    let mut doc: Vec<&str> = Vec::new();
    for line in lines.by_ref() {
        let line = line.trim();
        if line == "}" {
            break;
        }
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
        } else if let Some(field) = line.strip_prefix("pub ") {
            if let Some((field, _ty)) = field.split_once(':') {
                fields.push(FieldDoc {
                    name: field.trim().to_string(),
                    doc: doc.join(" "),
                });
            }
            doc.clear();
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
    let mut out = comment(
        "A Shoal cluster file: every setting at its default, under its documentation \
         (generated from proto/src/cluster.rs by `shoal config defaults`). The same file \
         goes to every server and client. Every key of [settings] is optional: keep the \
         ones you change.",
    );
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
        out.push_str(&comment(&doc_of(&docs, &field.name)?));
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

    #[test]
    fn field_docs_join_lines_and_skip_attributes_and_comments() {
        let source = "pub struct A {\n    /// One\n    /// two.\n    #[serde(default)]\n    \
                      pub x: u32,\n\n    // a group comment\n    /// Three.\n    pub y: bool,\n}\n\
                      pub struct B {\n    /// Not A's.\n    pub z: u8,\n}\n";
        assert_eq!(
            field_docs(source, "A"),
            vec![
                FieldDoc {
                    name: "x".into(),
                    doc: "One two.".into()
                },
                FieldDoc {
                    name: "y".into(),
                    doc: "Three.".into()
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
