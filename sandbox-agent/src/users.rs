//! Benchmark users, without NSS: `/etc/passwd` and `/etc/group` are parsed and edited here (a
//! static agent cannot use glibc's user lookup), homes are created from `/etc/skel`, and each
//! user's environment is built from scratch as the reference harness does.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::safefs;

/// A user as the agent runs processes for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: String,
}

/// The folder of a user's own temporary files, under `/tmp` (`isolation` creates it and sweeps it between trials).
pub fn scratch_dir(user: &User) -> PathBuf {
    PathBuf::from(format!("/tmp/sandbench-{}", user.name))
}

/// The user's `XDG_RUNTIME_DIR`, inside its scratch folder.
pub fn runtime_dir(user: &User) -> PathBuf {
    scratch_dir(user).join("run")
}

/// One line of `/etc/passwd`.
fn parse_passwd_line(line: &str) -> Option<User> {
    let fields: Vec<&str> = line.split(':').collect();
    if fields.len() != 7 || line.starts_with('#') {
        return None;
    }
    Some(User {
        name: fields[0].to_string(),
        uid: fields[2].parse().ok()?,
        gid: fields[3].parse().ok()?,
        home: PathBuf::from(fields[5]),
        shell: fields[6].to_string(),
    })
}

/// Every user of a passwd file's text (malformed lines skipped).
pub fn parse_passwd(text: &str) -> Vec<User> {
    text.lines().filter_map(parse_passwd_line).collect()
}

/// The accounts database of a root file system (`/` in a sandbox, a temp folder in tests).
pub struct Accounts {
    root: PathBuf,
}

impl Accounts {
    pub fn new(root: impl Into<PathBuf>) -> Accounts {
        Accounts { root: root.into() }
    }

    fn etc(&self, name: &str) -> PathBuf {
        self.root.join("etc").join(name)
    }

    fn read(&self, name: &str) -> io::Result<String> {
        match fs::read_to_string(self.etc(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
            other => other,
        }
    }

    pub fn find(&self, name: &str) -> anyhow::Result<Option<User>> {
        Ok(parse_passwd(&self.read("passwd")?).into_iter().find(|u| u.name == name))
    }

    /// Creates `name` with `uid` (and a group of the same name and id), home `/home/<name>`
    /// populated from `/etc/skel`, shell `/bin/bash`. A user left by an earlier attempt with the
    /// same name and uid is replaced, home and all, so every trial starts fresh.
    pub fn create_fresh(&self, name: &str, uid: u32) -> anyhow::Result<User> {
        self.create(name, uid, true, 0o755)
    }

    /// [`Accounts::create_fresh`], the home private to the user (mode 0700): what a trial's user
    /// makes there no other user reads.
    pub fn create_private(&self, name: &str, uid: u32) -> anyhow::Result<User> {
        self.create(name, uid, true, 0o700)
    }

    /// The user `name` with `uid`, created if missing; an existing home is kept (and owned by it).
    pub fn ensure(&self, name: &str, uid: u32) -> anyhow::Result<User> {
        if let Some(user) = self.find(name)?
            && user.uid == uid
        {
            let home = self.home_dir(&user.home, false)?;
            safefs::chown_tree(&home, (user.uid, user.gid))
                .with_context(|| format!("cannot chown {}", user.home.display()))?;
            return Ok(user);
        }
        self.create(name, uid, false, 0o755)
    }

    /// Where a path of the sandbox is under this root.
    pub fn host_path(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    fn create(&self, name: &str, uid: u32, wipe: bool, mode: u32) -> anyhow::Result<User> {
        validate_name(name)?;
        let passwd = self.read("passwd")?;
        let group = self.read("group")?;
        let users = parse_passwd(&passwd);
        if let Some(clash) = users.iter().find(|u| (u.uid == uid) != (u.name == name)) {
            bail!("cannot create user {name} with uid {uid}: {} already has uid {}", clash.name, clash.uid);
        }
        if group.lines().any(|l| {
            let f: Vec<&str> = l.split(':').collect();
            f.len() >= 3 && (f[2] == uid.to_string()) != (f[0] == name)
        }) {
            bail!("cannot create group {name} with gid {uid}: the name or id is taken");
        }
        let home_in_sandbox = PathBuf::from("/home").join(name);
        let user = User { name: name.into(), uid, gid: uid, home: home_in_sandbox.clone(), shell: "/bin/bash".into() };
        let keep = |text: &str| -> String {
            text.lines().filter(|l| l.split(':').next() != Some(name)).map(|l| format!("{l}\n")).collect::<String>()
        };
        let new_passwd = format!(
            "{}{name}:x:{uid}:{uid}:sandbench benchmark user:{}:/bin/bash\n",
            keep(&passwd),
            home_in_sandbox.display()
        );
        let new_group = format!("{}{name}:x:{uid}:\n", keep(&group));
        write_atomic(&self.etc("passwd"), &new_passwd, 0o644)?;
        write_atomic(&self.etc("group"), &new_group, 0o644)?;
        if self.etc("shadow").exists() {
            let shadow = self.read("shadow")?;
            write_atomic(&self.etc("shadow"), &format!("{}{name}:!:19000:0:99999:7:::\n", keep(&shadow)), 0o640)?;
        }
        let home = self.home_dir(&home_in_sandbox, wipe)?;
        let skel = self.etc("skel");
        if wipe && skel.is_dir() {
            let skel = safefs::open_dir(&skel)?;
            copy_tree(&skel, &home, 0).context("cannot copy /etc/skel into the home")?;
        }
        rustix::fs::fchmod(&home, Mode::from_raw_mode(mode))?;
        safefs::chown_tree(&home, (uid, uid)).with_context(|| format!("cannot chown {}", home_in_sandbox.display()))?;
        Ok(user)
    }

    /// Makes the home of `user` private again (mode 0700), through no link: after a phase,
    /// whatever its processes opened up of it is closed to the next trial's user.
    pub fn close_home(&self, user: &User) -> anyhow::Result<()> {
        let path = self.host_path(&user.home);
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            bail!("no home folder at {}", user.home.display());
        };
        let parent = safefs::open_dir(parent).with_context(|| format!("cannot open {}", parent.display()))?;
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let home =
            rustix::fs::openat(&parent, name, flags, Mode::empty()).map_err(io::Error::from).with_context(|| {
                format!("cannot open the home {} (a symbolic link is not followed)", user.home.display())
            })?;
        rustix::fs::fchmod(&home, Mode::from_raw_mode(0o700))
            .map_err(io::Error::from)
            .with_context(|| format!("cannot make the home {} private", user.home.display()))
    }

    /// The home folder `home` (of the sandbox), opened through no link, created (mode 0755) when
    /// missing; with `wipe`, whatever was there is removed first, so it is a fresh folder of root's
    /// until the caller chowns it. A link in its place is refused, never followed.
    fn home_dir(&self, home: &Path, wipe: bool) -> anyhow::Result<OwnedFd> {
        let path = self.host_path(home);
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            bail!("no home folder at {}", home.display());
        };
        let parent = safefs::create_dirs(&safefs::open_dir(Path::new("/"))?, parent.strip_prefix("/")?, None)
            .with_context(|| format!("cannot open {}", parent.display()))?;
        if wipe {
            safefs::remove_entry(&parent, name)
                .with_context(|| format!("cannot remove the old home {}", home.display()))?;
        }
        match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io::Error::from(e)).with_context(|| format!("cannot create {}", home.display())),
        }
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(&parent, name, flags, Mode::empty())
            .map_err(io::Error::from)
            .with_context(|| format!("cannot open the home {} (a symbolic link is not followed)", home.display()))
    }
}

fn validate_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !ok {
        bail!("invalid user name {name:?}: use lowercase letters, digits, '_' and '-', starting with a letter");
    }
    Ok(())
}

fn write_atomic(path: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    let tmp = path.with_extension("sandbench-tmp");
    fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

/// Copies the folder `from` (root's `/etc/skel`) into `to` (a fresh home, still root's), one
/// name at a time through descriptors: files are created anew (`O_EXCL`), links as links.
fn copy_tree(from: &OwnedFd, to: &OwnedFd, depth: usize) -> anyhow::Result<()> {
    if depth >= safefs::MAX_DEPTH {
        bail!("more than {} nested folders", safefs::MAX_DEPTH);
    }
    let mut entries = rustix::fs::Dir::read_from(from)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let stat = rustix::fs::statat(from, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let nofollow = OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                match rustix::fs::mkdirat(to, name, Mode::from_raw_mode(stat.st_mode & 0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                let open = |dir: &OwnedFd| rustix::fs::openat(dir, name, OFlags::DIRECTORY | nofollow, Mode::empty());
                copy_tree(&open(from)?, &open(to)?, depth + 1)?;
            }
            FileType::Symlink => rustix::fs::symlinkat(rustix::fs::readlinkat(from, name, Vec::new())?, to, name)?,
            FileType::RegularFile => {
                let mut source =
                    fs::File::from(rustix::fs::openat(from, name, OFlags::RDONLY | nofollow, Mode::empty())?);
                let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | nofollow;
                let mode = Mode::from_raw_mode(stat.st_mode & 0o777);
                let mut target = fs::File::from(rustix::fs::openat(to, name, flags, mode)?);
                io::copy(&mut source, &mut target)?;
            }
            // Sockets, FIFOs and devices are not copied into a home.
            _ => {}
        }
    }
    Ok(())
}

/// `chown -R uid:gid path` through no link: the folder `path` is opened without following any
/// link on the way, and everything below it is walked as [`safefs::chown_tree`] does.
pub fn chown_tree(path: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    let dir = safefs::open_dir(path)?;
    safefs::chown_tree(&dir, (uid, gid)).with_context(|| format!("cannot chown {}", path.display()))
}

/// The environment a benchmark process gets: built from nothing, as the reference harness does
/// (nothing is inherited from root), plus the spec's variables, which win.
pub fn environment(user: &User, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let home = user.home.display().to_string();
    let mut env = BTreeMap::from([
        ("HOME".to_string(), home.clone()),
        ("USER".to_string(), user.name.clone()),
        ("LOGNAME".to_string(), user.name.clone()),
        ("SHELL".to_string(), "/bin/bash".to_string()),
        ("PATH".to_string(), format!("{home}/.local/bin:/usr/local/bin:/usr/bin:/bin")),
        ("TERM".to_string(), "xterm-256color".to_string()),
        ("COLORTERM".to_string(), "truecolor".to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
        ("NPM_CONFIG_PREFIX".to_string(), format!("{home}/.local")),
        ("NPM_CONFIG_CACHE".to_string(), format!("{home}/.npm")),
        ("UV_CACHE_DIR".to_string(), format!("{home}/.cache/uv")),
        ("UV_LINK_MODE".to_string(), "copy".to_string()),
        // Places of the user's own: temporary files in its scratch folder (emptied after every
        // trial), the XDG folders in its home, so nothing another user created is shared.
        ("TMPDIR".to_string(), scratch_dir(user).display().to_string()),
        ("XDG_RUNTIME_DIR".to_string(), runtime_dir(user).display().to_string()),
        ("XDG_CACHE_HOME".to_string(), format!("{home}/.cache")),
        ("XDG_CONFIG_HOME".to_string(), format!("{home}/.config")),
        ("XDG_DATA_HOME".to_string(), format!("{home}/.local/share")),
        ("XDG_STATE_HOME".to_string(), format!("{home}/.local/state")),
    ]);
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Owner uid of a path (for checks).
pub fn owner_uid(path: &Path) -> io::Result<u32> {
    Ok(fs::symlink_metadata(path)?.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with_etc() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        fs::create_dir_all(etc.join("skel")).unwrap();
        fs::write(etc.join("skel/.bashrc"), "# skel\n").unwrap();
        fs::write(
            etc.join("passwd"),
            "root:x:0:0:root:/root:/bin/bash\nnode:x:1000:1000::/home/node:/bin/bash\n# comment\nbroken line\n",
        )
        .unwrap();
        fs::write(etc.join("group"), "root:x:0:\nnode:x:1000:\n").unwrap();
        fs::write(etc.join("shadow"), "root:*:19000:0:99999:7:::\n").unwrap();
        dir
    }

    #[test]
    fn parses_passwd_and_skips_malformed_lines() {
        let users = parse_passwd("root:x:0:0:root:/root:/bin/bash\nbad\nnode:x:1000:1000::/home/node:/bin/sh\n");
        assert_eq!(users.len(), 2);
        assert_eq!(
            users[1],
            User { name: "node".into(), uid: 1000, gid: 1000, home: "/home/node".into(), shell: "/bin/sh".into() }
        );
    }

    #[test]
    fn creates_fresh_users_and_replaces_leftovers() {
        let root = root_with_etc();
        let accounts = Accounts::new(root.path());
        let user = accounts.create_fresh("benchmark1", 2001).unwrap();
        assert_eq!(user.home, PathBuf::from("/home/benchmark1"));
        assert_eq!(accounts.find("benchmark1").unwrap(), Some(user.clone()));
        let home = root.path().join("home/benchmark1");
        assert_eq!(fs::read_to_string(home.join(".bashrc")).unwrap(), "# skel\n");
        fs::write(home.join("leftover"), "x").unwrap();
        // Again: the same user, fresh home, one line per file.
        accounts.create_fresh("benchmark1", 2001).unwrap();
        assert!(!home.join("leftover").exists());
        let passwd = fs::read_to_string(root.path().join("etc/passwd")).unwrap();
        assert_eq!(passwd.lines().filter(|l| l.starts_with("benchmark1:")).count(), 1);
        assert!(passwd.starts_with("root:x:0:0"));
        assert!(fs::read_to_string(root.path().join("etc/shadow")).unwrap().contains("benchmark1:!:"));
        assert!(fs::read_to_string(root.path().join("etc/group")).unwrap().contains("benchmark1:x:2001:\n"));
        // Clashes are refused with the reason.
        let err = accounts.create_fresh("other", 1000).unwrap_err().to_string();
        assert!(err.contains("node already has uid 1000"), "{err}");
        assert!(accounts.create_fresh("Bad Name", 3000).is_err());
    }

    #[test]
    fn homes_are_made_and_chowned_through_no_link() {
        let root = root_with_etc();
        let etc = root.path().join("etc");
        fs::create_dir_all(etc.join("skel/.config")).unwrap();
        fs::write(etc.join("skel/.config/app.toml"), "x = 1\n").unwrap();
        std::os::unix::fs::symlink(".config/app.toml", etc.join("skel/.app")).unwrap();
        let outside = root.path().join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "s").unwrap();
        let owner = |path: &Path| {
            let meta = fs::symlink_metadata(path).unwrap();
            (meta.uid(), meta.gid())
        };
        let accounts = Accounts::new(root.path());
        // A leftover home whose user planted links to the outside: wiped, the outside untouched.
        let home = root.path().join("home/benchmark3");
        fs::create_dir_all(home.join("sub")).unwrap();
        std::os::unix::fs::symlink(&outside, home.join("link")).unwrap();
        std::os::unix::fs::symlink(&outside, home.join("sub/link")).unwrap();
        accounts.create_fresh("benchmark3", 2003).unwrap();
        assert_eq!(owner(&outside), (0, 0));
        assert_eq!(fs::read_to_string(outside.join("secret")).unwrap(), "s");
        assert!(!home.join("link").exists() && !home.join("sub").exists());
        for path in ["", ".bashrc", ".config", ".config/app.toml", ".app"] {
            assert_eq!(owner(&home.join(path)), (2003, 2003), "{path}");
        }
        assert_eq!(fs::symlink_metadata(&home).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_link(home.join(".app")).unwrap(), Path::new(".config/app.toml"));
        assert_eq!(fs::read_to_string(home.join(".config/app.toml")).unwrap(), "x = 1\n");
        // An existing user's home is chowned again, but not what its links point to.
        std::os::unix::fs::symlink(&outside, home.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), home.join("file-link")).unwrap();
        fs::write(home.join("by-root"), "r").unwrap();
        accounts.ensure("benchmark3", 2003).unwrap();
        assert_eq!(owner(&home.join("by-root")), (2003, 2003));
        assert_eq!(owner(&home.join("link")), (2003, 2003));
        assert_eq!((owner(&outside), owner(&outside.join("secret"))), ((0, 0), (0, 0)));
        // A home that is a link is refused, never followed.
        fs::remove_dir_all(&home).unwrap();
        std::os::unix::fs::symlink(&outside, &home).unwrap();
        let err = format!("{:#}", accounts.ensure("benchmark3", 2003).unwrap_err());
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(owner(&outside), (0, 0));
        // create_fresh replaces the link by a fresh home.
        accounts.create_fresh("benchmark3", 2003).unwrap();
        assert!(fs::symlink_metadata(&home).unwrap().is_dir());
        assert_eq!(fs::read_to_string(outside.join("secret")).unwrap(), "s");
        // chown_tree by path refuses a path through a link.
        let err = chown_tree(&root.path().join("home/benchmark3/.app"), 0, 0).unwrap_err();
        assert!(format!("{err:#}").contains("symbolic link"), "{err:#}");
    }

    #[test]
    fn the_environment_is_built_from_scratch() {
        let user = User {
            name: "benchmark2".into(),
            uid: 2002,
            gid: 2002,
            home: "/home/benchmark2".into(),
            shell: "/bin/bash".into(),
        };
        let extra =
            BTreeMap::from([("LANG".to_string(), "en_US.UTF-8".to_string()), ("X".to_string(), "1".to_string())]);
        let env = environment(&user, &extra);
        assert_eq!(env["PATH"], "/home/benchmark2/.local/bin:/usr/local/bin:/usr/bin:/bin");
        assert_eq!(env["NPM_CONFIG_PREFIX"], "/home/benchmark2/.local");
        assert_eq!(env["UV_CACHE_DIR"], "/home/benchmark2/.cache/uv");
        assert_eq!(env["LANG"], "en_US.UTF-8");
        assert_eq!(env["TMPDIR"], "/tmp/sandbench-benchmark2");
        assert_eq!(env["XDG_RUNTIME_DIR"], "/tmp/sandbench-benchmark2/run");
        assert_eq!(env["XDG_CACHE_HOME"], "/home/benchmark2/.cache");
        assert_eq!(env["XDG_STATE_HOME"], "/home/benchmark2/.local/state");
        assert_eq!(env.len(), 19);
        assert!(!env.contains_key("SANDBENCH_TOKEN"));
    }
}
