//! Root's file operations in folders a workload can write: nothing here follows a symbolic link.
//!
//! The agent runs as root beside a workload that may have planted links (`release/x ->
//! /proc/1/environ`, `~/.config -> /etc`). A base folder is opened from `/` without following
//! any link; everything below it is reached with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! (or, where the kernel or a seccomp profile refuses openat2, a walk opening one name at a time
//! with `O_NOFOLLOW`). Files are written under a fresh name (`O_CREAT | O_EXCL`), chowned through
//! their descriptor and renamed over the target, so a planted link, hard link or FIFO at the
//! target is replaced, never written through. Reads open with `O_NONBLOCK` and accept regular
//! files only, so a planted FIFO cannot stall root.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Uid};
use rustix::io::Errno;

/// How anything below a base is resolved: no link of any kind, never above the base.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS).union(ResolveFlags::NO_MAGICLINKS);

/// The names of a relative path; an error for `..`, `/`-rooted or empty paths.
fn names(relative: &Path) -> io::Result<Vec<&std::ffi::OsStr>> {
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            _ => return Err(refused(relative, "leaves its base folder")),
        }
    }
    if names.is_empty() {
        return Err(refused(relative, "names no file"));
    }
    Ok(names)
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{} {why}", path.display()))
}

/// A clearer error for what the kernel says about a link on the way.
fn explain(path: &Path, err: Errno) -> io::Error {
    match err {
        Errno::LOOP | Errno::XDEV => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} goes through a symbolic link (not followed by the agent)", path.display()),
        ),
        Errno::NOTDIR => io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{}: not a folder (or a symbolic link, not followed by the agent)", path.display()),
        ),
        err => io::Error::new(io::Error::from(err).kind(), format!("{}: {err}", path.display())),
    }
}

/// Opens the folder `path` (absolute) from `/` without following any link on the way.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let relative = path.strip_prefix("/").map_err(|_| refused(path, "is not absolute"))?;
    let root = rustix::fs::open("/", OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    if relative.as_os_str().is_empty() {
        return Ok(root);
    }
    open_beneath(&root, relative, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open the folder {}: {e}", path.display())))
}

/// Opens `relative` below the folder `dir` with `flags`, following no link.
pub fn open_beneath(dir: &OwnedFd, relative: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    names(relative)?;
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    match rustix::fs::openat2(dir, relative, flags, mode, BENEATH) {
        Err(Errno::NOSYS | Errno::PERM) => walk_open(dir, relative, flags, mode),
        // EAGAIN: a rename raced the lookup; the walk settles it.
        Err(Errno::AGAIN) => walk_open(dir, relative, flags, mode),
        result => result.map_err(|e| explain(relative, e)),
    }
}

/// [`open_beneath`] one name at a time with `O_NOFOLLOW`, for kernels without openat2.
pub fn walk_open(dir: &OwnedFd, relative: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let names = names(relative)?;
    let Some((last, folders)) = names.split_last() else { return Err(refused(relative, "names no file")) };
    let mut current: Option<OwnedFd> = None;
    for name in folders {
        let at = current.as_ref().unwrap_or(dir);
        let flags = OFlags::DIRECTORY | OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        current = Some(rustix::fs::openat(at, *name, flags, Mode::empty()).map_err(|e| explain(relative, e))?);
    }
    let at = current.as_ref().unwrap_or(dir);
    rustix::fs::openat(at, *last, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, mode).map_err(|e| explain(relative, e))
}

/// Opens a regular file below `dir` for reading (never a link, FIFO or device).
pub fn open_regular(dir: &OwnedFd, relative: &Path) -> io::Result<(File, rustix::fs::Stat)> {
    let fd = open_beneath(dir, relative, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", relative.display()),
        ));
    }
    // Reads of a regular file never block; clear O_NONBLOCK anyway for plain std reads.
    rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
    Ok((File::from(fd), stat))
}

/// Reads a regular file below `dir`, following no link.
pub fn read_beneath(dir: &OwnedFd, relative: &Path) -> io::Result<Vec<u8>> {
    let (mut file, _) = open_regular(dir, relative)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The SHA-256 and the size of a regular file below `dir`, read through no link and streamed
/// (an artifact of any size is never loaded whole).
pub fn sha256_beneath(dir: &OwnedFd, relative: &Path) -> io::Result<([u8; 32], u64)> {
    use sha2::Digest;
    let (file, stat) = open_regular(dir, relative)?;
    let mut hasher = sha2::Sha256::new();
    // No further than its size when opened: a process still appending cannot make this endless.
    let size = io::copy(&mut file.take(stat.st_size.max(0) as u64), &mut hasher)?;
    Ok((hasher.finalize().into(), size))
}

/// Opens (creating what is missing, mode 0755, chowned to `owner`) the folder `relative` below
/// `dir`, one name at a time, following no link.
pub fn create_dirs(dir: &OwnedFd, relative: &Path, owner: Option<(u32, u32)>) -> io::Result<OwnedFd> {
    let mut current =
        rustix::fs::openat(dir, ".", OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    if relative.components().all(|c| c == Component::CurDir) {
        return Ok(current);
    }
    for name in names(relative)? {
        let created = match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(explain(relative, e)),
        };
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let next = rustix::fs::openat(&current, name, flags, Mode::empty()).map_err(|e| explain(relative, e))?;
        if created && let Some(owner) = owner {
            chown(&next, owner)?;
        }
        current = next;
    }
    Ok(current)
}

fn chown(fd: &impl AsFd, (uid, gid): (u32, u32)) -> io::Result<()> {
    rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    Ok(())
}

/// Writes `bytes` to `relative` below `dir` (its folders created as by [`create_dirs`]), owned
/// by `owner` (else by root), mode 0644: written under a fresh name and renamed over whatever
/// was there, so nothing at the target is followed or written through.
pub fn write_beneath(dir: &OwnedFd, relative: &Path, bytes: &[u8], owner: Option<(u32, u32)>) -> io::Result<()> {
    let names = names(relative)?;
    let Some((name, folders)) = names.split_last() else { return Err(refused(relative, "names no file")) };
    let parent: std::path::PathBuf = folders.iter().collect();
    let parent = create_dirs(dir, &parent, owner)?;
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(".sandbench-{}", std::process::id()));
    match rustix::fs::unlinkat(&parent, &temp, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(explain(relative, e)),
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&parent, &temp, flags, Mode::from_raw_mode(0o644)).map_err(|e| explain(relative, e))?;
    let written = (|| {
        if let Some(owner) = owner {
            chown(&fd, owner)?;
        }
        let mut file = File::from(fd);
        file.write_all(bytes)?;
        rustix::fs::renameat(&parent, &temp, &parent, *name).map_err(|e| explain(relative, e))
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&parent, &temp, AtFlags::empty());
    }
    written
}

/// How deep root walks or removes a folder tree (a workload can nest folders without end).
pub const MAX_DEPTH: usize = 256;

fn too_deep(what: &str) -> io::Error {
    io::Error::other(format!("{what}: more than {MAX_DEPTH} nested folders (not followed by the agent)"))
}

/// Opens the folder reached by the descriptor `fd` (an `O_PATH` one too) for reading its entries.
fn reopen_dir(fd: impl AsFd) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(fd, ".", OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?)
}

/// The names in the folder `dir`, without `.` and `..`.
fn entry_names(dir: &impl AsFd) -> io::Result<Vec<std::ffi::CString>> {
    let mut entries = rustix::fs::Dir::new(reopen_dir(dir)?)?;
    let mut names = Vec::new();
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// Walks the tree below the folder `dir`, depth first, through no link: each entry is opened by
/// name with `O_PATH | O_NOFOLLOW` (a link is itself, never its target) and given to `visit` with
/// its `fstat`; a folder is entered, through that same descriptor, when `visit` says true — so a
/// folder swapped for a link meanwhile is never walked into. An entry gone meanwhile is skipped;
/// a tree deeper than [`MAX_DEPTH`] is an error.
pub fn walk_tree(
    dir: &impl AsFd,
    visit: &mut dyn FnMut(&OwnedFd, &std::ffi::CStr, &rustix::fs::Stat) -> io::Result<bool>,
) -> io::Result<()> {
    walk_tree_at(dir.as_fd(), 0, visit)
}

fn walk_tree_at(
    dir: std::os::fd::BorrowedFd,
    depth: usize,
    visit: &mut dyn FnMut(&OwnedFd, &std::ffi::CStr, &rustix::fs::Stat) -> io::Result<bool>,
) -> io::Result<()> {
    if depth >= MAX_DEPTH {
        return Err(too_deep("cannot walk the folder tree"));
    }
    // A folder removed while the walk is under way (a cache cleaned) is empty, not an error.
    let names = match entry_names(&dir) {
        Err(e) if depth > 0 && e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => return Ok(()),
        other => other?,
    };
    for name in names {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(dir, &name, flags, Mode::empty()) {
            Err(Errno::NOENT) => continue,
            other => other?,
        };
        let stat = rustix::fs::fstat(&fd)?;
        if visit(&fd, &name, &stat)? && FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            walk_tree_at(fd.as_fd(), depth + 1, visit)?;
        }
    }
    Ok(())
}

/// Changes the owner of the folder `dir` and of everything below it (`chown -R`), through no
/// link: links themselves are chowned, never their targets, and a file with other hard links
/// that belongs to someone else is left alone (it may be a link to a file outside the tree,
/// where `fs.protected_hardlinks` is off).
pub fn chown_tree(dir: &impl AsFd, (uid, gid): (u32, u32)) -> io::Result<()> {
    chown(dir, (uid, gid))?;
    walk_tree(dir, &mut |fd, _, stat| {
        let folder = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
        if !folder && stat.st_nlink > 1 && stat.st_uid != uid {
            return Ok(false);
        }
        rustix::fs::chownat(fd, c"", Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)), AtFlags::EMPTY_PATH)?;
        Ok(true)
    })
}

/// Removes the entry `name` of the folder `dir` — a folder with everything in it — never
/// following a link (a link is removed as itself). Missing is fine.
pub fn remove_entry(dir: &impl AsFd, name: &std::ffi::OsStr) -> io::Result<()> {
    let shown = Path::new(name);
    if shown.components().ne([Component::Normal(name)]) {
        return Err(refused(shown, "is not a plain name"));
    }
    let name = std::ffi::CString::new(name.as_encoded_bytes()).map_err(|_| refused(shown, "has a NUL character"))?;
    remove_at(dir.as_fd(), &name, 0)
}

fn remove_at(dir: std::os::fd::BorrowedFd, name: &std::ffi::CStr, depth: usize) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR) => {}
        Err(e) => return Err(e.into()),
    }
    if depth >= MAX_DEPTH {
        return Err(too_deep("cannot remove the folder tree"));
    }
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let folder = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(folder) => folder,
        Err(Errno::NOENT) => return Ok(()),
        // Swapped for a link or a file meanwhile: that is removed as itself.
        Err(Errno::LOOP | Errno::NOTDIR) => return Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?),
        Err(e) => return Err(e.into()),
    };
    // A live process may add entries while they go: a few passes, then the folder itself.
    for _ in 0..3 {
        let names = entry_names(&folder)?;
        if names.is_empty() {
            break;
        }
        for inner in names {
            remove_at(folder.as_fd(), &inner, depth + 1)?;
        }
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, symlink};

    use super::*;

    /// A folder with a secret outside it and links planted inside pointing at it.
    fn planted() -> (tempfile::TempDir, OwnedFd) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        std::fs::create_dir_all(base.join("release")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::fs::write(dir.path().join("outside/secret"), b"secret").unwrap();
        std::fs::write(base.join("release/pkg.tgz"), b"tarball").unwrap();
        symlink(dir.path().join("outside/secret"), base.join("release/x")).unwrap();
        symlink("../../outside/secret", base.join("release/relative")).unwrap();
        symlink(dir.path().join("outside"), base.join("linked")).unwrap();
        symlink("/proc/self/environ", base.join("release/environ")).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, base.join("release/fifo"), Mode::from_raw_mode(0o644)).unwrap();
        let fd = open_dir(&base).unwrap();
        (dir, fd)
    }

    #[test]
    fn reads_regular_files_beneath_and_nothing_through_a_link() {
        let (dir, base) = planted();
        assert_eq!(read_beneath(&base, Path::new("release/pkg.tgz")).unwrap(), b"tarball");
        let (digest, size) = sha256_beneath(&base, Path::new("release/pkg.tgz")).unwrap();
        assert_eq!((digest, size), (<sha2::Sha256 as sha2::Digest>::digest(b"tarball").into(), 7));
        assert!(sha256_beneath(&base, Path::new("release/x")).is_err(), "a link is not hashed");
        for path in ["release/x", "release/relative", "release/environ", "linked/secret", "../outside/secret"] {
            assert!(read_beneath(&base, Path::new(path)).is_err(), "{path} was read");
            assert!(walk_open(&base, Path::new(path), OFlags::RDONLY, Mode::empty()).is_err(), "{path} walked");
        }
        let err = read_beneath(&base, Path::new("release/x")).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        // A FIFO is refused at once, not waited on.
        let err = read_beneath(&base, Path::new("release/fifo")).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(read_beneath(&base, Path::new("release")).is_err(), "a folder is no file");
        // The base itself is opened without following links either.
        assert!(open_dir(&dir.path().join("base/linked")).is_err());
        assert!(open_dir(Path::new("relative/path")).is_err());
    }

    #[test]
    fn writes_replace_planted_links_and_never_write_through_them() {
        let (dir, base) = planted();
        let secret = dir.path().join("outside/secret");
        write_beneath(&base, Path::new("release/x"), b"sums", Some((4242, 4343))).unwrap();
        assert_eq!(std::fs::read(&secret).unwrap(), b"secret");
        let written = dir.path().join("base/release/x");
        let meta = std::fs::symlink_metadata(&written).unwrap();
        assert!(meta.is_file() && meta.uid() == 4242 && meta.gid() == 4343, "{meta:?}");
        assert_eq!(std::fs::read(&written).unwrap(), b"sums");
        // A hard link at the target is replaced, not written through.
        std::fs::hard_link(&secret, dir.path().join("base/hard")).unwrap();
        write_beneath(&base, Path::new("hard"), b"new", None).unwrap();
        assert_eq!(std::fs::read(&secret).unwrap(), b"secret");
        // A FIFO at the target too.
        write_beneath(&base, Path::new("release/fifo"), b"f", None).unwrap();
        // Folders on the way are created and owned, but a linked folder is refused.
        write_beneath(&base, Path::new("a/b/c.json"), b"{}", Some((4242, 4343))).unwrap();
        assert_eq!(std::fs::metadata(dir.path().join("base/a/b")).unwrap().uid(), 4242);
        let err = write_beneath(&base, Path::new("linked/planted.txt"), b"x", None).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(!dir.path().join("outside/planted.txt").exists());
        assert!(write_beneath(&base, Path::new("../escape"), b"x", None).is_err());
        assert!(write_beneath(&base, Path::new(""), b"x", None).is_err());
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("base/release"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".sandbench-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn trees_are_chowned_walked_and_removed_through_no_link() {
        let (dir, base) = planted();
        let outside = dir.path().join("outside");
        let secret = outside.join("secret");
        std::fs::create_dir_all(dir.path().join("base/a/b")).unwrap();
        std::fs::write(dir.path().join("base/a/b/file"), b"x").unwrap();
        // A hard link to root's file elsewhere keeps its owner; one of the user's own is fine.
        std::fs::hard_link(&secret, dir.path().join("base/a/hard")).unwrap();
        chown_tree(&base, (4242, 4343)).unwrap();
        let owner = |path: &str| {
            let meta = std::fs::symlink_metadata(dir.path().join(path)).unwrap();
            (meta.uid(), meta.gid())
        };
        for path in
            ["base", "base/a", "base/a/b", "base/a/b/file", "base/release/x", "base/linked", "base/release/fifo"]
        {
            assert_eq!(owner(path), (4242, 4343), "{path}");
        }
        assert_eq!(owner("outside"), (0, 0), "a linked folder's target is not chowned");
        assert_eq!(owner("outside/secret"), (0, 0), "a link's target or a hard link is not chowned");
        // The walk sees links as links and never goes through them.
        let mut seen = Vec::new();
        walk_tree(&base, &mut |_, name, stat| {
            seen.push((name.to_string_lossy().into_owned(), FileType::from_raw_mode(stat.st_mode)));
            Ok(true)
        })
        .unwrap();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert!(seen.contains(&("linked".into(), FileType::Symlink)), "{seen:?}");
        assert!(seen.contains(&("file".into(), FileType::RegularFile)), "{seen:?}");
        assert!(!seen.iter().any(|(name, _)| name == "secret"), "the walk went through a link: {seen:?}");
        // Removal: links go as themselves, what they point to stays.
        for name in ["linked", "release", "a", "missing"] {
            remove_entry(&base, name.as_ref()).unwrap();
            assert!(std::fs::symlink_metadata(dir.path().join("base").join(name)).is_err(), "{name}");
        }
        assert_eq!(std::fs::read(&secret).unwrap(), b"secret");
        for bad in ["a/b", "..", ".", ""] {
            assert!(remove_entry(&base, bad.as_ref()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn trees_deeper_than_the_limit_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let deep: std::path::PathBuf = std::iter::repeat_n("d", MAX_DEPTH + 1).collect();
        std::fs::create_dir_all(dir.path().join(&deep)).unwrap();
        let base = open_dir(dir.path()).unwrap();
        let err = walk_tree(&base, &mut |_, _, _| Ok(true)).unwrap_err().to_string();
        assert!(err.contains("more than 256 nested folders"), "{err}");
        assert!(remove_entry(&base, "d".as_ref()).unwrap_err().to_string().contains("nested folders"));
        // Within the limit, it all goes.
        let shallow: std::path::PathBuf = deep.iter().take(20).collect();
        std::fs::remove_dir_all(dir.path().join("d").join(shallow)).unwrap();
        remove_entry(&base, "d".as_ref()).unwrap();
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
