//! The bridge's content cache on the host: answers by URL (and Accept) pointing at bodies by
//! their SHA-256, in a private folder (0700) shared by sandboxes and runs, bounded in size (the
//! least recently used bodies go first, but never one the run pinned: see [`Cache::pin`]).

use std::collections::HashSet;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What the cache holds for one URL.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    pub url: String,
    pub content_type: String,
    /// The body's SHA-256 (hex): its name under `blobs/`.
    pub sha256: String,
    pub size: u64,
    pub fetched_unix: u64,
}

#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    bound: u64,
    /// Bodies (by SHA-256) this run keeps whatever the bound: the answers a side's timed trials
    /// will ask for again.
    pinned: Mutex<HashSet<String>>,
}

impl Cache {
    /// The cache in `dir` (made private when missing or not yet so), at most `bound` bytes of
    /// bodies.
    pub fn open(dir: &Path, bound: u64) -> anyhow::Result<Cache> {
        for sub in ["", "urls", "blobs", "tmp"] {
            let path = dir.join(sub);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
                .with_context(|| format!("cannot create the registry cache {}", path.display()))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make the registry cache {} private", dir.display()))?;
        Ok(Cache { dir: dir.to_path_buf(), bound, pinned: Mutex::default() })
    }

    /// Where the cache lives by default: `$SANDBENCH_REGISTRY_CACHE`, else the user's cache folder.
    pub fn default_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("SANDBENCH_REGISTRY_CACHE") {
            return PathBuf::from(dir);
        }
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(|| PathBuf::from("."))
            .join("sandbench")
            .join("registries")
    }

    fn key_path(&self, url: &str, accept: &str) -> PathBuf {
        let key = hex(&Sha256::digest(format!("{url}\n{accept}").as_bytes()));
        self.dir.join("urls").join(format!("{key}.json"))
    }

    pub fn blob(&self, entry: &Entry) -> PathBuf {
        self.dir.join("blobs").join(&entry.sha256)
    }

    /// The entry for `url` with this Accept, when its body is there and it is younger than
    /// `max_age` (None: any age).
    pub fn get(&self, url: &str, accept: &str, max_age: Option<Duration>) -> Option<Entry> {
        let entry: Entry = serde_json::from_slice(&std::fs::read(self.key_path(url, accept)).ok()?).ok()?;
        let now = unix_now();
        if entry.url != url || max_age.is_some_and(|age| now.saturating_sub(entry.fetched_unix) > age.as_secs()) {
            return None;
        }
        let blob = self.blob(&entry);
        let meta = std::fs::metadata(&blob).ok()?;
        if meta.len() != entry.size {
            return None;
        }
        // Recently used: kept longest when the cache is trimmed.
        let _ = std::fs::File::options().append(true).open(&blob).and_then(|f| f.set_modified(SystemTime::now()));
        Some(entry)
    }

    /// A new temporary file for a body on its way in.
    pub fn temp(&self) -> anyhow::Result<tempfile::NamedTempFile> {
        tempfile::NamedTempFile::new_in(self.dir.join("tmp")).context("cannot create a file in the registry cache")
    }

    /// Keeps the body in `temp` (whose SHA-256 is `sha256`) as the answer for `url`, then trims
    /// the cache to its bound.
    pub fn put(
        &self,
        url: &str,
        accept: &str,
        content_type: &str,
        temp: tempfile::NamedTempFile,
        sha256: &str,
        size: u64,
    ) -> anyhow::Result<Entry> {
        let entry = Entry {
            url: url.to_string(),
            content_type: content_type.to_string(),
            sha256: sha256.to_string(),
            size,
            fetched_unix: unix_now(),
        };
        temp.persist(self.blob(&entry)).map_err(|e| e.error).context("cannot keep a body in the registry cache")?;
        let key = self.key_path(url, accept);
        let tmp = key.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&entry)?)?;
        std::fs::rename(&tmp, &key)?;
        self.trim();
        Ok(entry)
    }

    /// The cache's bound, in bytes of bodies.
    pub fn bound(&self) -> u64 {
        self.bound
    }

    /// Keeps the body whose SHA-256 is `sha256` for as long as this cache is open, whatever the
    /// bound (the caller keeps what it pins within the bound).
    pub fn pin(&self, sha256: &str) {
        self.pinned.lock().unwrap_or_else(PoisonError::into_inner).insert(sha256.to_string());
    }

    /// Removes the least recently used bodies not pinned until the rest fit the bound.
    fn trim(&self) {
        let Ok(read) = std::fs::read_dir(self.dir.join("blobs")) else { return };
        let mut blobs: Vec<(SystemTime, u64, PathBuf)> = read
            .flatten()
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = blobs.iter().map(|b| b.1).sum();
        blobs.sort();
        let pinned = self.pinned.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for (_, size, path) in blobs {
            if total <= self.bound {
                break;
            }
            let kept = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| pinned.contains(n));
            if !kept && std::fs::remove_file(&path).is_ok() {
                total -= size;
            }
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn put(cache: &Cache, url: &str, body: &[u8]) -> Entry {
        let mut temp = cache.temp().unwrap();
        temp.write_all(body).unwrap();
        cache.put(url, "*/*", "application/octet-stream", temp, &hex(&Sha256::digest(body)), body.len() as u64).unwrap()
    }

    #[test]
    fn keeps_bodies_by_url_and_hash_privately_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("c"), 10).unwrap();
        let mode = std::fs::metadata(dir.path().join("c")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let a = put(&cache, "https://r/a", b"aaaaaa");
        assert_eq!(std::fs::read(cache.blob(&a)).unwrap(), b"aaaaaa");
        assert_eq!(cache.get("https://r/a", "*/*", None), Some(a.clone()));
        assert_eq!(cache.get("https://r/a", "application/json", None), None, "another Accept is another answer");
        std::thread::sleep(Duration::from_millis(20));
        // Over the bound: the least recently used body goes.
        put(&cache, "https://r/b", b"bbbbbb");
        assert_eq!(cache.get("https://r/a", "*/*", None), None);
        assert!(cache.get("https://r/b", "*/*", None).is_some());
    }
}
