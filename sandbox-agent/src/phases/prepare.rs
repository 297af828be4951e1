//! prepare (untimed), as user `builder`: the source at the exact commit, the build commands with
//! their output streamed, the optional steps this revision has what they need for
//! ([`super::optional`]), the release artifacts of all of them (sizes → metric `bundle`, a
//! `SHA256SUMS` file in the reference's format), the runtime facts, and the loopback origin that
//! serves the release to the installer.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sandbench_proto::plan::{AgentPlan, BUILDER_UID, BUILDER_USER, SOURCE_DIR, Source, Step, fact};
use sha2::{Digest, Sha256};

use super::common::{self, AgentState};
use super::optional;
use crate::context::PhaseContext;
use crate::safefs;
use crate::users::{User, chown_tree};

pub fn run(ctx: &PhaseContext, plan: &AgentPlan) -> anyhow::Result<()> {
    let builder = common::accounts().ensure(BUILDER_USER, BUILDER_UID)?;
    let source = PathBuf::from(SOURCE_DIR);
    std::fs::create_dir_all(&source)?;
    chown_tree(&source, builder.uid, builder.gid)?;
    fetch_source(ctx, &plan.source, &builder, &source)?;
    // The builder reaches the registries through the bridge, when the sandbox has one.
    let env = plan.registries.as_ref().map(|r| r.env.clone()).unwrap_or_default();
    for step in &plan.prepare.commands {
        ctx.note(&format!("$ {}", step.run));
        common::run_step(ctx, step, &builder, &source, &env)?.success(&format!("`{}`", step.run))?;
    }
    let ran = optional::decide(ctx, plan, &builder, &source)?;
    optional::run(ctx, &ran, &builder, &source, &env)?;
    let mut facts = tool_versions(&builder, &source);
    facts.extend(optional::facts(&plan.prepare, &ran, |run| version(&builder, &source, run)));
    ctx.file(fact::PREPARE_FILE, &serde_json::to_vec_pretty(&facts).unwrap_or_default());
    let patterns: Vec<&String> =
        plan.prepare.artifacts.iter().chain(ran.iter().flat_map(|step| step.artifacts.iter())).collect();
    if patterns.is_empty() {
        return Ok(());
    }
    let release_dir = release_artifacts(ctx, plan, &patterns, &builder, &source)?;
    let mut state = AgentState::load(&ctx.state_dir)?;
    if let Some(port) = plan.prepare.origin_port {
        let path = &plan.prepare.origin_path;
        common::serve_origin(release_dir.clone(), path, port)?;
        let shown = if path.is_empty() { String::new() } else { format!("{path}/") };
        ctx.note(&format!("serving {} on http://127.0.0.1:{port}/{shown}", release_dir.display()));
    }
    state.release_dir = Some(release_dir);
    state.origin_port = plan.prepare.origin_port;
    state.origin_path = plan.prepare.origin_path.clone();
    state.compiled_artifacts = ran.iter().any(|step| step.compiled);
    state.save(&ctx.state_dir)
}

/// The source at its commit in `source`, as `builder`: an uploaded archive must be there, a git
/// commit is fetched and checked out (and must be what `HEAD` resolves to).
fn fetch_source(ctx: &PhaseContext, from: &Source, builder: &User, source: &Path) -> anyhow::Result<()> {
    let no_env = Default::default();
    match from {
        Source::Archive { commit } => {
            let empty = std::fs::read_dir(source)?.next().is_none();
            if empty {
                bail!("the source of {commit} was not uploaded into {SOURCE_DIR}");
            }
            ctx.note(&format!("source: archive of {commit}"));
        }
        Source::Git { url, commit } => {
            let fetch = Step {
                run: format!(
                    "git init --quiet && git fetch --quiet --depth=1 '{url}' '{commit}' && git checkout --quiet --detach FETCH_HEAD"
                ),
                cwd: None,
                timeout_s: 600.0,
                env: Default::default(),
            };
            common::run_step(ctx, &fetch, builder, source, &no_env)?.success("fetching the source")?;
            let head = Step { run: "git rev-parse HEAD".into(), cwd: None, timeout_s: 30.0, env: Default::default() };
            let head = common::run_step(ctx, &head, builder, source, &no_env)?.success("git rev-parse")?;
            if head.output_text().trim() != commit {
                bail!("Checkout did not resolve to the requested commit ({commit}, got {})", head.output_text().trim());
            }
        }
        Source::None => {}
    }
    Ok(())
}

/// The release artifacts the patterns match under `source` (the prepare's and those of the
/// optional steps that ran): their total size (metric `bundle`) and their `SHA256SUMS`, written
/// into the release folder, which is returned.
fn release_artifacts(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    patterns: &[&String],
    builder: &User,
    source: &Path,
) -> anyhow::Result<PathBuf> {
    let mut artifacts = Vec::new();
    for pattern in patterns {
        let found = glob_paths(source, pattern)?;
        if found.is_empty() {
            bail!("no release artifact matches {pattern:?} in {SOURCE_DIR}");
        }
        artifacts.extend(found);
    }
    artifacts.sort();
    artifacts.dedup();
    let release_dir = match &plan.prepare.release_dir {
        Some(dir) => source.join(dir),
        None => artifacts[0].parent().context("artifact without a folder")?.to_path_buf(),
    };
    // The builder made everything below the source folder: root reads and writes there through
    // no link it may have planted.
    let base = safefs::open_dir(source).with_context(|| format!("cannot open {SOURCE_DIR}"))?;
    let mut sums = String::new();
    let mut total = 0u64;
    for path in &artifacts {
        let relative = path.strip_prefix(source).context("an artifact outside the source folder")?;
        let (digest, size) = safefs::sha256_beneath(&base, relative)
            .with_context(|| format!("cannot read the artifact {}", path.display()))?;
        total += size;
        let name = path.file_name().context("artifact without a name")?.to_string_lossy();
        sums.push_str(&sums_line(&digest, &name));
        ctx.note(&format!("artifact {} ({size} bytes)", path.display()));
    }
    let sums_path = release_dir.strip_prefix(source).context("a release folder outside the source folder")?;
    let owner = Some((builder.uid, builder.gid));
    safefs::write_beneath(&base, &sums_path.join("SHA256SUMS"), sums.as_bytes(), owner)
        .context("cannot write SHA256SUMS")?;
    ctx.note(&format!("SHA256SUMS ({} bytes in all):\n{}", total, sums.trim_end()));
    ctx.value(sandbench_proto::metric::BUNDLE, 0, total as f64, "bytes");
    Ok(release_dir)
}

/// Versions of the tools a build usually depends on, for the report's runtime facts.
fn tool_versions(builder: &User, dir: &Path) -> std::collections::BTreeMap<String, String> {
    let mut facts = std::collections::BTreeMap::new();
    for (name, run) in [
        ("node", "node --version"),
        ("npm", "npm --version"),
        ("git", "git --version"),
        ("python", "python3 --version"),
    ] {
        if let Some(found) = version(builder, dir, run) {
            facts.insert(name.to_string(), found);
        }
    }
    facts
}

/// Longest runtime fact kept, in characters.
const MAX_FACT_CHARS: usize = 200;

/// What `run` prints (trimmed, its first line, bounded), run as the builder in `dir`; none when
/// it fails.
fn version(builder: &User, dir: &Path, run: &str) -> Option<String> {
    let shell = crate::probes::command::ShellCommand {
        run: run.to_string(),
        env: crate::users::environment(builder, &Default::default()),
        cwd: dir.to_path_buf(),
        user: Some((builder.uid, builder.gid)),
        timeout: std::time::Duration::from_secs(20),
    };
    let done = crate::probes::command::run(&shell, &mut |_, _| {}).ok().filter(|done| done.status.success())?;
    let text = done.output_text();
    Some(text.trim().lines().next().unwrap_or_default().chars().take(MAX_FACT_CHARS).collect())
}

/// One line of `SHA256SUMS`: lowercase hex digest, two spaces, the file name, a newline.
pub fn sha256sums_line(bytes: &[u8], name: &str) -> String {
    sums_line(&Sha256::digest(bytes).into(), name)
}

/// A `SHA256SUMS` line of a file whose SHA-256 is `digest`.
fn sums_line(digest: &[u8; 32], name: &str) -> String {
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}  {name}\n")
}

/// Files under `root` matching a relative `glob` pattern (`*`, `?`, `[…]` within a name, `**`
/// across folders), sorted.
pub fn glob_paths(root: &Path, pattern: &str) -> anyhow::Result<Vec<PathBuf>> {
    let relative = pattern.trim_start_matches('/');
    if relative.split('/').any(|segment| segment == "..") {
        bail!("artifact pattern {pattern:?} leaves the source folder");
    }
    let full = format!("{}/{relative}", glob::Pattern::escape(&root.to_string_lossy()));
    // A `*` stays within one name, and matches names starting with a dot, as before.
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let matches = glob::glob_with(&full, options).with_context(|| format!("invalid artifact pattern {pattern:?}"))?;
    // Folders that cannot be read hold no artifact.
    // Links are no artifacts (reading one fails later, with an error saying so).
    let mut found: Vec<PathBuf> =
        matches.flatten().filter(|p| p.symlink_metadata().is_ok_and(|m| !m.is_dir())).collect();
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256sums_lines_have_the_reference_format() {
        assert_eq!(
            sha256sums_line(b"abc", "demo-1.0.0.tgz"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  demo-1.0.0.tgz\n"
        );
    }

    #[test]
    fn globs_artifacts_inside_the_source_folder() {
        let dir = tempfile::tempdir().unwrap();
        let rel = dir.path().join("pkg/release");
        std::fs::create_dir_all(&rel).unwrap();
        for f in ["b.tgz", "a.tgz", "notes.txt"] {
            std::fs::write(rel.join(f), f).unwrap();
        }
        let found = glob_paths(dir.path(), "pkg/*/*.tgz").unwrap();
        assert_eq!(found, vec![rel.join("a.tgz"), rel.join("b.tgz")]);
        assert_eq!(glob_paths(dir.path(), "/pkg/release/a.tgz").unwrap(), vec![rel.join("a.tgz")]);
        assert_eq!(glob_paths(dir.path(), "**/[ab].tgz").unwrap(), vec![rel.join("a.tgz"), rel.join("b.tgz")]);
        assert!(glob_paths(dir.path(), "pkg/*.tgz").unwrap().is_empty(), "a * stays within one name");
        assert!(glob_paths(dir.path(), "pkg/*").unwrap().is_empty(), "folders are no artifacts");
        std::os::unix::fs::symlink(dir.path(), rel.join("up")).unwrap();
        // A link is found (and reading it fails, saying so), never skipped in silence.
        assert_eq!(glob_paths(dir.path(), "pkg/release/up").unwrap(), vec![rel.join("up")]);
        assert!(glob_paths(dir.path(), "pkg/../x").is_err());
        assert!(glob_paths(dir.path(), "nothing/*.tgz").unwrap().is_empty());
        let err = glob_paths(dir.path(), "pkg/[").unwrap_err().to_string();
        assert_eq!(err, "invalid artifact pattern \"pkg/[\"");
    }
}
