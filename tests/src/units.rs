//! The systemd units of `deploy/systemd`, read as systemd runs them, so a
//! test runs their very command lines (on namespaced hosts) rather than a
//! copy of them that could drift: `Environment=` defaults, overridden by an
//! `EnvironmentFile=` as systemd reads one, `${VAR}` (one word) and a bare
//! `$VAR` word (split on whitespace), and the instance specifiers `%i`,
//! `%I` and `%f`. Quoting is not supported: the units use none, and a
//! quote in a command line fails loudly rather than run something else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub struct Unit {
    name: String,
    text: String,
    env: BTreeMap<String, String>,
}

/// `deploy/systemd/NAME`.
pub fn unit_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/systemd")
        .join(name)
}

impl Unit {
    /// The unit `deploy/systemd/NAME`, with its `Environment=` defaults.
    pub fn read(name: &str) -> Unit {
        let path = unit_path(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut unit = Unit {
            name: name.to_string(),
            text,
            env: BTreeMap::new(),
        };
        let assignments: Vec<String> = unit.values("Environment").map(str::to_string).collect();
        for kv in assignments {
            unit.assign(&kv);
        }
        unit
    }

    /// Reads `file` as the unit's `EnvironmentFile=` (`KEY=VALUE` lines,
    /// `#` comments): its values override the unit's defaults.
    pub fn environment_file(&mut self, file: &Path) {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for line in text.lines().map(str::trim) {
            if !line.is_empty() && !line.starts_with('#') {
                self.assign(line);
            }
        }
    }

    fn assign(&mut self, kv: &str) {
        let (k, v) = kv
            .split_once('=')
            .unwrap_or_else(|| panic!("{}: not KEY=VALUE: {kv}", self.name));
        self.env.insert(k.to_string(), v.to_string());
    }

    /// The values of every `KEY=` line, in order.
    fn values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.text
            .lines()
            .filter_map(move |l| l.strip_prefix(key)?.strip_prefix('='))
    }

    /// The words of the unit's one `KEY=` command line (`ExecStart`,
    /// `ExecStop`) for instance `instance`, as systemd would run it: the
    /// program first, without the prefix that lets it fail (`-`).
    pub fn command(&self, key: &str, instance: &str) -> Vec<String> {
        let lines: Vec<&str> = self.values(key).collect();
        let [line] = lines[..] else {
            panic!("{}: {} {key}= lines, not one", self.name, lines.len());
        };
        assert!(
            !line.contains(['"', '\'', '\\']),
            "{}: {key}= quotes or escapes, which this reader does not: {line}",
            self.name
        );
        let mut words = Vec::new();
        for word in line.split_whitespace() {
            let word = specifiers(word, instance);
            match word.strip_prefix('$').filter(|v| is_name(v)) {
                Some(var) => words.extend(self.var(var).split_whitespace().map(str::to_string)),
                None => words.push(self.expand(&word)),
            }
        }
        if let Some(program) = words.first_mut() {
            *program = program.trim_start_matches('-').to_string();
        }
        words
    }

    fn var(&self, name: &str) -> &str {
        self.env.get(name).map_or("", String::as_str)
    }

    /// `${VAR}` replaced in `word`.
    fn expand(&self, word: &str) -> String {
        let mut out = String::new();
        let mut rest = word;
        while let Some(start) = rest.find("${") {
            let end = rest[start..]
                .find('}')
                .unwrap_or_else(|| panic!("{}: unclosed ${{ in {word}", self.name));
            out += &rest[..start];
            out += self.var(&rest[start + 2..start + end]);
            rest = &rest[start + end + 1..];
        }
        out + rest
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `%i` (the instance), `%I` (it unescaped) and `%f` (it unescaped as a
/// path) replaced in `word`; `%%` is a `%`.
fn specifiers(word: &str, instance: &str) -> String {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('i') => out += instance,
            Some('I') => out += &unescape(instance),
            Some('f') => out += &format!("/{}", unescape(instance)),
            Some('%') => out.push('%'),
            other => panic!("specifier %{other:?} in {word}: not one this reader knows"),
        }
    }
    out
}

/// An instance name as systemd unescapes it (`systemd-escape --unescape`):
/// `-` is `/`, `\xNN` a byte.
pub fn unescape(instance: &str) -> String {
    let mut bytes = Vec::new();
    let mut rest = instance.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail) {
            (b'\\', [b'x', h, l, more @ ..]) => {
                let hex = std::str::from_utf8(&[*h, *l]).unwrap().to_string();
                bytes.push(u8::from_str_radix(&hex, 16).expect("\\xNN"));
                rest = more;
                continue;
            }
            (b'-', _) => bytes.push(b'/'),
            _ => bytes.push(b),
        }
        rest = tail;
    }
    String::from_utf8(bytes).expect("a UTF-8 instance")
}
