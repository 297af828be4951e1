//! Looking at a file as a benchmark user sees it, for root's checks of what an install made:
//! links are followed — a venv's `python`, an npm `bin` entry point outside the home — but only
//! as far as the user could go itself, on a thread whose file system identity is the user's.
//! (Root's own file operations in the user's folders follow no link at all: [`crate::safefs`].)

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{FileType, Gid, Mode, OFlags};
use rustix::io::Errno;

/// Runs `f` on a thread of its own that sees the file system as the user `uid`/`gid` does: its
/// fsuid and fsgid are the user's, its supplementary groups only the user's group, and no
/// capability is in effect. So `f` may follow the user's links — only to where the user could
/// go itself: a link the workload planted to `/proc/1/environ` or to root's files opens
/// nothing. Its real and effective ids stay root's, so no process of the user's may signal or
/// trace the thread; it ends with `f`, its identity with it. (Credentials are per thread in
/// the kernel; these system calls change only the calling thread's.)
pub fn run<T: Send>(uid: u32, gid: u32, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("as-user".into()).spawn_scoped(scope, || {
            become_for_files(uid, gid)?;
            f()
        })?;
        thread.join().unwrap_or_else(|_| Err(io::Error::other("the thread reading as the user panicked")))
    })
}

/// The calling thread's file system identity becomes `uid`/`gid`'s, with no capability left.
fn become_for_files(uid: u32, gid: u32) -> io::Result<()> {
    if uid == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "reading as a user is for users other than root"));
    }
    rustix::thread::set_thread_groups(&[Gid::from_raw(gid)])?;
    // nix: rustix names no setfsuid/setfsgid. They say no error: they return the id before,
    // and an invalid id (-1) changes nothing, so calling again with one tells whether the
    // change took.
    let took = |now: u32, id: u32| -> io::Result<()> {
        if now != id {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("cannot take the file id {id}")));
        }
        Ok(())
    };
    nix::unistd::setfsgid(nix::unistd::Gid::from_raw(gid));
    took(nix::unistd::setfsgid(nix::unistd::Gid::from_raw(u32::MAX)).as_raw(), gid)?;
    nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid));
    took(nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u32::MAX)).as_raw(), uid)?;
    let mut caps = rustix::thread::capabilities(None)?;
    caps.effective = rustix::thread::CapabilitySet::empty();
    rustix::thread::set_capabilities(None, caps)?;
    Ok(())
}

fn named(path: &Path, err: Errno) -> io::Error {
    io::Error::new(io::Error::from(err).kind(), format!("{}: {err}", path.display()))
}

/// Whether `path` exists for the user `uid`/`gid` (`test -e` as it would run it: links followed
/// as far as the user may).
pub fn exists(path: &Path, uid: u32, gid: u32) -> io::Result<bool> {
    run(uid, gid, || match rustix::fs::stat(path) {
        Ok(_) => Ok(true),
        Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS | Errno::LOOP | Errno::NAMETOOLONG) => Ok(false),
        Err(e) => Err(named(path, e)),
    })
}

/// The first `len` bytes (fewer if it is shorter) of the regular file `path`, read as the user
/// `uid`/`gid` ([`run`]), opened with `O_NONBLOCK` so a FIFO cannot stall it.
pub fn head(path: &Path, uid: u32, gid: u32, len: usize) -> io::Result<Vec<u8>> {
    run(uid, gid, || {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| named(path, e))?;
        if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
        let mut head = Vec::with_capacity(len);
        File::from(fd).take(len as u64).read_to_end(&mut head)?;
        Ok(head)
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn reads_as_a_user_see_only_what_the_user_may() {
        // Root's test folder, opened up so the user may walk it, with root's secret and the
        // user's links to it, to a readable file outside (as a venv's python), and a FIFO.
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(path("secret"), b"root only").unwrap();
        std::fs::set_permissions(path("secret"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        std::fs::write(path("public"), b"#!/bin/sh\n").unwrap();
        std::fs::create_dir(path("home")).unwrap();
        symlink(path("secret"), path("home/secret")).unwrap();
        symlink(path("public"), path("home/tool")).unwrap();
        symlink("/proc/1/environ", path("home/environ")).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, path("home/fifo"), Mode::from_raw_mode(0o666)).unwrap();
        let (uid, gid) = (4242, 4242);
        assert_eq!(head(&path("home/tool"), uid, gid, 2).unwrap(), b"#!");
        assert_eq!(head(&path("public"), uid, gid, 100).unwrap(), b"#!/bin/sh\n");
        assert!(exists(&path("home/tool"), uid, gid).unwrap());
        // Root may read these; the user may not, so the check learns nothing of them.
        assert_eq!(std::fs::read(path("home/secret")).unwrap(), b"root only");
        for link in ["home/secret", "home/environ"] {
            let err = head(&path(link), uid, gid, 1).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{link}: {err}");
        }
        assert!(!exists(&path("secret/x"), uid, gid).unwrap());
        assert!(!exists(&path("home/missing"), uid, gid).unwrap());
        // A FIFO is refused at once, not waited on.
        let err = head(&path("home/fifo"), uid, gid, 1).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        // The agent's own identity is untouched: root still reads the secret.
        assert_eq!(std::fs::read(path("secret")).unwrap(), b"root only");
        assert!(run(0, 0, || Ok(())).is_err(), "root is no user to read as");
    }
}
