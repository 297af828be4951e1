//! Fixtures of scripts and scenarios: run untimed as the step's user before its first trial —
//! every trial, or with `keep = true` once per sandbox into a folder of its own
//! (`$SANDBENCH_KEEP`, under [`KEEP_ROOT`]), which once the fixture succeeded is made root's and
//! read-only to every user, so no trial can change what the next one reads. The folder lies
//! outside every home, scratch and temporary folder the trial sweep empties; a sandbox's
//! filesystem is its own, so nothing kept is shared between sandboxes.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rustix::fs::FileType;
use sandbench_proto::plan::{AgentPlan, KEEP_ROOT, Step};

use crate::context::PhaseContext;
use crate::phases::common;
use crate::safefs;
use crate::users::User;

/// The variable that names the kept folder to the fixture and the step.
pub const ENV: &str = "SANDBENCH_KEEP";
/// Written (by root) once a kept fixture succeeded.
const DONE: &str = ".sandbench-kept";

/// Runs the fixture of step `name` (when it has one): each trial, or once per sandbox when
/// kept. Returns the kept folder.
pub(super) fn prepare(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    user: &User,
    base: &Path,
    name: &str,
    fixture: Option<&Step>,
    keep: bool,
) -> anyhow::Result<Option<PathBuf>> {
    let Some(step) = fixture else { return Ok(None) };
    if !keep {
        ctx.note(&format!("fixture of {name}: $ {}", step.run));
        common::run_step(ctx, step, user, base, &plan.env)?.success(&format!("the fixture of {name}"))?;
        rustix::fs::sync();
        return Ok(None);
    }
    let root = Path::new(KEEP_ROOT);
    let dir = keep_dir(root, user, name);
    if is_kept(&dir) {
        return Ok(Some(dir));
    }
    ctx.note(&format!("fixture of {name}, kept in {}: $ {}", dir.display(), step.run));
    let folder = fresh_folder(root, user, name)?;
    let mut env = plan.env.clone();
    env.insert(ENV.to_string(), dir.display().to_string());
    common::run_step(ctx, step, user, base, &env)?.success(&format!("the kept fixture of {name}"))?;
    seal(&folder).with_context(|| format!("cannot make {} read-only", dir.display()))?;
    safefs::write_beneath(&folder, Path::new(DONE), b"", None)?;
    rustix::fs::sync();
    Ok(Some(dir))
}

/// `<root>/<user>/<name>`: the user's own, so a step of the builder and one of a benchmark user
/// never share one.
fn keep_dir(root: &Path, user: &User, name: &str) -> PathBuf {
    root.join(&user.name).join(name)
}

/// Whether the fixture of `dir` already succeeded: its mark is there, root's.
fn is_kept(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(DONE)).is_ok_and(|m| m.is_file() && std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// An empty folder for the fixture, the user's (whatever a failed attempt left is removed).
fn fresh_folder(root: &Path, user: &User, name: &str) -> anyhow::Result<std::os::fd::OwnedFd> {
    std::fs::create_dir_all(root).with_context(|| format!("cannot make {}", root.display()))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))?;
    let root_fd = safefs::open_dir(root)?;
    let parent = safefs::create_dirs(&root_fd, Path::new(&user.name), None)?;
    safefs::remove_entry(&parent, name.as_ref())?;
    let folder = safefs::create_dirs(&parent, Path::new(name), Some((user.uid, user.gid)))?;
    if rustix::fs::fstat(&folder)?.st_uid != user.uid {
        bail!("{} is not {}'s", keep_dir(root, user, name).display(), user.name);
    }
    Ok(folder)
}

/// Makes the tree root's and takes every write, set-id and sticky bit away (links are chowned
/// as themselves and never followed).
fn seal(folder: &std::os::fd::OwnedFd) -> std::io::Result<()> {
    safefs::chown_tree(folder, (0, 0))?;
    read_only(folder.as_raw_fd(), rustix::fs::fstat(folder)?.st_mode)?;
    safefs::walk_tree(folder, &mut |fd, _, stat| {
        let kind = FileType::from_raw_mode(stat.st_mode);
        if matches!(kind, FileType::RegularFile | FileType::Directory) {
            read_only(fd.as_raw_fd(), stat.st_mode)?;
        }
        Ok(kind == FileType::Directory)
    })
}

/// chmod through the descriptor's `/proc/self/fd` entry (an `O_PATH` descriptor takes no
/// `fchmod`): the inode itself, whatever its name now points to.
fn read_only(fd: i32, mode: u32) -> std::io::Result<()> {
    let kept = mode & 0o555;
    std::fs::set_permissions(format!("/proc/self/fd/{fd}"), std::fs::Permissions::from_mode(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealing_takes_write_and_set_id_bits_away() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("kept");
        std::fs::create_dir_all(inner.join("deep")).unwrap();
        std::fs::write(inner.join("deep/input.txt"), b"x").unwrap();
        std::fs::set_permissions(inner.join("deep/input.txt"), std::fs::Permissions::from_mode(0o4777)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", inner.join("link")).unwrap();
        let folder = safefs::open_dir(&inner).unwrap();
        // chown to root needs root; the bits are what this test checks.
        let _ = safefs::chown_tree(&folder, (0, 0));
        read_only(folder.as_raw_fd(), 0o777).unwrap();
        safefs::walk_tree(&folder, &mut |fd, _, stat| {
            let kind = FileType::from_raw_mode(stat.st_mode);
            if matches!(kind, FileType::RegularFile | FileType::Directory) {
                read_only(fd.as_raw_fd(), stat.st_mode)?;
            }
            Ok(kind == FileType::Directory)
        })
        .unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&inner.join("deep/input.txt")), 0o555);
        assert_eq!(mode(&inner.join("deep")), 0o555);
        assert_eq!(mode(&inner), 0o555);
        // The link's target was left alone.
        assert_ne!(mode(Path::new("/etc/passwd")) & 0o7777, 0o555);
        for p in [inner.join("deep"), inner.clone()] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}
