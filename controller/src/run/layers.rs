//! The check that `run/` is a one-way stack: each module uses only the modules listed above it
//! in its folder's "Layers" list (`run/mod.rs`, `run/walk/mod.rs`). It reads the sources
//! ([`crate::layers`]): every `super::…` and `crate::run::…` path outside comments and test
//! modules is an edge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::layers::{code, layers, named};

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
