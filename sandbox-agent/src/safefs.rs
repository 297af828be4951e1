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
}
