//! Isolation between trials: every user's private scratch folder (its `TMPDIR` and
//! `XDG_RUNTIME_DIR`), and the sweep of the shared writable places (`/tmp`, `/var/tmp`,
//! `/dev/shm`, `/dev/mqueue`, `/run/user`, `/run/lock`) that removes whatever non-root users left
//! there — never following a symlink — and reports what it removed and what survived. (System V
//! IPC objects are swept by [`crate::ipc`].)

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rustix::fs::{Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

use crate::users::{User, scratch_dir};

/// The shared places every user can write to (`/dev/mqueue`: POSIX message queues, one file
/// each).
pub const SHARED_PLACES: [&str; 6] = ["/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/user", "/run/lock"];

/// How deep the sweep looks into folders owned by root (for example `/tmp/.X11-unix`, mode
/// 1777), where other users may have left entries.
const MAX_DEPTH: usize = 3;

/// Creates the user's scratch and runtime folders (mode 0700, owned by it) under `root` (`/` in
/// a sandbox). Whatever stands in their place and is not a folder of the user's — a symlink, a
/// file, another user's folder — is removed first, without following it.
///
/// The user's processes may be alive meanwhile, and the runtime folder sits in a folder of
/// theirs: everything is done through descriptors (`/tmp` opened without following links, each
/// folder made with `mkdirat`, opened with `O_NOFOLLOW`, checked, then `fchmod` and `fchown`),
/// so a link swapped in between a check and a change is never followed.
pub fn ensure_scratch(root: &Path, user: &User) -> anyhow::Result<()> {
    let scratch = scratch_dir(user);
    let (Some(tmp), Some(name)) = (scratch.parent(), scratch.file_name()) else {
        anyhow::bail!("no scratch folder for the user name {:?}", user.name);
    };
    let tmp = root.join(tmp.strip_prefix("/").unwrap_or(tmp));
    let tmp_fd = crate::safefs::open_dir(&tmp)?;
    let shown = tmp.join(name);
    let scratch_fd = private_dir(&tmp_fd, name, user, &shown)?;
    private_dir(&scratch_fd, "run".as_ref(), user, &shown.join("run"))?;
    Ok(())
}

/// Times a folder is looked at again when it changed under the agent.
const ATTEMPTS: usize = 4;

/// The folder `name` of `parent` as `user`'s private folder (mode 0700, owned by it): kept when
/// it is one already, else whatever stands there is removed and a fresh folder is made.
fn private_dir(parent: &OwnedFd, name: &OsStr, user: &User, shown: &Path) -> anyhow::Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..ATTEMPTS {
        match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => {
                let stat = rustix::fs::fstat(&fd)?;
                if stat.st_uid == user.uid && stat.st_mode & 0o777 == 0o700 {
                    return Ok(fd);
                }
            }
            // Missing, or a link or a file in the way (removed below).
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => {}
            Err(err) => return Err(io::Error::from(err)).with_context(|| format!("cannot open {}", shown.display())),
        }
        crate::safefs::remove_entry(parent, name).with_context(|| format!("cannot replace {}", shown.display()))?;
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            // Made again meanwhile: looked at afresh.
            Err(Errno::EXIST) => continue,
            Err(err) => return Err(io::Error::from(err)).with_context(|| format!("cannot create {}", shown.display())),
        }
        let fd = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
            Err(err) => return Err(io::Error::from(err)).with_context(|| format!("cannot open {}", shown.display())),
        };
        // Only the folder just made (the agent's) is made the user's; one swapped in is looked at again.
        if rustix::fs::fstat(&fd)?.st_uid != rustix::process::geteuid().as_raw() {
            continue;
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
        rustix::fs::fchown(&fd, Some(Uid::from_raw(user.uid)), Some(Gid::from_raw(user.gid)))
            .with_context(|| format!("cannot chown {}", shown.display()))?;
        return Ok(fd);
    }
    anyhow::bail!("{} kept changing while the agent made it", shown.display())
}

/// An entry of a shared place, as its `lstat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub uid: u32,
    /// A real folder (not a symlink to one).
    pub dir: bool,
}

/// Where the sweep lists and removes: the real file system, or a fake in unit tests.
pub trait SharedFs {
    /// The entries of a folder, not following symlinks; a missing folder has none.
    fn list(&self, dir: &Path) -> io::Result<Vec<Entry>>;
    /// Removes an entry (a folder with everything in it), never following a symlink.
    fn remove(&self, entry: &Entry) -> io::Result<()>;
}

/// The real file system.
pub struct RealFs;

impl SharedFs for RealFs {
    fn list(&self, dir: &Path) -> io::Result<Vec<Entry>> {
        let read = match fs::read_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            other => other?,
        };
        let mut entries = Vec::new();
        for entry in read.flatten() {
            // An entry gone meanwhile is no entry.
            if let Ok(meta) = fs::symlink_metadata(entry.path()) {
                entries.push(Entry { path: entry.path(), uid: meta.uid(), dir: meta.file_type().is_dir() });
            }
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }

    fn remove(&self, entry: &Entry) -> io::Result<()> {
        remove(&entry.path, entry.dir)
    }
}

/// Removes a path without following symlinks: `remove_dir_all` does not follow them (it opens
/// every level with `O_NOFOLLOW`), and a symlink is removed as itself.
fn remove(path: &Path, dir: bool) -> io::Result<()> {
    if dir { fs::remove_dir_all(path) } else { fs::remove_file(path) }
}

/// Every entry of the shared places, down into root's folders as the sweep goes.
pub fn snapshot(fs: &dyn SharedFs, places: &[&str]) -> BTreeSet<PathBuf> {
    let mut seen = BTreeSet::new();
    for place in places {
        walk(fs, Path::new(place), 0, &mut |entry| {
            seen.insert(entry.path.clone());
        });
    }
    seen
}

fn walk(fs: &dyn SharedFs, dir: &Path, depth: usize, visit: &mut dyn FnMut(&Entry)) {
    let Ok(entries) = fs.list(dir) else { return };
    for entry in entries {
        visit(&entry);
        if entry.uid == 0 && entry.dir && depth + 1 < MAX_DEPTH {
            walk(fs, &entry.path, depth + 1, visit);
        }
    }
}

/// What a sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Entries of non-root users removed (the users' own scratch folders left out).
    pub removed: Vec<(PathBuf, u32)>,
    /// Entries that could not be removed, with why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Removes every entry owned by a non-root uid from the shared places (and from root's folders
/// in them, down to MAX_DEPTH). Entries in `quiet` (the users' scratch folders, expected to be
/// there) are removed without being reported.
pub fn sweep(fs: &dyn SharedFs, places: &[&str], quiet: &BTreeSet<PathBuf>) -> Swept {
    let mut swept = Swept::default();
    for place in places {
        sweep_dir(fs, Path::new(place), 0, quiet, &mut swept);
    }
    swept
}

fn sweep_dir(fs: &dyn SharedFs, dir: &Path, depth: usize, quiet: &BTreeSet<PathBuf>, swept: &mut Swept) {
    let Ok(entries) = fs.list(dir) else { return };
    for entry in entries {
        if entry.uid != 0 {
            match fs.remove(&entry) {
                Ok(()) if quiet.contains(&entry.path) => {}
                Ok(()) => swept.removed.push((entry.path, entry.uid)),
                Err(err) => swept.failed.push((entry.path, err.to_string())),
            }
        } else if entry.dir && depth + 1 < MAX_DEPTH {
            sweep_dir(fs, &entry.path, depth + 1, quiet, swept);
        }
    }
}

/// The warnings of a trial's isolation: what was removed, what could not be, and what appeared
/// during the trial and is still there after the sweep (left by root, or not removable). Paths
/// are quoted with escapes, so a hostile name cannot forge a line.
pub fn warnings(
    phase: &str,
    trial: u32,
    swept: &Swept,
    before: &BTreeSet<PathBuf>,
    after: &BTreeSet<PathBuf>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, uid) in &swept.removed {
        out.push(format!("{phase} trial {trial}: removed {path:?} (owner uid {uid}) left in a shared place"));
    }
    for (path, err) in &swept.failed {
        out.push(format!("{phase} trial {trial}: cannot remove {path:?} from a shared place: {err}"));
    }
    for path in after.difference(before) {
        out.push(format!("{phase} trial {trial}: {path:?} appeared in a shared place and survived cleanup"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Mutex;

    /// A file system of paths with owners; folders are the paths with children or marked dir.
    struct Fake {
        entries: Mutex<BTreeMap<PathBuf, (u32, bool)>>,
        stuck: BTreeSet<PathBuf>,
    }

    impl Fake {
        fn new(entries: &[(&str, u32, bool)]) -> Fake {
            Fake {
                entries: Mutex::new(entries.iter().map(|(p, u, d)| (PathBuf::from(p), (*u, *d))).collect()),
                stuck: BTreeSet::new(),
            }
        }
        fn paths(&self) -> Vec<String> {
            self.entries.lock().unwrap().keys().map(|p| p.display().to_string()).collect()
        }
    }

    impl SharedFs for Fake {
        fn list(&self, dir: &Path) -> io::Result<Vec<Entry>> {
            let entries = self.entries.lock().unwrap();
            Ok(entries
                .iter()
                .filter(|(p, _)| p.parent() == Some(dir))
                .map(|(p, (uid, d))| Entry { path: p.clone(), uid: *uid, dir: *d })
                .collect())
        }
        fn remove(&self, entry: &Entry) -> io::Result<()> {
            if self.stuck.contains(&entry.path) {
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, "busy"));
            }
            // A symlink (dir false) is removed as itself: what it points to stays.
            self.entries.lock().unwrap().retain(|p, _| !p.starts_with(&entry.path));
            Ok(())
        }
    }

    #[test]
    fn removes_what_non_root_users_left_and_keeps_roots() {
        let fake = Fake::new(&[
            ("/tmp/node-compile-cache", 1999, true),
            ("/tmp/node-compile-cache/v24", 1999, true),
            ("/tmp/.X11-unix", 0, true),
            ("/tmp/.X11-unix/X0", 2001, false),
            ("/tmp/root-file", 0, false),
            ("/tmp/sandbench-benchmark1", 2001, true),
            ("/var/tmp/link-to-etc", 2001, false),
            ("/etc", 0, true),
            ("/etc/passwd", 0, false),
            ("/dev/shm/sem.x", 2002, false),
        ]);
        let quiet = BTreeSet::from([PathBuf::from("/tmp/sandbench-benchmark1")]);
        let before = snapshot(&fake, &SHARED_PLACES);
        assert!(before.contains(Path::new("/tmp/.X11-unix/X0")), "root's folders are looked into");
        let swept = sweep(&fake, &SHARED_PLACES, &quiet);
        assert_eq!(
            swept.removed,
            vec![
                (PathBuf::from("/tmp/.X11-unix/X0"), 2001),
                (PathBuf::from("/tmp/node-compile-cache"), 1999),
                (PathBuf::from("/var/tmp/link-to-etc"), 2001),
                (PathBuf::from("/dev/shm/sem.x"), 2002),
            ]
        );
        assert!(swept.failed.is_empty());
        assert_eq!(fake.paths(), ["/etc", "/etc/passwd", "/tmp/.X11-unix", "/tmp/root-file"]);
    }

    #[test]
    fn what_survives_the_sweep_is_a_warning() {
        let mut fake = Fake::new(&[("/tmp/old", 0, false), ("/tmp/stuck", 2001, false)]);
        fake.stuck.insert(PathBuf::from("/tmp/stuck"));
        let before = BTreeSet::from([PathBuf::from("/tmp/old")]);
        fake.entries.lock().unwrap().insert("/tmp/by-root\n\x1b[31m".into(), (0, false));
        fake.entries.lock().unwrap().insert("/dev/shm/gone".into(), (2001, false));
        let swept = sweep(&fake, &SHARED_PLACES, &BTreeSet::new());
        let after = snapshot(&fake, &SHARED_PLACES);
        let texts = warnings("measure", 1, &swept, &before, &after);
        assert_eq!(
            texts,
            [
                "measure trial 1: removed \"/dev/shm/gone\" (owner uid 2001) left in a shared place",
                "measure trial 1: cannot remove \"/tmp/stuck\" from a shared place: busy",
                "measure trial 1: \"/tmp/by-root\\n\\u{1b}[31m\" appeared in a shared place and survived cleanup",
                "measure trial 1: \"/tmp/stuck\" appeared in a shared place and survived cleanup",
            ]
        );
    }

    #[test]
    fn depth_is_bounded() {
        let fake = Fake::new(&[
            ("/tmp/a", 0, true),
            ("/tmp/a/b", 0, true),
            ("/tmp/a/b/c", 0, true),
            ("/tmp/a/b/c/deep", 2001, false),
            ("/tmp/a/b/near", 2001, false),
        ]);
        let swept = sweep(&fake, &["/tmp"], &BTreeSet::new());
        assert_eq!(swept.removed, vec![(PathBuf::from("/tmp/a/b/near"), 2001)]);
    }

    #[test]
    fn the_real_sweep_never_follows_symlinks() {
        // As any user: a symlink in a "shared place" to a folder outside it is removed as itself.
        let dir = tempfile::tempdir().unwrap();
        let place = dir.path().join("tmp");
        let outside = dir.path().join("outside");
        fs::create_dir_all(&place).unwrap();
        fs::create_dir_all(outside.join("sub")).unwrap();
        fs::write(outside.join("sub/keep"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, place.join("link")).unwrap();
        fs::create_dir_all(place.join("real/inner")).unwrap();
        std::os::unix::fs::symlink(&outside, place.join("real/inner/link")).unwrap();
        let uid = fs::symlink_metadata(&place).unwrap().uid();
        let place_str = place.to_str().unwrap();
        let swept = sweep(&RealFs, &[place_str], &BTreeSet::new());
        if uid == 0 {
            // As root, our own entries are root's: nothing is removed.
            assert!(swept.removed.is_empty());
            return;
        }
        assert_eq!(swept.removed.len(), 2, "{swept:?}");
        assert!(fs::read_dir(&place).unwrap().next().is_none());
        assert!(outside.join("sub/keep").is_file(), "the target of a symlink was not touched");
    }

    #[test]
    fn scratch_folders_are_private_and_replace_what_stands_in_their_way() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("tmp")).unwrap();
        let me = fs::symlink_metadata(root.path()).unwrap();
        let user = User {
            name: "benchmark1".into(),
            uid: me.uid(),
            gid: me.gid(),
            home: "/home/benchmark1".into(),
            shell: "/bin/bash".into(),
        };
        let target = root.path().join("elsewhere");
        fs::create_dir_all(&target).unwrap();
        std::os::unix::fs::symlink(&target, root.path().join("tmp/sandbench-benchmark1")).unwrap();
        ensure_scratch(root.path(), &user).unwrap();
        let scratch = root.path().join("tmp/sandbench-benchmark1");
        let meta = fs::symlink_metadata(&scratch).unwrap();
        assert!(meta.is_dir(), "the symlink was replaced by a folder");
        assert_eq!(meta.mode() & 0o777, 0o700);
        assert!(scratch.join("run").is_dir());
        assert!(fs::read_dir(&target).unwrap().next().is_none(), "nothing was created through the symlink");
        fs::write(scratch.join("kept"), "x").unwrap();
        ensure_scratch(root.path(), &user).unwrap();
        assert!(scratch.join("kept").is_file(), "a private folder in place is kept");
    }

    /// A scratch folder as ensure_scratch leaves it: a real folder of `uid`, mode 0700.
    fn private(path: &Path, uid: u32) -> bool {
        let meta = fs::symlink_metadata(path).unwrap();
        meta.is_dir() && meta.uid() == uid && meta.mode() & 0o777 == 0o700
    }

    #[test]
    fn scratch_folders_are_made_through_no_link_and_owned_by_the_user() {
        // As root (the agent's tests run as root): the user is someone else.
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        fs::create_dir_all(root.path().join("tmp")).unwrap();
        fs::create_dir_all(outside.join("sub")).unwrap();
        fs::write(outside.join("sub/keep"), "x").unwrap();
        let user = User {
            name: "benchmark7".into(),
            uid: 4242,
            gid: 4343,
            home: "/home/benchmark7".into(),
            shell: "/bin/bash".into(),
        };
        let scratch = root.path().join("tmp/sandbench-benchmark7");
        let run = scratch.join("run");
        let outside_untouched = || {
            assert_eq!(fs::read_dir(&outside).unwrap().count(), 1, "something was made outside");
            assert_eq!(fs::read_to_string(outside.join("sub/keep")).unwrap(), "x");
            let meta = fs::symlink_metadata(&outside).unwrap();
            assert!(meta.uid() == 0 && meta.mode() & 0o777 != 0o700, "the outside folder was chowned or chmodded");
        };
        // A link to a folder outside, in place of the runtime folder in the user's own folder.
        ensure_scratch(root.path(), &user).unwrap();
        assert!(private(&scratch, 4242) && private(&run, 4242));
        assert_eq!(fs::symlink_metadata(&scratch).unwrap().gid(), 4343);
        fs::remove_dir(&run).unwrap();
        std::os::unix::fs::symlink(&outside, &run).unwrap();
        ensure_scratch(root.path(), &user).unwrap();
        assert!(private(&run, 4242), "the link was replaced by a folder");
        outside_untouched();
        // Another user's folder with a link to the outside in it: removed, the outside kept.
        fs::remove_dir_all(&scratch).unwrap();
        fs::create_dir_all(scratch.join("inner")).unwrap();
        std::os::unix::fs::symlink(&outside, scratch.join("inner/link")).unwrap();
        std::os::unix::fs::symlink(&outside, scratch.join("run")).unwrap();
        std::os::unix::fs::lchown(&scratch, Some(4343), Some(4343)).unwrap();
        ensure_scratch(root.path(), &user).unwrap();
        assert!(private(&scratch, 4242) && private(&run, 4242));
        assert!(!scratch.join("inner").exists(), "the other user's folder was replaced");
        outside_untouched();
        // A hard link to a file outside, and a folder of the user's that is not private.
        fs::remove_dir_all(&scratch).unwrap();
        fs::hard_link(outside.join("sub/keep"), &scratch).unwrap();
        ensure_scratch(root.path(), &user).unwrap();
        assert!(private(&scratch, 4242));
        outside_untouched();
        fs::set_permissions(&run, fs::Permissions::from_mode(0o777)).unwrap();
        fs::write(run.join("old"), "x").unwrap();
        ensure_scratch(root.path(), &user).unwrap();
        assert!(private(&run, 4242) && !run.join("old").exists());
    }
}
