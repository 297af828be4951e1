//! The check that `run/` is a one-way stack: each module uses only the modules listed above it
//! in its folder's "Layers" list (`run/mod.rs`, `run/walk/mod.rs`). It reads the sources: every
//! `super::…` and `crate::run::…` path outside comments and test modules is an edge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The modules of a folder's "Layers" list, bottom first (`mod.rs` last).
fn layers(mod_rs: &str) -> Vec<String> {
    let section = mod_rs.split("//! # Layers").nth(1).unwrap_or_default();
    section
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//! - `"))
        .filter_map(|l| l.split('`').next())
        .map(|name| name.trim_end_matches(".rs").to_string())
        .collect()
}

/// The code of a file without its comments and its test modules.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" && lines.peek().is_some_and(|l| l.trim_start().starts_with("mod ")) {
            // A test module runs to the end of its file here (the folder's habit).
            if lines.peek().is_some_and(|l| l.trim_end().ends_with('{')) {
                break;
            }
            lines.next();
            continue;
        }
        let line = line.split("//").next().unwrap_or_default();
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The first segment of each path a `use` tree starting at `rest` names (`{a, b::c}` → a, b).
fn first_segments(rest: &str) -> Vec<String> {
    if let Some(inner) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut items = vec![String::new()];
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(String::new());
                    continue;
                }
                _ => {}
            }
            if let Some(last) = items.last_mut() {
                last.push(c);
            }
        }
        return items.iter().filter_map(|i| word(i.trim())).collect();
    }
    word(rest).into_iter().collect()
}

fn word(text: &str) -> Option<String> {
    let w: String = text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!w.is_empty()).then_some(w)
}

/// What `code` names through `prefix` (`super::`, `crate::run::`…).
fn named(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find(prefix) {
        let start = at + found;
        let before = code[..start].chars().last();
        at = start + prefix.len();
        // `super::super::x` is not `super::x`.
        if before.is_some_and(|c| c == ':' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at..];
        if prefix.ends_with("super::") && rest.starts_with("super::") {
            continue;
        }
        out.extend(first_segments(rest));
    }
    out
}

/// Every edge that goes down or sideways in a folder: (file, what it names, why).
fn violations(dir: &Path, outer: Option<(&[String], usize)>) -> Vec<String> {
    let mod_rs = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
    let order = layers(&mod_rs);
    assert!(order.len() > 3, "{}: no Layers list", dir.display());
    let mut bad = Vec::new();
    let position = |name: &str| order.iter().position(|m| m == name);
    let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.extension().is_some_and(|e| e == "rs") {
            files.insert(name, path);
        } else if path.join("mod.rs").exists() {
            files.insert(name, path.join("mod.rs"));
        }
    }
    for (name, path) in &files {
        let Some(mine) = position(name) else {
            // Only test modules are left out of the list.
            if !mod_rs.contains(&format!("#[cfg(test)]\nmod {name};")) {
                bad.push(format!("{}: {name} is not in the Layers list", dir.display()));
            }
            continue;
        };
        let code = code(&std::fs::read_to_string(path).unwrap());
        // A folder's mod.rs is its module: `super::` there is the outer folder.
        let (inner, outer_prefixes) = if name == "mod" && outer.is_some() {
            (None, vec!["super::", "crate::run::"])
        } else if outer.is_some() {
            (Some("super::"), vec!["super::super::", "crate::run::"])
        } else {
            (Some("super::"), vec!["crate::run::"])
        };
        if let Some(prefix) = inner {
            let uses = named(&code, prefix);
            let uses = if outer.is_none() { [uses, named(&code, "crate::run::")].concat() } else { uses };
            for used in uses {
                match position(&used) {
                    Some(theirs) if theirs < mine => {}
                    Some(_) => bad.push(format!("{}: {name} uses {used}, not below it", dir.display())),
                    None => bad.push(format!("{}: {name} uses {used} of mod.rs", dir.display())),
                }
            }
        }
        if let Some((outer_order, walk_at)) = outer {
            for prefix in outer_prefixes {
                for used in named(&code, prefix) {
                    match outer_order.iter().position(|m| *m == used) {
                        Some(theirs) if theirs < walk_at => {}
                        _ => bad.push(format!("{}: {name} uses run's {used}, not below the folder", dir.display())),
                    }
                }
            }
        }
    }
    bad
}

#[test]
fn layers_are_one_way() {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/run");
    let order = layers(&std::fs::read_to_string(run.join("mod.rs")).unwrap());
    let mut bad = violations(&run, None);
    let walk_at = order.iter().position(|m| m == "walk").unwrap();
    bad.extend(violations(&run.join("walk"), Some((&order, walk_at))));
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn the_check_sees_an_edge_going_up() {
    let code = code("use super::{a, b::{c, d}};\n// super::x\nuse super::super::e::f;\nlet g = crate::run::h::i;\n");
    assert_eq!(named(&code, "super::"), ["a", "b"]);
    assert_eq!(named(&code, "super::super::"), ["e"]);
    assert_eq!(named(&code, "crate::run::"), ["h"]);
    assert_eq!(layers("//! # Layers\n//!\n//! - `a`: x.\n//! - `mod.rs` (this): y.\n"), ["a", "mod"]);
}
