//! A path's apparent size for a `size` step or a script's `sizes`: the `st_size` of every
//! regular file the path (a glob allowed) matches, folders walked, symlinks not followed —
//! read as the step's user ([`crate::as_user`]), so the product's files are seen as it sees them
//! and root chooses nothing.

use std::io;
use std::path::{Path, PathBuf};

/// Entries walked at most for one size (a tree of millions is an error, not an endless read).
const MAX_ENTRIES: u64 = 10_000_000;

/// The apparent size of `pattern` as the user `uid`/`gid`.
pub fn apparent_size_as(pattern: &Path, uid: u32, gid: u32) -> io::Result<u64> {
    crate::as_user::run(uid, gid, || apparent_size(pattern))
}

/// The apparent size of what `pattern` names: one path, or every path a glob matches (at least
/// one). A missing path is an error naming it.
pub fn apparent_size(pattern: &Path) -> io::Result<u64> {
    let text = pattern.to_string_lossy();
    let paths: Vec<PathBuf> = if text.contains(['*', '?', '[']) {
        let matches = glob::glob(&text).map_err(|e| invalid(format!("{text} is not a valid glob: {e}")))?;
        let paths: Vec<PathBuf> = matches.filter_map(Result::ok).collect();
        if paths.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("no file matches {text}")));
        }
        paths
    } else {
        vec![pattern.to_path_buf()]
    };
    let mut walked = 0;
    let mut total = 0;
    for path in paths {
        total += tree_size(&path, &mut walked)?;
    }
    Ok(total)
}

/// Regular files under `root` (itself included), summed; symlinks and special files count 0.
fn tree_size(root: &Path, walked: &mut u64) -> io::Result<u64> {
    let named = |p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        *walked += 1;
        if *walked > MAX_ENTRIES {
            return Err(invalid(format!("{} holds more than {MAX_ENTRIES} entries", root.display())));
        }
        let meta = std::fs::symlink_metadata(&path).map_err(|e| named(&path, e))?;
        if meta.is_file() {
            total += meta.len();
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(|e| named(&path, e))? {
                stack.push(entry.map_err(|e| named(&path, e))?.path());
            }
        }
    }
    Ok(total)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_regular_files_of_globs_and_folders_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        std::fs::create_dir_all(store.join("deep")).unwrap();
        std::fs::write(store.join("session.sqlite"), vec![0u8; 1000]).unwrap();
        std::fs::write(store.join("session.sqlite-wal"), vec![0u8; 234]).unwrap();
        std::fs::write(store.join("deep/chunk"), vec![0u8; 10]).unwrap();
        std::fs::write(dir.path().join("outside"), vec![0u8; 5000]).unwrap();
        // A link to a big file outside counts nothing, nor is the folder it points to walked.
        std::os::unix::fs::symlink(dir.path().join("outside"), store.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), store.join("up")).unwrap();
        assert_eq!(apparent_size(&store.join("session.sqlite*")).unwrap(), 1234);
        assert_eq!(apparent_size(&store.join("session.sqlite")).unwrap(), 1000);
        assert_eq!(apparent_size(&store).unwrap(), 1244);
        assert_eq!(apparent_size(&store.join("link")).unwrap(), 0);
    }

    #[test]
    fn a_missing_path_or_a_glob_matching_nothing_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nothing");
        let err = apparent_size(&missing).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: ", missing.display())), "{err}");
        let pattern = dir.path().join("*.sqlite");
        let err = apparent_size(&pattern).unwrap_err().to_string();
        assert_eq!(err, format!("no file matches {}", pattern.display()));
        let err = apparent_size(&dir.path().join("[")).unwrap_err().to_string();
        assert!(err.contains("is not a valid glob"), "{err}");
    }
}
