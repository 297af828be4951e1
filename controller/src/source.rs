//! Source delivery from a local git repository: resolve a revision to its exact commit, and
//! export that commit's tree (of the spec's folder) as a tar to upload into the sandbox.

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::process::Command;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// A revision as asked for and the commit it resolved to.
pub struct Revision {
    /// As asked for (`main`, a SHA, …).
    pub rev: String,
    pub commit: String,
}

async fn git(repo: &Path, args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .await
        .context("cannot run git (is it installed?)")?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let why = match stderr.trim() {
            "" => output.status.to_string(),
            text => text.to_string(),
        };
        bail!("git {} failed in {}: {why}", args.join(" "), repo.display());
    }
    Ok(output.stdout)
}

/// The full commit id a revision names in `repo`.
pub async fn resolve(repo: &Path, rev: &str) -> anyhow::Result<String> {
    if rev.is_empty() || rev.starts_with('-') || rev.chars().any(char::is_control) {
        bail!("invalid revision {rev:?}: expected a branch, tag or commit of {}", repo.display());
    }
    let out = git(repo, &["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")])
        .await
        .with_context(|| format!("revision {rev:?} is not a commit of {}", repo.display()))?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// A tar of `commit`'s tree of the folder `repo` (which may be a subfolder of its repository),
/// with every path under `dest` (e.g. `home/builder/source/`).
pub async fn archive(repo: &Path, commit: &str, dest: &str) -> anyhow::Result<Vec<u8>> {
    let prefix = String::from_utf8_lossy(&git(repo, &["rev-parse", "--show-prefix"]).await?).trim().to_string();
    let top = String::from_utf8_lossy(&git(repo, &["rev-parse", "--show-toplevel"]).await?).trim().to_string();
    let tree = format!("{commit}:{prefix}");
    let dest = format!("{}/", dest.trim_matches('/'));
    // From the top: run in a subfolder, git archive would narrow the tree to it a second time.
    git(Path::new(&top), &["archive", "--format=tar", &format!("--prefix={dest}"), &tree])
        .await
        .with_context(|| format!("cannot export {tree} from {}", repo.display()))
}

/// The first-parent commits from `good` to `bad` of `repo`, both included, oldest first, each
/// with its subject line: what `sandbench bisect` searches. `good` must be an ancestor of `bad`.
pub async fn first_parents(repo: &Path, good: &str, bad: &str) -> anyhow::Result<Vec<crate::bisect::Commit>> {
    if git(repo, &["merge-base", "--is-ancestor", good, bad]).await.is_err() {
        bail!("{good} is not an ancestor of {bad} in {}: nothing to bisect between them", repo.display());
    }
    let out = git(repo, &["log", "--first-parent", "--reverse", "--format=%H %s", &format!("{good}..{bad}")]).await?;
    let subject = git(repo, &["log", "-1", "--format=%s", good]).await?;
    let mut commits = vec![crate::bisect::Commit {
        commit: good.to_string(),
        subject: String::from_utf8_lossy(&subject).trim().into(),
    }];
    for line in String::from_utf8_lossy(&out).lines() {
        let (commit, subject) = line.split_once(' ').unwrap_or((line, ""));
        commits.push(crate::bisect::Commit { commit: commit.to_string(), subject: subject.to_string() });
    }
    if commits.len() < 2 {
        bail!("{good} and {bad} are the same commit: nothing to bisect");
    }
    Ok(commits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) {
        let ok = std::process::Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap().success();
        assert!(ok, "{script}");
    }

    #[tokio::test]
    async fn exports_the_exact_commit_of_a_subfolder() {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q -b main . && mkdir -p app && echo one > app/a && echo top > t \
             && git add -A && git -c user.name=t -c user.email=t@t commit -qm one \
             && echo two > app/a && git -c user.name=t -c user.email=t@t commit -qam two && echo dirty > app/a",
        );
        let app = dir.path().join("app");
        let first = resolve(&app, "HEAD~1").await.unwrap();
        assert_eq!(first.len(), 40);
        let tar = archive(&app, &first, "/home/builder/source").await.unwrap();
        let mut entries = tar::Archive::new(tar.as_slice());
        let mut files = Vec::new();
        for entry in entries.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            files.push((path, text));
        }
        assert!(files.contains(&("home/builder/source/a".to_string(), "one\n".to_string())), "{files:?}");
        assert!(!files.iter().any(|(p, _)| p.ends_with("/t")), "only the subfolder: {files:?}");
        let err = resolve(&app, "no-such-branch").await.unwrap_err().to_string();
        assert!(err.contains("no-such-branch"), "{err}");
        // A revision of any script gets a clear error, never a panic.
        for rev in ["aéééé", "漢字", "a\u{1b}[31m", "", "--output=x"] {
            let err = format!("{:#}", resolve(&app, rev).await.unwrap_err());
            assert!(err.contains(&format!("{rev:?}")) && !err.contains('\u{1b}'), "{err}");
            assert!(!err.ends_with(": "), "{err}");
        }
    }
}
