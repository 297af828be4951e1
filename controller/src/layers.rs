//! The check that the crate is a one-way stack: each top-level module uses only the modules
//! listed above it in the "Layers" list of `lib.rs`. It reads the sources: every `crate::…`
//! path outside comments and test modules is an edge. The helpers here read a folder's list and
//! its paths for `run/layers.rs` too.

use std::path::{Path, PathBuf};

/// The modules of a folder's "Layers" list, bottom first (`mod.rs` last).
pub(crate) fn layers(mod_rs: &str) -> Vec<String> {
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
pub(crate) fn code(text: &str) -> String {
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
pub(crate) fn named(code: &str, prefix: &str) -> Vec<String> {
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

/// Every `.rs` file under `path` (a file, or a folder walked whole), test modules left out: the
/// files named as tests (`tests.rs`, `*_tests.rs`, `fuzz.rs`) and this check's own.
fn sources(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).unwrap().flatten() {
        let p = entry.path();
        let stem = p.file_stem().unwrap_or_default().to_string_lossy().to_string();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|e| e == "rs")
            && !(stem == "tests" || stem.ends_with("_tests") || stem == "fuzz" || stem == "layers")
        {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_crate_is_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let order = layers(&lib);
    let declared: Vec<String> =
        lib.lines().filter_map(|l| l.strip_prefix("pub mod ")).map(|l| l.trim_end_matches(';').to_string()).collect();
    let mut bad = Vec::new();
    for name in &declared {
        let Some(mine) = order.iter().position(|m| m == name) else {
            bad.push(format!("{name} is not in lib.rs's Layers list"));
            continue;
        };
        let folder = src.join(name);
        let path = if folder.is_dir() { folder } else { src.join(format!("{name}.rs")) };
        for file in sources(&path) {
            let code = code(&std::fs::read_to_string(&file).unwrap());
            for used in named(&code, "crate::") {
                match order.iter().position(|m| *m == used) {
                    // Its own paths, and those of the modules above it.
                    Some(theirs) if theirs <= mine => {}
                    Some(_) => bad.push(format!("{}: {name} uses {used}, listed below it", file.display())),
                    // `crate::` before a macro or a name of lib.rs itself.
                    None => {}
                }
            }
        }
    }
    assert!(order.len() == declared.len(), "{order:?} against {declared:?}");
    assert!(bad.is_empty(), "{bad:#?}");
    // The README's layout states the same stack, in the same order.
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    assert_eq!(readme_stack(&readme), order, "the README's layout lists another stack than lib.rs");
}

/// The modules the README's layout lists as the crate's stack, bottom first: each backticked
/// name after "The modules form a one-way stack, bottom first:" up to the semicolon that ends
/// the list (what a name's parenthesis says is skipped).
fn readme_stack(readme: &str) -> Vec<String> {
    const OPENING: &str = "The modules form a one-way stack, bottom first:";
    let Some(at) = readme.find(OPENING) else { return Vec::new() };
    let mut names = Vec::new();
    let mut depth = 0;
    let mut rest = &readme[at + OPENING.len()..];
    while let Some(c) = rest.chars().next() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ';' if depth == 0 => break,
            '`' if depth == 0 => {
                let Some(end) = rest[1..].find('`') else { break };
                names.push(rest[1..=end].to_string());
                rest = &rest[end + 2..];
                continue;
            }
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    names
}

#[test]
fn the_readmes_stack_is_read_name_by_name() {
    let text = "x. The modules form a one-way stack, bottom first: `a`, `b` (`c` is b's), `d`; each `e`";
    assert_eq!(readme_stack(text), ["a", "b", "d"]);
    assert!(readme_stack("no list").is_empty());
}

#[test]
fn the_check_sees_an_edge_going_up() {
    let code = code("use super::{a, b::{c, d}};\n// super::x\nuse super::super::e::f;\nlet g = crate::run::h::i;\n");
    assert_eq!(named(&code, "super::"), ["a", "b"]);
    assert_eq!(named(&code, "super::super::"), ["e"]);
    assert_eq!(named(&code, "crate::run::"), ["h"]);
    assert_eq!(named(&code, "crate::"), ["run"]);
    assert_eq!(layers("//! # Layers\n//!\n//! - `a`: x.\n//! - `mod.rs` (this): y.\n"), ["a", "mod"]);
}

/// The modules a folder holds (its `.rs` files but `mod.rs`, `lib.rs`, `main.rs` and the test
/// files, and its subfolders), each with the siblings its code names: a file through `super::`
/// (or `crate::` at the crate's root), a subfolder through `super::super::` from its own files,
/// and any of them through the folder's full path (`crate::report::…`).
fn siblings(folder: &Path, path: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(folder).unwrap().flatten() {
        let p = entry.path();
        let stem = p.file_stem().unwrap_or_default().to_string_lossy().to_string();
        // Each file of the node, read once, and the prefix its siblings are named through there.
        let (files, up) = if p.is_dir() {
            // At the root every path is `crate::x`; below it, a subfolder's own files reach their
            // siblings through `super::super::` (its deeper files only by the full path).
            (sources(&p), if path.is_empty() { "crate::" } else { "super::super::" })
        } else if p.extension().is_some_and(|e| e == "rs") && !["mod", "lib", "main"].contains(&stem.as_str()) {
            (sources(&p), if path.is_empty() { "crate::" } else { "super::" })
        } else {
            continue;
        };
        if files.is_empty() {
            continue;
        }
        let mut names = Vec::new();
        for file in &files {
            let code = code(&std::fs::read_to_string(file).unwrap());
            if path.is_empty() || !p.is_dir() || file.parent() == Some(&p) {
                names.extend(named(&code, up));
            }
            if !path.is_empty() {
                names.extend(named(&code, &format!("crate::{path}::")));
            }
        }
        out.push((stem, names));
    }
    let known: Vec<String> = out.iter().map(|(n, _)| n.clone()).collect();
    for (name, names) in &mut out {
        names.retain(|n| n != name && known.contains(n));
        names.sort();
        names.dedup();
    }
    out
}

/// A circle among `graph`'s nodes, as the path that closes it, if there is one.
fn circle(graph: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    fn visit(
        graph: &[(String, Vec<String>)],
        node: &str,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.iter().any(|n| n == node) {
            return None;
        }
        path.push(node.to_string());
        let next = graph.iter().find(|(n, _)| n == node).map(|(_, e)| e.clone()).unwrap_or_default();
        for n in next {
            if let Some(found) = visit(graph, &n, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.push(node.to_string());
        None
    }
    let mut done = Vec::new();
    graph.iter().find_map(|(n, _)| visit(graph, n, &mut Vec::new(), &mut done))
}

/// Every folder of `src`, with its module path (`""` for the root, `report`, `run::walk`…).
fn folders(src: &Path, path: &str) -> Vec<(PathBuf, String)> {
    let mut out = vec![(src.to_path_buf(), path.to_string())];
    for entry in std::fs::read_dir(src).unwrap().flatten().filter(|e| e.path().is_dir()) {
        let name = entry.file_name().to_string_lossy().to_string();
        let sub = if path.is_empty() { name } else { format!("{path}::{name}") };
        out.extend(folders(&entry.path(), &sub));
    }
    out
}

#[test]
fn no_folder_of_either_crate_has_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for src in [root.join("src"), root.join("../sandbox-agent/src")] {
        for (folder, path) in folders(&src, "") {
            if let Some(circle) = circle(&siblings(&folder, &path)) {
                found.push(format!("{}: {}", folder.display(), circle.join(" → ")));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_circle_check_finds_a_circle_of_three_and_none_in_a_stack() {
    let graph = |edges: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
        edges.iter().map(|(n, e)| (n.to_string(), e.iter().map(|s| s.to_string()).collect())).collect()
    };
    assert_eq!(circle(&graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])])).unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(circle(&graph(&[("a", &["b", "c"]), ("b", &["c"]), ("c", &[])])), None);
}

#[test]
fn the_library_prints_only_through_the_display() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources(&src) {
        let name = file.strip_prefix(&src).unwrap_or(&file).display().to_string();
        if ["display.rs", "cli.rs"].contains(&name.as_str()) {
            continue;
        }
        let code = code(&std::fs::read_to_string(&file).unwrap());
        for mac in ["println!", "eprintln!", "print!(", "eprint!("] {
            let at = code
                .match_indices(mac)
                .filter(|(i, _)| !code[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'));
            if at.count() > 0 {
                found.push(format!("{name}: {mac}"));
            }
        }
    }
    assert!(found.is_empty(), "print through crate::display::Display instead: {found:#?}");
}
