//! `sandbench ci` for GitHub Actions: read the pull request event, resolve head and base (the
//! merge base of the head with the target branch), apply the trust gate, run, publish.
//!
//! It can do all of it in one job, or be split so that no job holding a write token runs the
//! pull request's code: `--gate-only` (decide, post the running or pending-trust notice, write
//! the step outputs), `--no-publish` (run; the run directory, carrying `forge.json`, is uploaded
//! and later published by `sandbench publish` in a job that checks out nothing untrusted).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;

use super::gate::{self, Decision, Event, Facts, Policy};
use super::{ForgeArgs, Publication, Target};
use crate::display::Display;

const EVENTS: [&str; 2] = ["pull_request", "pull_request_target"];

#[derive(Debug, clap::Args)]
// A shard's run is published once merged: --shard needs --no-publish here.
#[command(mut_arg("shard", |shard| shard.requires("no_publish").help(
    "Run only shard I of N of the pairs (e.g. 1/2), with --no-publish: `sandbench merge` combines the shards, \
     and `sandbench publish` posts the merged run",
)))]
pub struct CiArgs {
    /// The bench spec (TOML), from the trusted checkout.
    pub spec: PathBuf,
    /// The event payload (GitHub sets GITHUB_EVENT_PATH).
    #[arg(long, env = "GITHUB_EVENT_PATH")]
    pub event: PathBuf,
    /// The event's name (GitHub sets GITHUB_EVENT_NAME): pull_request or pull_request_target.
    #[arg(long, env = "GITHUB_EVENT_NAME")]
    pub event_name: String,
    /// The git checkout holding both revisions (where the merge base is computed).
    #[arg(long, default_value = ".")]
    pub checkout: PathBuf,
    /// Author associations whose code runs as it is (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "OWNER,MEMBER,COLLABORATOR")]
    pub trust_associations: Vec<String>,
    /// The label a maintainer applies to allow one head of a fork ("" for none).
    #[arg(long, default_value = "sandbench:trusted")]
    pub trust_label: String,
    /// A label counts only when applied at least this many seconds after the last push to the
    /// fork (so that a push just before the click is not approved).
    #[arg(long, value_name = "SECONDS", default_value_t = gate::LABEL_AFTER_PUSH.as_secs())]
    pub trust_label_after_push: u64,
    /// Only decide: apply the gate, post the running or pending-trust notice, write the step outputs.
    #[arg(long, conflicts_with = "no_publish")]
    pub gate_only: bool,
    /// Run but publish nothing; `sandbench publish RUN_DIR` publishes the run directory later.
    #[arg(long)]
    pub no_publish: bool,
    /// Run nothing: post that this head's run did not finish (MESSAGE says how), as a failed
    /// commit status and the sticky comment, unless its results are already published. For the
    /// job that runs when a shard, the merge or publishing failed or timed out.
    #[arg(long, value_name = "MESSAGE", conflicts_with_all = ["gate_only", "no_publish", "shard"])]
    pub failed: Option<String>,
    /// Run a fork's head even where the engine cannot bound a sandbox's disk (disk_gb): its build
    /// may then fill this machine's disk. Without it such a run is refused before any sandbox.
    #[arg(long)]
    pub allow_unbounded_disk: bool,
    #[command(flatten)]
    pub flags: crate::options::RunFlags,
    #[command(flatten)]
    pub forge: ForgeArgs,
}

/// What the event says, resolved.
#[derive(Debug, Clone)]
pub struct Request {
    pub event: Event,
    pub decision: Decision,
    pub target: Target,
    pub head: String,
    /// The merge base with the target branch (trusted heads only; else the branch's tip).
    pub base: String,
}

/// The pull request event of this job, checked: its name, its repository, its commits.
fn read_event(args: &CiArgs) -> anyhow::Result<Event> {
    if !EVENTS.contains(&args.event_name.as_str()) {
        bail!("sandbench ci runs on pull_request or pull_request_target events, not {:?}", args.event_name);
    }
    let text = std::fs::read_to_string(&args.event)
        .with_context(|| format!("cannot read the event {} (GITHUB_EVENT_PATH)", args.event.display()))?;
    let event: Event =
        serde_json::from_str(&text).with_context(|| format!("{} is not a pull request event", args.event.display()))?;
    if let Ok(repo) = std::env::var("GITHUB_REPOSITORY")
        && !repo.is_empty()
        && repo != event.repository.full_name
    {
        bail!("the event is for {} but GITHUB_REPOSITORY is {repo}", event.repository.full_name);
    }
    let pr = &event.pull_request;
    for (what, sha) in [("head", &pr.head.sha), ("base", &pr.base.sha)] {
        if sha.len() < 40 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
            bail!("the event's pull_request.{what}.sha is not a commit id: {sha:?}");
        }
    }
    Ok(event)
}

/// Where this job's pull request is published: the event's repository and pull request, the
/// run's attempt and link from the workflow's environment.
fn target_of(event: &Event, base: &str) -> anyhow::Result<Target> {
    Ok(Target {
        forge: "github".into(),
        repository: event.repository.full_name.clone(),
        pull_request: event.pull_request.number,
        attempt: env_number("GITHUB_RUN_ATTEMPT").unwrap_or(1),
        run_url: run_url()?,
        head: Some(event.pull_request.head.sha.clone()),
        base: Some(base.to_string()),
    })
}

/// Reads and checks the event, applies the gate and, for a trusted head, finds the merge base.
pub async fn request(args: &CiArgs) -> anyhow::Result<Request> {
    let event = read_event(args)?;
    let policy = Policy {
        associations: args.trust_associations.iter().map(|a| a.trim().to_ascii_uppercase()).collect(),
        label: Some(args.trust_label.clone()).filter(|l| !l.is_empty()),
        label_after_push: Duration::from_secs(args.trust_label_after_push),
    };
    let facts = match &policy.label {
        Some(label) if gate::label_applied_now(&event, &policy) => label_facts(&args.forge, &event, label).await,
        _ => Facts::NotRead,
    };
    let decision = gate::gate(&event, &policy, &facts);
    let pr = &event.pull_request;
    let base = if decision.trusted() {
        merge_base(&args.checkout, &pr.base.sha, &pr.head.sha, pr.number).await?
    } else {
        pr.base.sha.clone()
    };
    let target = target_of(&event, &base)?;
    Ok(Request { head: pr.head.sha.clone(), base, decision, target, event })
}

/// What the API says about a label just applied: the pull request's head now, and when the label
/// was last applied. Needs a token that can read the pull request (`pull-requests: read`).
async fn label_facts(forge: &ForgeArgs, event: &Event, label: &str) -> Facts {
    use super::forge::Forge;
    if std::env::var("GITHUB_TOKEN").map_or(true, |t| t.trim().is_empty()) {
        return Facts::Unreadable(
            "GITHUB_TOKEN is not set, and checking a label's head needs a token that can read the pull request \
             (pull-requests: read)"
                .into(),
        );
    }
    let github = match forge.github(&event.repository.full_name) {
        Ok(github) => github,
        Err(err) => return Facts::Unreadable(format!("{err:#}")),
    };
    let number = event.pull_request.number;
    match (github.pull_request(number).await, github.labeled_at(number, label).await) {
        (Ok(Some(pull)), Ok(Some(labeled_at))) => Facts::Read { current_head: pull.head, labeled_at },
        (Err(err), _) | (_, Err(err)) => Facts::Unreadable(err.to_string()),
        (Ok(None), _) | (_, Ok(None)) => Facts::Unreadable("the reads were not sent".into()),
    }
}

fn env_number(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The Actions run's page, from GITHUB_SERVER_URL, GITHUB_REPOSITORY and GITHUB_RUN_ID.
pub(super) fn run_url() -> anyhow::Result<Option<String>> {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    let (Some(server), Some(repo), Some(id)) =
        (var("GITHUB_SERVER_URL"), var("GITHUB_REPOSITORY"), var("GITHUB_RUN_ID"))
    else {
        return Ok(None);
    };
    let url = format!("{}/{repo}/actions/runs/{id}", server.trim_end_matches('/'));
    super::check_url(&url)?;
    Ok(Some(url))
}

/// The merge base of `head` with the target branch's tip, from the checkout's history.
pub async fn merge_base(checkout: &Path, base_tip: &str, head: &str, pr: u64) -> anyhow::Result<String> {
    for (what, sha) in [("head", head), ("target branch's tip", base_tip)] {
        let present = tokio::process::Command::new("git")
            .arg("-C")
            .arg(checkout)
            .args(["cat-file", "-e", &format!("{sha}^{{commit}}")])
            .output()
            .await
            .context("cannot run git (is it installed?)")?
            .status
            .success();
        if !present {
            bail!(
                "the pull request's {what} {sha} is not in {}: fetch it first (e.g. git fetch origin \
                 {sha} refs/pull/{pr}/head, with the history: fetch-depth 0)",
                checkout.display()
            );
        }
    }
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(checkout)
        .args(["merge-base", base_tip, head])
        .output()
        .await
        .context("cannot run git (is it installed?)")?;
    let base = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || base.is_empty() {
        bail!(
            "no merge base of {head} and {base_tip} in {} (a shallow clone? check out with fetch-depth 0): {}",
            checkout.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(base)
}

/// Why the run must bound each sandbox's disk, when it must: a head from a fork is code no one
/// who can write to the repository pushed, and an engine that cannot bound a disk lets its build
/// fill the runner's (the controller's own writes then fail). `--allow-unbounded-disk` names
/// the risk and takes it.
pub fn disk_bound_required(event: &Event, allow_unbounded_disk: bool) -> Option<String> {
    (event.from_fork() && !allow_unbounded_disk).then(|| {
        format!(
            "the head comes from {}, and a fork's code runs only where its disk is bounded",
            event.head_repository().map_or("a deleted fork".to_string(), |r| format!("the fork {r}"))
        )
    })
}

/// Step outputs for later jobs (GITHUB_OUTPUT), one `key=value` per line.
fn write_outputs(request: &Request) -> anyhow::Result<()> {
    let Some(path) = std::env::var_os("GITHUB_OUTPUT").filter(|p| !p.is_empty()) else { return Ok(()) };
    let one_line = |s: &str| s.replace(['\r', '\n'], " ");
    let text = format!(
        "allowed={}\nhead={}\nbase={}\npr={}\nreason={}\n",
        request.decision.trusted(),
        request.head,
        request.base,
        request.target.pull_request,
        one_line(request.decision.reason())
    );
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write the step outputs to {}", Path::new(&path).display()))
}

/// `sandbench ci --failed MESSAGE`: a failed commit status and comment for the event's head,
/// whose run ended without publishing (a lost runner, a timed-out or failed shard, a full disk);
/// results already published for the head are left as they are.
async fn conclude_failed(args: &CiArgs, spec: &str, message: &str) -> anyhow::Result<ExitCode> {
    let event = read_event(args)?;
    let pr = &event.pull_request;
    let target = target_of(&event, &pr.base.sha)?;
    let github = args.forge.github(&target.repository)?;
    let message = format!("The benchmark of this head did not finish: {message}.");
    let notice = Publication::notice(spec, "failed", &target, &pr.head.sha, &pr.base.sha, &message);
    let outcome =
        super::publish(&github, target.pull_request, &notice, &args.forge.bot_login, !args.forge.no_status).await;
    let display = Display::new();
    super::print_dry_run(&display, &args.forge, &github);
    display.result(&format!("pull request #{}: {}", target.pull_request, outcome?));
    Ok(ExitCode::SUCCESS)
}

/// `sandbench ci`.
pub async fn command(
    engine: &crate::provision::Engine,
    args: CiArgs,
    ledger: PathBuf,
    cancel: watch::Receiver<bool>,
) -> anyhow::Result<ExitCode> {
    let plan = crate::spec::load(&args.spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(message) = &args.failed {
        return conclude_failed(&args, &plan.name, message).await;
    }
    args.flags.check_pairs(args.flags.pairs)?;
    let display = Display::new();
    let request = request(&args).await?;
    write_outputs(&request)?;
    let target = &request.target;
    let publishing = !args.no_publish;
    // Fail before any work when publishing cannot work (no token).
    let github = if publishing { Some(args.forge.github(&target.repository)?) } else { None };
    let notify = async |status: &str, message: &str| -> anyhow::Result<()> {
        let Some(github) = &github else { return Ok(()) };
        let notice = Publication::notice(&plan.name, status, target, &request.head, &request.base, message);
        let outcome =
            super::publish(github, target.pull_request, &notice, &args.forge.bot_login, !args.forge.no_status).await;
        super::print_dry_run(&display, &args.forge, github);
        display.result(&format!("pull request #{}: {}", target.pull_request, outcome?));
        Ok(())
    };
    let head = &request.head[..12.min(request.head.len())];
    if let Decision::Refused(reason) = &request.decision {
        display.line(&format!("sandbench ci: not running {head}: {reason}"));
        let message = format!("This pull request's code was not run: {reason}.");
        notify("pending-trust", &message).await?;
        return Ok(ExitCode::SUCCESS);
    }
    display.line(&format!("sandbench ci: {head} is allowed ({}); base {}", request.decision.reason(), request.base));
    notify("running", "Benchmarking the head revision. Results will appear here when this run finishes.").await?;
    if args.gate_only {
        return Ok(ExitCode::SUCCESS);
    }
    let mut options =
        args.flags.clone().run_options(args.spec.clone(), request.base.clone(), request.head.clone(), ledger);
    options.require_disk_bound = disk_bound_required(&request.event, args.allow_unbounded_disk);
    let result = match crate::run::run_in(engine, options, cancel).await {
        Ok(result) => result,
        Err(err) => {
            notify("failed", &format!("The run could not start: {err:#}")).await?;
            return Err(err);
        }
    };
    target.save(&result.dir)?;
    display.result(&result.dir.display().to_string());
    if let Some(github) = &github {
        let publication = Publication::from_run_dir(&result.dir, target)?;
        let outcome =
            super::publish(github, target.pull_request, &publication, &args.forge.bot_login, !args.forge.no_status)
                .await;
        super::print_dry_run(&display, &args.forge, github);
        display.result(&format!("pull request #{}: {}", target.pull_request, outcome?));
    }
    Ok(crate::options::exit_code(result.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(head_repo: Option<&str>) -> Event {
        let repo = head_repo.map(|r| serde_json::json!({ "full_name": r }));
        serde_json::from_value(serde_json::json!({
            "pull_request": {
                "number": 7, "user": {"login": "m"},
                "head": {"sha": "2".repeat(40), "repo": repo},
                "base": {"sha": "1".repeat(40), "repo": {"full_name": "o/r"}},
            },
            "repository": {"full_name": "o/r"},
        }))
        .unwrap()
    }

    #[test]
    fn a_forks_head_needs_a_bounded_disk_unless_the_risk_is_taken() {
        let why = disk_bound_required(&event(Some("mallory/r")), false).expect("required");
        assert!(why.contains("the fork mallory/r"), "{why}");
        assert!(disk_bound_required(&event(None), false).unwrap().contains("a deleted fork"));
        assert_eq!(disk_bound_required(&event(Some("mallory/r")), true), None, "--allow-unbounded-disk");
        assert_eq!(disk_bound_required(&event(Some("o/r")), false), None, "a branch of the repository itself");
    }
}
