//! Installed footprint: the apparent size of a folder tree, like
//! `du --apparent-size --summarize --block-size=1 --exclude=…`: files, folders and symlinks
//! counted by their own size, hard links once, excluded names (a `glob` pattern matched against
//! the entry's name, at any depth) skipped with everything under them.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::Context;
use glob::Pattern;

/// The reference harness's excludes for a home folder.
pub const HOME_EXCLUDES: &[&str] = &[".cache", ".npm", "*.log", "sessions", "session-artifacts", "workspace"];

pub fn apparent_size(root: &Path, excludes: &[String]) -> anyhow::Result<u64> {
    let excludes = excludes
        .iter()
        .map(|p| Pattern::new(p).with_context(|| format!("invalid footprint exclude pattern {p:?}")))
        .collect::<anyhow::Result<Vec<Pattern>>>()?;
    let mut seen = HashSet::new();
    let mut total = 0;
    walk(root, &excludes, &mut seen, &mut total).with_context(|| format!("cannot measure {}", root.display()))?;
    Ok(total)
}

fn walk(path: &Path, excludes: &[Pattern], seen: &mut HashSet<(u64, u64)>, total: &mut u64) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        // Gone while walking (a process deleting its files): nothing to count.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
        return Ok(());
    }
    *total += meta.len();
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if excludes.iter().any(|pattern| pattern.matches(&name)) {
                continue;
            }
            walk(&entry.path(), excludes, seen, total)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_exclude_pattern_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = apparent_size(dir.path(), &["[".to_string()]).unwrap_err();
        assert!(format!("{err:#}").starts_with("invalid footprint exclude pattern \"[\""), "{err:#}");
    }

    #[test]
    fn sums_apparent_sizes_skipping_excludes_and_counting_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("home");
        std::fs::create_dir_all(root.join(".local/bin")).unwrap();
        std::fs::create_dir_all(root.join(".npm/cache")).unwrap();
        std::fs::create_dir_all(root.join("deep/sessions")).unwrap();
        std::fs::write(root.join(".local/bin/tool"), vec![0u8; 1000]).unwrap();
        std::fs::hard_link(root.join(".local/bin/tool"), root.join("tool-link")).unwrap();
        std::fs::write(root.join(".npm/cache/blob"), vec![0u8; 5000]).unwrap();
        std::fs::write(root.join("deep/sessions/s"), vec![0u8; 7000]).unwrap();
        std::fs::write(root.join("deep/x.log"), vec![0u8; 300]).unwrap();
        std::os::unix::fs::symlink("tool-link", root.join("sym")).unwrap();
        let dirs = ["", ".local", ".local/bin", "deep"]
            .iter()
            .map(|d| std::fs::symlink_metadata(root.join(d)).unwrap().len())
            .sum::<u64>();
        let expected = dirs + 1000 + "tool-link".len() as u64;
        let excludes: Vec<String> = HOME_EXCLUDES.iter().map(|s| s.to_string()).collect();
        assert_eq!(apparent_size(&root, &excludes).unwrap(), expected);
    }
}
