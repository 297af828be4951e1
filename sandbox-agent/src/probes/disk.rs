//! Installed footprint: the apparent size of a folder tree, like
//! `du --apparent-size --summarize --block-size=1 --exclude=…`: files, folders and symlinks
//! counted by their own size, hard links once, excluded names (a `glob` pattern matched against
//! the entry's name, at any depth) skipped with everything under them.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use glob::Pattern;
use rustix::fs::FileType;

use crate::safefs;

/// The reference harness's excludes for a home folder.
pub const HOME_EXCLUDES: &[&str] = &[".cache", ".npm", "*.log", "sessions", "session-artifacts", "workspace"];

/// The apparent size of the tree at `root`, walked through descriptors as root while the user's
/// processes may still run: no link is followed, however the tree changes meanwhile
/// ([`crate::safefs::walk_tree`]). A missing `root` is 0 bytes.
pub fn apparent_size(root: &Path, excludes: &[String]) -> anyhow::Result<u64> {
    let excludes = excludes
        .iter()
        .map(|p| Pattern::new(p).with_context(|| format!("invalid footprint exclude pattern {p:?}")))
        .collect::<anyhow::Result<Vec<Pattern>>>()?;
    let dir = match safefs::open_dir(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        other => other.with_context(|| format!("cannot measure {}", root.display()))?,
    };
    let mut total = rustix::fs::fstat(&dir)?.st_size as u64;
    let mut seen = HashSet::new();
    safefs::walk_tree(&dir, &mut |_, name, stat| {
        if excludes.iter().any(|pattern| pattern.matches(&name.to_string_lossy())) {
            return Ok(false);
        }
        let folder = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
        if !folder && stat.st_nlink > 1 && !seen.insert((stat.st_dev, stat.st_ino)) {
            return Ok(false);
        }
        total += stat.st_size as u64;
        Ok(true)
    })
    .with_context(|| format!("cannot measure {}", root.display()))?;
    Ok(total)
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
        // A link to a big folder outside counts as the link only; a missing home is empty.
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::fs::write(dir.path().join("outside/big"), vec![0u8; 50_000]).unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("out")).unwrap();
        let link = dir.path().join("outside").as_os_str().len() as u64;
        assert_eq!(apparent_size(&root, &excludes).unwrap(), expected + link);
        assert_eq!(apparent_size(&dir.path().join("none"), &excludes).unwrap(), 0);
    }
}
