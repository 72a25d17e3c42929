//! The crate's layers, held to what each folder's `mod.rs` says it may use.
//!
//! `src/` holds the crate root (`lib.rs` and a few files every layer may use: the configuration, the constants, the
//! errors) and one folder a layer. Each layer's `mod.rs` names the layers it may use on a line of its opening
//! comment, `//! May use: the crate root, model, dynamo.`. A path into the crate (`crate::…`, or `super::…` climbing
//! out of the folder) from a file of a layer must start at the root's own modules, its own layer or a layer it may
//! use; a root file may use no layer. The uses must form an order (a layer may use only layers that may not use it,
//! directly or not), so the folders are floors. Comments and a file's unit tests (its `#[cfg(test)]` module) are not
//! read: a doc link or a test may point anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The root's own modules besides `lib.rs`, which every layer may use.
const ROOT_MODULES: &[&str] = &["config", "constants", "error"];
/// At most this many files at the root, `lib.rs` included.
const MOST_ROOT_FILES: usize = 5;

/// One source file: its path under `src/` (with `/`) and its text.
type Files = BTreeMap<String, String>;

#[test]
fn no_import_goes_the_wrong_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_tree(&src, &src);
    let layers = layers(&files).unwrap_or_else(|e| panic!("{e}"));
    assert!(layers.len() >= 4, "the layers found: {:?}", layers.keys().collect::<Vec<_>>());
    let root_files = files.keys().filter(|p| !p.contains('/')).count();
    assert!(root_files <= MOST_ROOT_FILES, "{root_files} files at src/'s root, more than {MOST_ROOT_FILES}");
    let wrong = wrong_way(&files, &layers);
    assert!(wrong.is_empty(), "imports that go the wrong way:\n{}", wrong.join("\n"));
}

#[test]
fn the_check_finds_a_wrong_way_import() {
    let files = tree(&[
        ("lib.rs", "mod low; mod high;"),
        ("config.rs", "use std::fmt;\n#[cfg(test)]\nmod tests { use crate::high::x; }"),
        ("low/mod.rs", "//! The low layer.\n//!\n//! May use: the crate root.\n\npub mod a;\npub mod b;"),
        ("low/a.rs", "use crate::config::Config;\n// crate::high::x in a comment\nuse crate::low::b;"),
        ("low/b.rs", "use crate::high::x::Thing;\nfn f() { crate::{config, high::y}::go(); }"),
        ("low/deep/c.rs", "use super::super::super::high::z;"),
        ("high/mod.rs", "//! The high layer.\n//!\n//! May use: the crate root, low.\n\npub mod x;"),
        ("high/x.rs", "use crate::low::a; use crate::error::E; use super::super::low::b;"),
    ]);
    let wrong = wrong_way(&files, &layers(&files).unwrap());
    assert_eq!(
        wrong,
        [
            "low/b.rs: crate::high (layer low may use: the crate root)",
            "low/b.rs: crate::high (layer low may use: the crate root)",
            "low/deep/c.rs: crate::high (layer low may use: the crate root)",
        ]
    );
    let flat = tree(&[("high/mod.rs", "//! May use: the crate root.\n"), ("high/x.rs", "use crate::records::Header;")]);
    assert_eq!(
        wrong_way(&flat, &layers(&flat).unwrap()),
        ["high/x.rs: crate::records (neither a layer nor the root's: name its layer)"]
    );
    let root = tree(&[("config.rs", "use crate::low::a;"), ("low/mod.rs", "//! May use: the crate root.\n")]);
    assert_eq!(wrong_way(&root, &layers(&root).unwrap()), ["config.rs: crate::low (the crate root may use no layer)"]);
}

#[test]
fn the_layers_must_form_an_order() {
    let circle =
        tree(&[("a/mod.rs", "//! May use: the crate root, b.\n"), ("b/mod.rs", "//! May use: the crate root, a.\n")]);
    assert!(layers(&circle).unwrap_err().contains("circle"));
    let unsaid = tree(&[("a/mod.rs", "//! The a layer.\n")]);
    assert!(layers(&unsaid).unwrap_err().contains("May use"));
    let unknown = tree(&[("a/mod.rs", "//! May use: the crate root, nowhere.\n")]);
    assert!(layers(&unknown).unwrap_err().contains("nowhere"));
}

fn tree(files: &[(&str, &str)]) -> Files {
    files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
}

fn read_tree(dir: &Path, src: &Path) -> Files {
    let mut files = Files::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir).expect("src/ is readable").map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(read_tree(&path, src));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/");
            files.insert(name, fs::read_to_string(&path).unwrap());
        }
    }
    files
}

/// Each layer (a folder of `src/`) and the layers it may use, from its `mod.rs`; an error if one says nothing, names
/// a layer that is not there, or the uses run in a circle.
fn layers(files: &Files) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let folders: BTreeSet<String> =
        files.keys().filter_map(|p| p.split_once('/').map(|(l, _)| l.to_string())).collect();
    let mut layers = BTreeMap::new();
    for layer in &folders {
        let doc = files.get(&format!("{layer}/mod.rs")).map(String::as_str).unwrap_or_default();
        let line = doc
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .find_map(|l| l.trim().strip_prefix("May use:"))
            .ok_or_else(|| format!("{layer}/mod.rs: no `//! May use: …` line naming the layers it may use"))?;
        let mut uses = BTreeSet::new();
        for name in line.trim().trim_end_matches('.').split(',').map(str::trim).filter(|n| *n != "the crate root") {
            if !folders.contains(name) {
                return Err(format!("{layer}/mod.rs: may use {name:?}, which is not a layer"));
            }
            uses.insert(name.to_string());
        }
        layers.insert(layer.clone(), uses);
    }
    for layer in layers.keys() {
        let mut seen = BTreeSet::new();
        let mut next: Vec<&String> = layers[layer].iter().collect();
        while let Some(l) = next.pop() {
            if l == layer {
                return Err(format!("layer {layer} may use itself through others: the uses run in a circle"));
            }
            if seen.insert(l) {
                next.extend(&layers[l]);
            }
        }
    }
    Ok(layers)
}

/// Every path into the crate that goes where its file's layer may not, as `file: crate::first (why)`.
fn wrong_way(files: &Files, layers: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (path, text) in files {
        if path == "lib.rs" {
            continue;
        }
        let layer = path.split_once('/').map(|(l, _)| l);
        for first in crate_paths(path, &code_of(text)) {
            let why = if ROOT_MODULES.contains(&first.as_str()) || Some(first.as_str()) == layer {
                continue;
            } else if !layers.contains_key(&first) {
                "neither a layer nor the root's: name its layer".to_string()
            } else if let Some(l) = layer {
                if layers[l].contains(&first) {
                    continue;
                }
                let may: Vec<&str> =
                    ["the crate root"].into_iter().chain(layers[l].iter().map(String::as_str)).collect();
                format!("layer {l} may use: {}", may.join(", "))
            } else {
                "the crate root may use no layer".to_string()
            };
            wrong.push(format!("{path}: crate::{first} ({why})"));
        }
    }
    wrong
}

/// A file's code without its comments and without its unit tests (a `#[cfg(test)]` module at the top level).
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" && lines.peek().is_some_and(|next| next.starts_with("mod ")) {
            break;
        }
        code.push_str(line.split("//").next().unwrap_or_default());
        code.push('\n');
    }
    code
}

/// The first module of every path into the crate a file's code names: after `crate::` (each name of a
/// `crate::{…}` group), or where a `super::` chain climbs out of the file's folder to the root.
fn crate_paths(path: &str, code: &str) -> Vec<String> {
    // The file's module depth below the crate root: `low/a.rs` and `low/a/mod.rs` are both `crate::low::a`.
    let parts: Vec<&str> = path.trim_end_matches(".rs").split('/').collect();
    let depth = parts.len() - usize::from(parts.last() == Some(&"mod"));
    let mut firsts = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let word_start =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b'$');
        if word_start && rest.starts_with("crate::") {
            let after = &rest["crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                firsts.extend(group_heads(group));
            } else {
                firsts.push(ident(after));
            }
            i += "crate::".len();
        } else if word_start && rest.starts_with("super::") {
            let mut climbs = 0;
            let mut tail = rest;
            while let Some(t) = tail.strip_prefix("super::") {
                climbs += 1;
                tail = t;
            }
            if climbs >= depth {
                firsts.push(ident(tail));
            }
            i += rest.len() - tail.len();
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    firsts.retain(|f| !f.is_empty() && f.starts_with(|c: char| c.is_ascii_lowercase()));
    firsts
}

fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// The first name of each member of a `{…}` group, up to its closing brace.
fn group_heads(group: &str) -> Vec<String> {
    let (mut heads, mut depth, mut at_start) = (Vec::new(), 0, true);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_start = true,
            c if at_start && !c.is_whitespace() => {
                heads.push(ident(&group[i..]));
                at_start = false;
            }
            _ => {}
        }
    }
    heads
}
