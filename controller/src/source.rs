//! Source delivery from a local git repository: resolve a revision to its exact commit, and
//! export that commit's tree (of the spec's folder) as a tar to upload into the sandbox, as it was
//! committed: the revision's `.gitattributes` run no filter and convert nothing.

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
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
/// with every path under `dest` (e.g. `home/builder/source/`), streamed from `git archive` as it
/// is read, never held whole. A tree whose files sum to more than `max_bytes` is refused before
/// anything is sent, naming `source.max_mb` and the largest file; the stream itself also ends
/// with an error past `max_bytes` of tar (its headers count too). What went wrong in the stream
/// is also kept in [`Archive::failure`], since an upload's own error may not carry it.
pub async fn archive(repo: &Path, commit: &str, dest: &str, max_bytes: u64) -> anyhow::Result<Archive> {
    let prefix = String::from_utf8_lossy(&git(repo, &["rev-parse", "--show-prefix"]).await?).trim().to_string();
    let top = String::from_utf8_lossy(&git(repo, &["rev-parse", "--show-toplevel"]).await?).trim().to_string();
    let tree = format!("{commit}:{prefix}");
    let listing = git(Path::new(&top), &["ls-tree", "-r", "-l", "-z", &tree])
        .await
        .with_context(|| format!("cannot list {tree} in {}", repo.display()))?;
    let (total, largest) = tree_size(&listing);
    if total > max_bytes {
        let (path, largest_size) = largest.unwrap_or_default();
        bail!(
            "the source of {commit} in {} is {} of files, more than source.max_mb ({} MB); the largest is {path:?} \
             ({}): raise source.max_mb in the spec if this much source is meant",
            repo.display(),
            size(total),
            mb(max_bytes),
            size(largest_size)
        );
    }
    let dest = format!("{}/", dest.trim_matches('/'));
    let inert = inert_git_dir(Path::new(&top)).await?;
    // From the top: run in a subfolder, git archive would narrow the tree to it a second time.
    let mut child = Command::new("git")
        .arg("-C")
        .arg(&top)
        .arg(format!("--git-dir={}", inert.path().display()))
        .args(["archive", "--format=tar", &format!("--prefix={dest}"), &tree])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot run git (is it installed?)")?;
    let stdout = child.stdout.take().context("git archive has no stdout")?;
    let stderr = child.stderr.take().context("git archive has no stderr")?;
    let failure = Failure::default();
    let what = format!("{tree} from {}", repo.display());
    let reading = Reading { child, stdout, stderr, sent: 0, max_bytes, what, _inert: inert };
    let tar = futures_util::stream::unfold(Some(reading), {
        let failure = failure.clone();
        move |state| {
            let failure = failure.clone();
            async move {
                let mut reading = state?;
                match reading.next().await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(reading))),
                    Ok(None) => None,
                    Err(why) => {
                        failure.set(&why);
                        Some((Err(std::io::Error::other(why)), None))
                    }
                }
            }
        }
    });
    Ok(Archive { tar: crate::provision::TarStream(Box::pin(tar)), failure })
}

/// What `git archive` is told of every path, from the attribute file that wins over the tree's
/// own `.gitattributes` (`info/attributes`): no filter driver (`filter=lfs`, or any the host's
/// git configuration names, would run on the revision's content), no keyword, substitution,
/// encoding or line-ending conversion. The tree is sent as it was committed.
const INERT_ATTRIBUTES: &str = "* -filter -ident -text !eol -export-subst !working-tree-encoding\n";

/// A git folder of sandbench's own for `git archive` of the repository at `top`: its objects are
/// the repository's (through `objects/info/alternates`, nothing is copied), its configuration
/// empty (the repository's own filter drivers are not in it) and its `info/attributes`
/// [`INERT_ATTRIBUTES`]. The repository itself is not changed.
async fn inert_git_dir(top: &Path) -> anyhow::Result<tempfile::TempDir> {
    let common = git(top, &["rev-parse", "--path-format=absolute", "--git-common-dir"]).await?;
    let objects = Path::new(String::from_utf8_lossy(&common).trim()).join("objects");
    let format = git(top, &["rev-parse", "--show-object-format"]).await?;
    let config = match String::from_utf8_lossy(&format).trim() {
        "sha1" | "" => "[core]\n\trepositoryformatversion = 0\n\tbare = true\n".to_string(),
        other => {
            format!("[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = {other}\n")
        }
    };
    let dir = tempfile::Builder::new()
        .prefix("sandbench-archive-")
        .tempdir()
        .context("cannot make a folder for git archive")?;
    let write = |path: &str, text: &str| -> std::io::Result<()> {
        let path = dir.path().join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)
    };
    write("HEAD", "ref: refs/heads/sandbench\n")
        .and_then(|()| write("config", &config))
        .and_then(|()| std::fs::create_dir_all(dir.path().join("refs")))
        .and_then(|()| write("objects/info/alternates", &format!("{}\n", objects.display())))
        .and_then(|()| write("info/attributes", INERT_ATTRIBUTES))
        .with_context(|| format!("cannot make the archive's git folder {}", dir.path().display()))?;
    Ok(dir)
}

/// A source archive on its way: the tar, and why it ended early if it did.
pub struct Archive {
    pub tar: crate::provision::TarStream,
    pub failure: Failure,
}

/// Why an archive's stream ended early (set by the stream).
#[derive(Clone, Default)]
pub struct Failure(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl Failure {
    fn set(&self, why: &str) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why.to_string());
    }

    /// Why the stream ended early, if it did.
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// `git archive` being read.
struct Reading {
    child: tokio::process::Child,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    sent: u64,
    max_bytes: u64,
    what: String,
    /// The git folder `git archive` reads, removed once the stream is dropped.
    _inert: tempfile::TempDir,
}

/// Bytes read from `git archive` at a time.
const CHUNK_BYTES: usize = 256 << 10;
/// The most of git's error output kept.
const MAX_STDERR_BYTES: u64 = 16 << 10;

impl Reading {
    /// The next chunk of tar; None at its end (git succeeded), or why it cannot go on.
    async fn next(&mut self) -> Result<Option<bytes::Bytes>, String> {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let n =
            self.stdout.read(&mut chunk).await.map_err(|e| format!("cannot read git archive of {}: {e}", self.what))?;
        if n == 0 {
            let mut stderr = Vec::new();
            let _ = (&mut self.stderr).take(MAX_STDERR_BYTES).read_to_end(&mut stderr).await;
            let status = self.child.wait().await.map_err(|e| format!("git archive of {}: {e}", self.what))?;
            if !status.success() {
                return Err(format!(
                    "git archive of {} failed: {}",
                    self.what,
                    String::from_utf8_lossy(&stderr).trim()
                ));
            }
            return Ok(None);
        }
        self.sent += n as u64;
        if self.sent > self.max_bytes {
            let _ = self.child.start_kill();
            return Err(format!(
                "the source archive of {} passed source.max_mb ({} MB) while it was sent",
                self.what,
                mb(self.max_bytes)
            ));
        }
        chunk.truncate(n);
        Ok(Some(bytes::Bytes::from(chunk)))
    }
}

/// A size as bytes and MB.
fn size(bytes: u64) -> String {
    format!("{bytes} bytes ({:.1} MB)", bytes as f64 / 1e6)
}

/// A bound in MB, as the spec gives it.
fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The sum of the blob sizes in `git ls-tree -r -l -z` output, and its largest file.
fn tree_size(listing: &[u8]) -> (u64, Option<(String, u64)>) {
    let mut total = 0u64;
    let mut largest: Option<(String, u64)> = None;
    for entry in listing.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let text = String::from_utf8_lossy(entry);
        let Some((meta, path)) = text.split_once('\t') else { continue };
        // `<mode> <type> <object> <size>`; a submodule's size is `-`.
        let Some(size) = meta.split_whitespace().nth(3).and_then(|s| s.parse::<u64>().ok()) else { continue };
        total = total.saturating_add(size);
        if largest.as_ref().is_none_or(|(_, l)| size > *l) {
            largest = Some((crate::sanitize::prefix(path, 200).to_string(), size));
        }
    }
    (total, largest)
}

/// A commit of a range, with its subject line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    pub commit: String,
    /// Its subject line (the product's text).
    pub subject: String,
}

/// The first-parent commits from `good` to `bad` of `repo`, both included, oldest first, each
/// with its subject line: what `sandbench bisect` searches. `good` must be an ancestor of `bad`.
pub async fn first_parents(repo: &Path, good: &str, bad: &str) -> anyhow::Result<Vec<Commit>> {
    if git(repo, &["merge-base", "--is-ancestor", good, bad]).await.is_err() {
        bail!("{good} is not an ancestor of {bad} in {}: nothing to bisect between them", repo.display());
    }
    let out = git(repo, &["log", "--first-parent", "--reverse", "--format=%H %s", &format!("{good}..{bad}")]).await?;
    let subject = git(repo, &["log", "-1", "--format=%s", good]).await?;
    let mut commits =
        vec![Commit { commit: good.to_string(), subject: String::from_utf8_lossy(&subject).trim().into() }];
    for line in String::from_utf8_lossy(&out).lines() {
        let (commit, subject) = line.split_once(' ').unwrap_or((line, ""));
        commits.push(Commit { commit: commit.to_string(), subject: subject.to_string() });
    }
    if commits.len() < 2 {
        bail!("{good} and {bad} are the same commit: nothing to bisect");
    }
    Ok(commits)
}

/// A commit's committer time (RFC 3339) and subject line, for the history.
pub async fn describe(repo: &Path, commit: &str) -> anyhow::Result<(String, String)> {
    let out = git(repo, &["log", "-1", "--format=%cI%n%s", commit, "--"]).await?;
    let text = String::from_utf8_lossy(&out);
    let mut lines = text.lines();
    Ok((lines.next().unwrap_or_default().to_string(), lines.next().unwrap_or_default().to_string()))
}

/// The first-parent line of `commit` in `repo`, oldest first, at most `limit` commits (the
/// newest): the order a branch's history is drawn in.
pub async fn first_parent_line(repo: &Path, commit: &str, limit: usize) -> anyhow::Result<Vec<String>> {
    let limit = format!("--max-count={limit}");
    let out = git(repo, &["rev-list", "--first-parent", &limit, commit, "--"]).await?;
    let mut line: Vec<String> = String::from_utf8_lossy(&out).lines().map(str::to_string).collect();
    line.reverse();
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) {
        let ok = std::process::Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap().success();
        assert!(ok, "{script}");
    }

    /// The whole tar of an archive, or the stream's error (and the failure it kept).
    async fn read_all(archive: Archive) -> Result<Vec<u8>, String> {
        use futures_util::StreamExt;
        let mut tar = archive.tar.0;
        let mut bytes = Vec::new();
        while let Some(chunk) = tar.next().await {
            match chunk {
                Ok(chunk) => {
                    assert!(chunk.len() <= CHUNK_BYTES);
                    bytes.extend_from_slice(&chunk);
                }
                Err(err) => {
                    assert_eq!(archive.failure.get(), Some(err.to_string()));
                    return Err(err.to_string());
                }
            }
        }
        assert_eq!(archive.failure.get(), None);
        Ok(bytes)
    }

    #[tokio::test]
    async fn a_source_past_its_bound_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q -b main . && head -c 3000000 /dev/zero > big && mkdir many \
             && for i in $(seq 1 100); do echo > many/$i; done && git add -A \
             && git -c user.name=t -c user.email=t@t commit -qm one",
        );
        let commit = resolve(dir.path(), "HEAD").await.unwrap();
        // The files sum past the bound: refused before anything is sent, the largest named.
        let err = archive(dir.path(), &commit, "src", 2_000_000).await.err().unwrap().to_string();
        assert!(
            err.contains(
                "is 3000100 bytes (3.0 MB) of files, more than source.max_mb (2 MB); the largest is \"big\" \
                 (3000000 bytes (3.0 MB))"
            ),
            "{err}"
        );
        // Within the bound by its files, past it by its tar (a header per file): the stream ends
        // with the error, once the bound is passed.
        let many = dir.path().join("many");
        let err = read_all(archive(&many, &commit, "src", 20_000).await.unwrap()).await.unwrap_err();
        assert!(err.contains("passed source.max_mb (0.02 MB) while it was sent"), "{err}");
        let whole = read_all(archive(dir.path(), &commit, "src", 4_000_000).await.unwrap()).await.unwrap();
        assert!(whole.len() > 3_000_000 && whole.len() < 4_000_000, "{}", whole.len());
    }

    /// The files of a tar, with their text.
    fn files_of(tar: &[u8]) -> Vec<(String, String)> {
        let mut entries = tar::Archive::new(tar);
        let mut files = Vec::new();
        for entry in entries.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            files.push((path, text));
        }
        files
    }

    #[tokio::test]
    async fn the_archive_obeys_no_attribute_of_the_tree_and_runs_no_filter() {
        // The host's git knows a filter driver (as git-lfs installs one); the revision's
        // .gitattributes names it, and asks for keyword and line-ending conversions.
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("the-filter-ran");
        sh(
            dir.path(),
            &format!(
                "git init -q -b main repo && cd repo \
                 && git config filter.evil.smudge 'touch {ran}; sed s/good/evil/' \
                 && printf '* filter=evil\\nid.txt ident\\nsubst.txt export-subst\\ncrlf.txt text eol=crlf\\n' > .gitattributes \
                 && echo good > a.txt && printf '$Id$\\n' > id.txt && printf '$Format:%%H$\\n' > subst.txt \
                 && printf 'x\\ny\\n' > crlf.txt && git add -A && git -c user.name=t -c user.email=t@t commit -qm one",
                ran = ran.display()
            ),
        );
        let repo = dir.path().join("repo");
        let commit = resolve(&repo, "HEAD").await.unwrap();
        let tar = read_all(archive(&repo, &commit, "src", 1 << 20).await.unwrap()).await.unwrap();
        let files = files_of(&tar);
        assert!(!ran.exists(), "a filter driver of the host's ran on the revision's content");
        for (path, text) in [
            ("src/a.txt", "good\n"),
            ("src/id.txt", "$Id$\n"),
            ("src/subst.txt", "$Format:%H$\n"),
            ("src/crlf.txt", "x\ny\n"),
        ] {
            assert!(files.contains(&(path.to_string(), text.to_string())), "{path}: {files:?}");
        }
        // The repository is left as it was: no attribute file of sandbench's in it.
        assert!(!repo.join(".git/info/attributes").exists());
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
        let tar = read_all(archive(&app, &first, "/home/builder/source", 1 << 20).await.unwrap()).await.unwrap();
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
