//! Publishing a run to its pull request: one sticky comment per pull request and spec, created
//! or updated in place, never overwritten by a stale run, and a commit status with the summary.
//!
//! - [`marker`]: how a comment is recognised (its markers) and which run generation is newer;
//! - [`forge`]: the seam to the code host; [`github`]: GitHub's REST API behind it;
//! - [`gate`]: the trust gate (pure), and [`ci`]: `sandbench ci` for GitHub Actions.
//!
//! A run directory carries everything publishing needs: `report.json` (identity, status),
//! `report.md` (the comment) and, when `sandbench ci` made it, `forge.json` (repository, pull
//! request, attempt, link). A directory merged from shards publishes the same way as long as it
//! carries those three files.

pub mod ci;
pub mod forge;
pub mod gate;
pub mod github;
pub mod marker;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use forge::{Comment, CommitStatus, Forge, ForgeError, PullState, State};
use marker::Marker;

use crate::display::Display;
use crate::report::{Report, Status};

/// The file in a run directory that names where it is published.
pub const TARGET_FILE: &str = "forge.json";
/// What the renderer writes where a CI run puts its link.
const LOCAL_LINK: &str = crate::report::markdown::LOCAL_LINK;
/// GitHub's limit on a status description.
const DESCRIPTION_CHARS: usize = 140;
/// Extra tries of a comment creation whose outcome was unknown.
const CREATE_TRIES: usize = 3;

/// Where a run is published (`forge.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The forge kind: `github`.
    pub forge: String,
    /// `owner/name`.
    pub repository: String,
    pub pull_request: u64,
    /// The CI attempt (GitHub's `run_attempt`).
    #[serde(default = "one")]
    pub attempt: u32,
    /// The CI run's page, linked from the comment and the status.
    #[serde(default)]
    pub run_url: Option<String>,
    /// The commits the trusted event named; the report must match them.
    #[serde(default)]
    pub head: Option<String>,
    #[serde(default)]
    pub base: Option<String>,
}

fn one() -> u32 {
    1
}

impl Target {
    pub fn load(dir: &Path) -> anyhow::Result<Option<Target>> {
        let path = dir.join(TARGET_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                serde_json::from_str(&text).map(Some).with_context(|| format!("{} is not valid", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join(TARGET_FILE);
        std::fs::write(&path, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Options shared by `publish` and `ci`.
#[derive(Debug, Clone, clap::Args)]
pub struct ForgeArgs {
    /// Print the requests instead of sending them (reads are sent only when GITHUB_TOKEN is set).
    #[arg(long)]
    pub dry_run: bool,
    /// The REST API base (GitHub Enterprise: https://HOST/api/v3). The token is GITHUB_TOKEN.
    #[arg(long, env = "GITHUB_API_URL", default_value = github::DEFAULT_API)]
    pub api_url: String,
    /// The login whose comments are ours; a comment by anyone else is never read or changed.
    #[arg(long, env = "SANDBENCH_BOT_LOGIN", default_value = "github-actions[bot]")]
    pub bot_login: String,
    /// Do not set a commit status.
    #[arg(long)]
    pub no_status: bool,
}

impl ForgeArgs {
    pub fn github(&self, repo: &str) -> anyhow::Result<github::GitHub> {
        github::GitHub::new(&self.api_url, repo, std::env::var("GITHUB_TOKEN").ok(), self.dry_run)
    }
}

#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// The run directory (runs/<run-id>, or one merged from shards).
    pub dir: PathBuf,
    /// The repository, owner/name (default: forge.json in the run directory, else GITHUB_REPOSITORY).
    #[arg(long)]
    pub repo: Option<String>,
    /// The pull request number (default: forge.json).
    #[arg(long)]
    pub pr: Option<u64>,
    /// The CI attempt written into the comment's marker (default: forge.json, else GITHUB_RUN_ATTEMPT, else 1).
    #[arg(long)]
    pub attempt: Option<u32>,
    /// The link to the CI run shown in the comment and the status (default: forge.json).
    #[arg(long)]
    pub run_url: Option<String>,
    /// The head commit the workflow's event names: the report's head must be it (default:
    /// forge.json, outside GitHub Actions).
    #[arg(long)]
    pub head: Option<String>,
    /// The base commit the workflow's trusted gate computed: the report's base must be it.
    #[arg(long)]
    pub base: Option<String>,
    #[command(flatten)]
    pub forge: ForgeArgs,
}

/// A comment and status ready to publish.
#[derive(Debug, Clone)]
pub struct Publication {
    pub body: String,
    pub marker: Marker,
    pub status: CommitStatus,
}

impl Publication {
    /// From a run directory: `report.json` for identity and status, `report.md` for the body
    /// (rendered from the report when absent), stamped with the target's attempt and link.
    pub fn from_run_dir(dir: &Path, target: &Target) -> anyhow::Result<Publication> {
        let path = dir.join("report.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let report: Report =
            serde_json::from_str(&text).with_context(|| format!("{} is not a sandbench report", path.display()))?;
        for (what, named, got) in
            [("head", &target.head, &report.head.commit), ("base", &target.base, &report.base.commit)]
        {
            if let Some(named) = named
                && named != got
            {
                anyhow::bail!(
                    "{}: the report's {what} is {got} but {TARGET_FILE} names {named}: refusing to publish another run",
                    path.display()
                );
            }
        }
        let md = dir.join("report.md");
        let body = match std::fs::read_to_string(&md) {
            Ok(body) => body,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::report::markdown::render(&report),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", md.display())),
        };
        Publication::new(body, &report, target)
    }

    fn new(body: String, report: &Report, target: &Target) -> anyhow::Result<Publication> {
        let mut body = marker::with_attempt(&body, target.attempt);
        if let Some(url) = &target.run_url {
            body = link_run(&body, url);
        }
        // The renderer left room for the stamp; a report.md from elsewhere may not have.
        let body = crate::report::comment::guard(&body).into_owned();
        let marker = marker::parse(&body).filter(|m| m.head == report.head.commit).with_context(|| {
            format!("the report's comment has no sandbench marker naming head {}", report.head.commit)
        })?;
        let state = match report.status {
            Status::Completed => State::Success,
            Status::Partial => State::Failure,
            Status::Failed | Status::Canceled | Status::Abandoned => State::Error,
            Status::Running => State::Pending,
        };
        let summary = overall_line(&body).map_or_else(String::new, |o| format!(": {o}"));
        let status = CommitStatus {
            state,
            context: format!("sandbench/{}", report.spec_name),
            description: truncate(&format!("{}{summary}", report.status.as_str()), DESCRIPTION_CHARS),
            target_url: target.run_url.clone(),
        };
        Ok(Publication { body, marker, status })
    }

    /// A notice instead of a report: `running`, `pending-trust` (with why the run was refused) or
    /// `failed` (the run could not start).
    pub fn notice(spec: &str, status: &str, target: &Target, head: &str, base: &str, message: &str) -> Publication {
        let time = crate::report::timestamp(std::time::SystemTime::now());
        let run_id =
            format!("{}{}", marker::NOTICE_RUN_PREFIX, time.chars().filter(char::is_ascii_digit).collect::<String>());
        let mut body = marker::notice(spec, status, &run_id, target.attempt, &time, head, base);
        body.push_str(&crate::report::format::escape(message));
        body.push_str("\n\n");
        body.push_str(&target.run_url.as_deref().map_or(LOCAL_LINK.to_string(), run_link));
        body.push('\n');
        let body = crate::report::comment::guard(&body).into_owned();
        let marker = marker::parse(&body).expect("a notice carries its markers");
        let state = match status {
            "running" | "pending-trust" => State::Pending,
            "failed" => State::Error,
            _ => State::Failure,
        };
        let status = CommitStatus {
            state,
            context: format!("sandbench/{spec}"),
            description: truncate(&format!("{status}: {message}"), DESCRIPTION_CHARS),
            target_url: target.run_url.clone(),
        };
        Publication { body, marker, status }
    }
}

fn run_link(url: &str) -> String {
    format!("[Run, logs, and downloadable raw results]({url})")
}

/// The body with the local-run sentence replaced by a link to the CI run (appended when the
/// renderer wrote no such sentence).
fn link_run(body: &str, url: &str) -> String {
    if body.contains(LOCAL_LINK) {
        body.replacen(LOCAL_LINK, &run_link(url), 1)
    } else {
        format!("{}\n\n{}\n", body.trim_end(), run_link(url))
    }
}

/// The verdict line of a rendered report, without its emphasis.
fn overall_line(body: &str) -> Option<String> {
    body.lines()
        .find_map(|l| l.strip_prefix("**Overall: "))
        .map(|l| l.trim_end_matches('*').trim_end_matches('.').to_string())
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// What happens to the sticky comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Create,
    Update(u64),
    /// The comment already says exactly this.
    Unchanged(u64),
    /// Not published, and why.
    Refuse(String),
}

/// The last comment by `bot` that is a sandbench comment for `spec`, with its markers.
pub fn sticky<'a>(comments: &'a [Comment], bot: &str, spec: Option<&str>) -> Option<(&'a Comment, Marker)> {
    comments
        .iter()
        .filter(|c| c.author.eq_ignore_ascii_case(bot))
        .filter_map(|c| marker::parse(&c.body).map(|m| (c, m)))
        .rfind(|(_, m)| m.spec.as_deref() == spec)
}

/// Whether and how to publish, and whether to set the commit status — pure.
///
/// A run is stale when the pull request is closed or its head moved on (the status is still set:
/// it describes the run's own commit); a comment from a newer generation of the same head is
/// never overwritten (nor its status); a `pending-trust` or `failed` notice never hides results
/// already published for the same head.
pub fn decide(
    ours: &Marker,
    body: &str,
    pull: Option<&PullState>,
    existing: Option<(&Comment, &Marker)>,
) -> (Action, bool) {
    if let Some(pull) = pull {
        if !pull.open {
            return (Action::Refuse("the pull request is closed".into()), true);
        }
        if pull.head != ours.head {
            return (
                Action::Refuse(format!(
                    "stale: the pull request's head is now {}, this run measured {}",
                    pull.head, ours.head
                )),
                true,
            );
        }
    }
    let Some((comment, theirs)) = existing else { return (Action::Create, true) };
    if theirs.head == ours.head {
        if marker::order(theirs, ours) == std::cmp::Ordering::Greater {
            return (
                Action::Refuse(format!(
                    "a newer run of this head is published (run {} attempt {}; this is run {} attempt {})",
                    theirs.run_id, theirs.attempt, ours.run_id, ours.attempt
                )),
                false,
            );
        }
        if ours.status.as_deref() == Some("pending-trust") && theirs.status.as_deref() != Some("pending-trust") {
            return (Action::Refuse("results for this head are already published".into()), false);
        }
        // A run's failure notice (it ended without publishing) never hides its head's results.
        if ours.is_notice() && ours.status.as_deref() == Some("failed") && !theirs.is_notice() {
            return (Action::Refuse("results for this head are already published".into()), false);
        }
    }
    if comment.body == body { (Action::Unchanged(comment.id), true) } else { (Action::Update(comment.id), true) }
}

/// What publishing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub action: Action,
    pub status_set: bool,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.action {
            Action::Create => write!(f, "comment created")?,
            Action::Update(id) => write!(f, "comment {id} updated")?,
            Action::Unchanged(id) => write!(f, "comment {id} already up to date")?,
            Action::Refuse(why) => write!(f, "comment not published: {why}")?,
        }
        if self.status_set { write!(f, "; commit status set") } else { Ok(()) }
    }
}

/// Publishes to pull request `pr`: looks up the sticky comment, decides, writes.
///
/// The commit status is set even when writing the comment fails (GitHub refused it, or the
/// answer never came): a pull request must not keep its "running" status for a run that ended.
/// The error then says why the comment was not posted and that the status was set. When the
/// comments cannot be read, nothing is written: whether a newer run of this head is already
/// published is not known, and its status must not be overwritten.
pub async fn publish<F: Forge>(
    forge: &F,
    pr: u64,
    publication: &Publication,
    bot: &str,
    set_status: bool,
) -> anyhow::Result<Outcome> {
    let ours = &publication.marker;
    let pull = forge.pull_request(pr).await?;
    let stale = pull.as_ref().is_some_and(|p| !p.open || p.head != ours.head);
    let comments = if stale { Some(Vec::new()) } else { forge.comments(pr).await? };
    let comments = comments.unwrap_or_default();
    let existing = sticky(&comments, bot, ours.spec.as_deref());
    let (action, status) = decide(ours, &publication.body, pull.as_ref(), existing.as_ref().map(|(c, m)| (*c, m)));
    let written = match &action {
        Action::Create => create(forge, pr, publication, bot).await,
        Action::Update(id) => forge.update_comment(*id, &publication.body).await.map_err(anyhow::Error::from),
        Action::Unchanged(_) | Action::Refuse(_) => Ok(()),
    };
    let status_set = status && set_status;
    let set = if status_set { forge.set_status(&ours.head, &publication.status).await } else { Ok(()) };
    match (written, set) {
        (Ok(()), Ok(())) => Ok(Outcome { action, status_set }),
        (Ok(()), Err(e)) => Err(anyhow::Error::from(e).context("the commit status was not set")),
        (Err(e), Ok(())) => {
            let status = if status_set {
                format!(
                    "the commit status was set ({}: {})",
                    publication.status.state.as_str(),
                    publication.status.description
                )
            } else {
                "no commit status was set".to_string()
            };
            Err(e.context(format!("the comment was not posted; {status}")))
        }
        (Err(e), Err(s)) => {
            Err(e.context(format!("the comment was not posted, and the commit status was not set either: {s}")))
        }
    }
}

/// Creates the comment; when the answer was lost (a 5xx), looks whether it exists before trying
/// again, so a retry never posts it twice.
async fn create<F: Forge>(forge: &F, pr: u64, publication: &Publication, bot: &str) -> anyhow::Result<()> {
    let mut last = match forge.create_comment(pr, &publication.body).await {
        Ok(()) => return Ok(()),
        Err(ForgeError::Unknown(e)) => e,
        Err(e) => return Err(e.into()),
    };
    for _ in 0..CREATE_TRIES {
        tracing::warn!(error = %last, "creating the comment may have failed; looking before trying again");
        let comments = forge.comments(pr).await?.unwrap_or_default();
        if sticky(&comments, bot, publication.marker.spec.as_deref()).is_some_and(|(c, _)| c.body == publication.body) {
            return Ok(());
        }
        last = match forge.create_comment(pr, &publication.body).await {
            Ok(()) => return Ok(()),
            Err(ForgeError::Unknown(e)) => e,
            Err(e) => return Err(e.into()),
        };
    }
    anyhow::bail!("{last} (gave up creating the comment)")
}

/// Where to publish. In GitHub Actions (`GITHUB_ACTIONS=true`) from the workflow alone: the
/// repository, attempt and run link from its environment, the pull request and head (and base)
/// from the command line; `forge.json` is shard data, written where the pull request's code ran,
/// and is not read. Elsewhere from `forge.json`, overridden by the command line.
fn resolve_target(args: &PublishArgs) -> anyhow::Result<Target> {
    if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") {
        return workflow_target(args);
    }
    let saved = Target::load(&args.dir)?;
    let named = |flag: &str, saved: Option<String>, given: Option<String>| -> anyhow::Result<Option<String>> {
        match (saved, given) {
            (Some(s), Some(g)) if s != g => {
                anyhow::bail!("{flag} {g} differs from {s} in {}", args.dir.join(TARGET_FILE).display())
            }
            (s, g) => Ok(g.or(s)),
        }
    };
    let repo = named("--repo", saved.as_ref().map(|t| t.repository.clone()), args.repo.clone())?
        .or_else(|| std::env::var("GITHUB_REPOSITORY").ok().filter(|r| !r.is_empty()))
        .context("no repository: pass --repo owner/name (or run sandbench ci, which writes forge.json)")?;
    let pr = named("--pr", saved.as_ref().map(|t| t.pull_request.to_string()), args.pr.map(|p| p.to_string()))?
        .context("no pull request: pass --pr N (or run sandbench ci, which writes forge.json)")?
        .parse()?;
    let attempt = args
        .attempt
        .or(saved.as_ref().map(|t| t.attempt))
        .or_else(|| std::env::var("GITHUB_RUN_ATTEMPT").ok().and_then(|a| a.parse().ok()))
        .unwrap_or(1);
    let run_url = args.run_url.clone().or(saved.as_ref().and_then(|t| t.run_url.clone()));
    if let Some(url) = &run_url {
        check_url(url)?;
    }
    let head = named("--head", saved.as_ref().and_then(|t| t.head.clone()), args.head.clone())?;
    let base = named("--base", saved.as_ref().and_then(|t| t.base.clone()), args.base.clone())?;
    Ok(Target { forge: "github".into(), repository: repo, pull_request: pr, attempt, run_url, head, base })
}

/// [`resolve_target`] in GitHub Actions: nothing from the run directory.
fn workflow_target(args: &PublishArgs) -> anyhow::Result<Target> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let repository = var("GITHUB_REPOSITORY").context("GITHUB_REPOSITORY is not set")?;
    if let Some(repo) = args.repo.as_ref().filter(|r| **r != repository) {
        anyhow::bail!("--repo {repo} is not this workflow's repository, {repository}");
    }
    let pr = args.pr.context(
        "in GitHub Actions, publish takes the pull request from the workflow, not from the run directory: pass --pr N",
    )?;
    let head = args.head.clone().context(
        "in GitHub Actions, publish takes the head from the workflow, not from the run directory: pass --head SHA \
         (the event's pull_request.head.sha)",
    )?;
    let attempt = args.attempt.or_else(|| var("GITHUB_RUN_ATTEMPT").and_then(|a| a.parse().ok())).unwrap_or(1);
    let run_url = match &args.run_url {
        Some(url) => {
            check_url(url)?;
            Some(url.clone())
        }
        None => ci::run_url()?,
    };
    Ok(Target {
        forge: "github".into(),
        repository,
        pull_request: pr,
        attempt,
        run_url,
        head: Some(head),
        base: args.base.clone(),
    })
}

/// A link that cannot break out of Markdown: http(s), no spaces, quotes, brackets or parentheses,
/// and no longer than the room the comment keeps for it.
pub fn check_url(url: &str) -> anyhow::Result<()> {
    let safe = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= crate::report::comment::MAX_URL_BYTES
        && url.chars().all(|c| c.is_ascii_graphic() && !"()[]<>\"'`\\".contains(c));
    if safe { Ok(()) } else { anyhow::bail!("not a plain http(s) link: {url:?}") }
}

/// `sandbench publish`.
pub async fn command(args: PublishArgs) -> anyhow::Result<ExitCode> {
    let target = resolve_target(&args)?;
    let publication = Publication::from_run_dir(&args.dir, &target)?;
    let github = args.forge.github(&target.repository)?;
    let result =
        publish(&github, target.pull_request, &publication, &args.forge.bot_login, !args.forge.no_status).await;
    let display = Display::new();
    print_dry_run(&display, &args.forge, &github);
    let outcome = result?;
    display.result(&format!("pull request #{} of {}: {outcome}", target.pull_request, target.repository));
    Ok(ExitCode::SUCCESS)
}

/// In a dry run, what would have been sent.
pub fn print_dry_run(display: &Display, args: &ForgeArgs, github: &github::GitHub) {
    if !args.dry_run {
        return;
    }
    if github.reads() {
        display.result("dry run: the reads below were sent, the writes were not");
    } else {
        display.result(
            "dry run: nothing was sent (no GITHUB_TOKEN: reads were answered as an open pull request at this \
             head with no comments)",
        );
    }
    for request in github.take_planned() {
        display.result(&request.to_string());
    }
}

#[cfg(test)]
mod tests;
