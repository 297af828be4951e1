//! Benchmark users, without NSS: `/etc/passwd` and `/etc/group` are parsed and edited here (a
//! static agent cannot use glibc's user lookup), homes are created from `/etc/skel`, and each
//! user's environment is built from scratch as the reference harness does.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// A user as the agent runs processes for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: String,
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
        self.create(name, uid, true)
    }

    /// The user `name` with `uid`, created if missing; an existing home is kept (and owned by it).
    pub fn ensure(&self, name: &str, uid: u32) -> anyhow::Result<User> {
        if let Some(user) = self.find(name)?
            && user.uid == uid
        {
            let home = self.host_path(&user.home);
            fs::create_dir_all(&home)?;
            chown_tree(&home, user.uid, user.gid)?;
            return Ok(user);
        }
        self.create(name, uid, false)
    }

    /// Where a path of the sandbox is under this root.
    pub fn host_path(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    fn create(&self, name: &str, uid: u32, wipe: bool) -> anyhow::Result<User> {
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
        let home = self.host_path(&home_in_sandbox);
        if wipe && home.exists() {
            fs::remove_dir_all(&home).with_context(|| format!("cannot remove the old home {}", home.display()))?;
        }
        fs::create_dir_all(&home).with_context(|| format!("cannot create {}", home.display()))?;
        let skel = self.etc("skel");
        if skel.is_dir() && wipe {
            copy_tree(&skel, &home)?;
        }
        fs::set_permissions(&home, fs::Permissions::from_mode(0o755))?;
        chown_tree(&home, uid, uid)?;
        Ok(user)
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

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// `chown -R uid:gid path`, not following symlinks.
pub fn chown_tree(path: &Path, uid: u32, gid: u32) -> anyhow::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .with_context(|| format!("cannot chown {}", path.display()))?;
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
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
        ("TMPDIR".to_string(), crate::isolation::scratch_dir(user).display().to_string()),
        ("XDG_RUNTIME_DIR".to_string(), crate::isolation::runtime_dir(user).display().to_string()),
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
