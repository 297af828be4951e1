//! A run from its start (new or resumed) to its written reports and ledger entry: the opening
//! lines, the ledger entry, the walk ([`super::execute`]), what it ended with put into the
//! report, the bisections asked for, and the closing lines.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;

use super::accounting::Resumed;
use super::execute::{self, Finished, Setting};
use super::options::RunOptions;
use super::output::{self, NoiseProfile, write_reports};
use super::resolve::Resolved;
use super::schedule::Side;
use super::walk::{Adapted, MAX_ERRORS};
use super::{bisections, schedule, story};
use crate::cost::ledger::{Entry, Ledger, StoredNoise, this_machine};
use crate::display::Display;
use crate::provision::{DiskBound, Provisioner};
use crate::report::{self, Report, Revision, Status};
use crate::spec::{Plan, SourceSettings};
use crate::stats::sequential::Design;

pub struct RunResult {
    pub status: Status,
    pub dir: PathBuf,
    pub report: Report,
    /// The lines the terminal ended with (see [`story::ending`]).
    pub ending: Vec<String>,
}

/// A run about to be walked, new or resumed: resolved, with its directory and report begun.
pub(super) struct Start {
    pub resolved: Resolved,
    pub dir: PathBuf,
    pub report: Report,
    pub resumed: Option<Resumed>,
    /// The sandboxes of earlier attempts (a resumed run), charged already.
    pub earlier: Vec<report::SandboxRecord>,
}

/// Walks a run from its start to its written reports and ledger entry.
pub(super) async fn conduct(
    start: Start,
    cancel: watch::Receiver<bool>,
    connect: impl Future<Output = anyhow::Result<Arc<dyn Provisioner>>>,
) -> anyhow::Result<RunResult> {
    let Start { resolved, dir, mut report, resumed, earlier } = start;
    let Resolved { opts, plan, notes, base, head, stages, cpus, ledger, .. } = resolved;
    let run_id = report.run_id.clone();
    if let Err(err) = crate::logging::to_file(&dir.join("controller.log")) {
        tracing::warn!("cannot write {}: {err}", dir.join("controller.log").display());
    }
    tracing::info!(run = %run_id, spec = %plan.name, base = %opts.base, head = %opts.head, "run started");
    let display = Display::new();
    announce(&display, &opts, &plan, &report, (&base, &head), (resumed.as_ref(), &stages), &notes);
    if let Some(shard) = opts.shard {
        let part = record_shard(shard, &plan, &run_id, &base, &head, &dir)?;
        display.line(&format!("shard {shard} runs the trials {}", describe_share(&part)));
        report.shards = vec![part];
    }
    write_reports(&dir, &mut report)?;
    // The ledger entry is made first, so a run killed from here on shows as unfinished.
    let mut entry = begin_ledger(ledger, &plan, &report, &dir, resumed.is_some())?;

    let setting = Setting {
        plan: &plan,
        opts: &opts,
        dir: &dir,
        display: &display,
        base: &base,
        head: &head,
        resumed: resumed.as_ref(),
        skeleton: &report,
        stages: &stages,
        cpus: &cpus,
    };
    let finished = match execute::execute(setting, entry.as_mut().map(Entry::ledger_mut), cancel.clone(), connect).await
    {
        Ok(finished) => finished,
        Err(err) => Finished::failed(format!("{err:#}")),
    };
    let provisioner = finished.provisioner.clone();
    let reason = settle_report(&mut report, &plan, finished, notes, &dir, earlier);
    if let Some(provisioner) = provisioner.filter(|_| opts.bisect) {
        // The verdicts are written first: they stand whatever the bisections do.
        write_reports(&dir, &mut report)?;
        let at = bisections::Bisecting {
            plan: &plan,
            dir: &dir,
            display: &display,
            agent: opts.agent.clone(),
            shipping: opts.shipping,
            dead_man: opts.dead_man,
        };
        bisections::bisect_regressions(at, &mut report, provisioner, cancel).await;
    }
    if let Some(entry) = entry.as_mut() {
        settle_ledger(entry, &plan, &mut report).await;
    }
    write_reports(&dir, &mut report)?;
    if base.commit == head.commit && report.status == Status::Completed && !report.record {
        keep_a_a(&report, &dir, entry.as_ref().map(Entry::ledger), &display)?;
    }
    let mut ending = story::ending(&report, reason.as_deref(), &dir);
    // Right after how the run ended: why it added no pairs though it could have used them.
    if let Some(line) = story::not_grown(&report, &plan, opts.shard.is_some()) {
        ending.insert(1, line);
    }
    for line in &ending {
        display.line(line);
    }
    tracing::info!(run = %run_id, status = report.status.as_str(), "run finished");
    crate::logging::close_file();
    Ok(RunResult { status: report.status, dir, report, ending })
}

/// Puts what `execute` ended with into the report (whether the engine bounded the sandboxes'
/// disk, beside the size it prints, with a warning when it did not; an adaptive run's trials;
/// the sandboxes of earlier attempts); returns why the run ended early, when it did.
fn settle_report(
    report: &mut Report,
    plan: &Plan,
    finished: Finished,
    notes: Vec<String>,
    dir: &Path,
    earlier: Vec<report::SandboxRecord>,
) -> Option<String> {
    let disk = execute::disk_warning(plan, &finished.disk);
    report.resources.disk_enforced = match &finished.disk {
        DiskBound::Enforced => Some(true),
        DiskBound::Unenforced(_) => Some(false),
        DiskBound::Unknown => None,
    };
    let reason = finished.reason.clone();
    if let Some(adapted) = &finished.adapted {
        grow_report(report, plan, adapted);
    }
    finish(report, finished, disk.into_iter().chain(notes).collect(), dir);
    report::distributions::define_recorded(report, plan);
    report.sandboxes.splice(0..0, earlier);
    report.estimates = report::benches::estimates(dir, &report.sandboxes);
    reason
}

/// An A/A run's noise profile: `noise.json` beside the report, and in the ledger for later runs.
fn keep_a_a(report: &Report, dir: &Path, ledger: Option<&Ledger>, display: &Display) -> anyhow::Result<()> {
    let path = write_noise_profile(report, dir)?;
    let kept = match ledger {
        Some(ledger) => keep_noise_profile(ledger, report, &path),
        None => "use it with --noise".to_string(),
    };
    display.line(&format!("A/A run: noise profile written to {} ({kept})", path.display()));
    Ok(())
}

/// The run's opening lines: what is compared, what a resume left to do, the notes and the
/// noise profile's warning.
fn announce(
    display: &Display,
    opts: &RunOptions,
    plan: &Plan,
    report: &Report,
    (base, head): (&Revision, &Revision),
    (resumed, stages): (Option<&Resumed>, &[schedule::Stage]),
    notes: &[String],
) {
    if report.record {
        display.line(&format!("record {}: {} at {} ({})", report.run_id, plan.name, base.rev, short(&base.commit)));
    } else {
        display.line(&format!(
            "run {}: {} — base {} ({}) vs head {} ({})",
            report.run_id,
            plan.name,
            base.rev,
            short(&base.commit),
            head.rev,
            short(&head.commit)
        ));
    }
    if let Some(resumed) = resumed {
        let total: usize = stages.iter().flat_map(|s| &s.lanes).map(Vec::len).sum();
        let missing = resumed.accounting.missing(stages).len();
        display.line(&format!(
            "resumed (attempt {}): {} of {total} trials done before, {missing} to run in new sandboxes",
            resumed.attempt,
            total - missing
        ));
    }
    for note in notes {
        display.line(note);
    }
    for runs in &report.lens_runs {
        display.line(&format!("instruction lens: {} {}", runs.stem, runs.note()));
    }
    if let Some(noise) = report.noise.as_ref().filter(|n| n.found.is_some()) {
        display.line(&format!(
            "floors from the noise profile of A/A run {} ({}): {}; --noise none uses the spec's floors",
            noise.run_id,
            noise.found.as_deref().unwrap_or_default(),
            noise.basis()
        ));
    }
    if let Some(warning) = report.noise.as_ref().and_then(|n| n.warning(plan.rule)) {
        display.line(&warning);
    }
    if plan.rule == crate::spec::Rule::Paired {
        // The looks the run plans (a sharded run takes only the first), at the alpha each spends.
        let initial = plan.gated_trials(&plan.trials.gate);
        let design = report::Sequential::for_plan(plan)
            .filter(|_| opts.shard.is_none())
            .map_or(Design { alpha: 0.05, initial, max_pairs: initial }, |s| s.design);
        for line in report.expectations(&plan.trials.gate, &design) {
            display.line(&format!("expected from the noise profile: {line}"));
        }
    }
}

/// Writes a shard's `shard.json` and returns its part of the run.
fn record_shard(
    shard: crate::shard::Shard,
    plan: &Plan,
    run_id: &str,
    base: &Revision,
    head: &Revision,
    dir: &Path,
) -> anyhow::Result<crate::shard::ShardPart> {
    let part = crate::shard::ShardPart::new(shard, run_id, &plan.timed_phases());
    let record = crate::shard::ShardRecord {
        part: part.clone(),
        spec: plan.name.clone(),
        base: base.clone(),
        head: head.clone(),
    };
    record.save(dir)?;
    Ok(part)
}

/// Closes the run's ledger entry and keeps its base and head in the metric history (setting
/// where the head stands against main's); a failure becomes a warning of the report.
async fn settle_ledger(entry: &mut Entry, plan: &Plan, report: &mut Report) {
    let finished_at = report.finished_at.clone().unwrap_or_default();
    let recorded = entry
        .finish(report.status.as_str(), &finished_at, &report.sandboxes)
        .and_then(|()| record_lens(entry.ledger(), report));
    let ledger = entry.ledger();
    if let Err(err) = recorded {
        report.warnings.push(format!("cannot record the run in the ledger {}: {err:#}", ledger.path().display()));
    }
    if let Err(err) = crate::history::compare::at_run_end(ledger, plan, report).await {
        report.warnings.push(format!("cannot keep the run in the ledger's history: {err:#}"));
    }
}

/// The instruction lens's sandbox seconds and cost in the run's ledger row, when it ran.
pub(crate) fn record_lens(ledger: &Ledger, report: &Report) -> anyhow::Result<()> {
    match &report.lens {
        Some(lens) => ledger.record_lens(&report.run_id, lens.seconds, report.lens_cost_usd().unwrap_or(0.0)),
        None => Ok(()),
    }
}

/// Keeps an A/A run's profile in the ledger for later runs of its spec, image and machine; says
/// where it went.
fn keep_noise_profile(ledger: &Ledger, report: &Report, path: &Path) -> String {
    let stored = std::fs::read_to_string(path).map_err(anyhow::Error::from).and_then(|profile| {
        ledger.record_noise(&StoredNoise {
            run_id: report.run_id.clone(),
            spec: report.spec_name.clone(),
            image: report.image.clone(),
            machine: this_machine(),
            recorded_at: report.finished_at.clone().unwrap_or_default(),
            profile,
        })
    });
    match stored {
        Ok(()) => {
            "kept in the ledger: later runs of this spec on this machine pool it with the A/A runs before it; --noise none opts out"
                .into()
        }
        Err(err) => format!("not kept in the ledger: {err:#}; use it with --noise"),
    }
}

/// An A/A run's noise profile, `noise.json` beside the report; its path.
fn write_noise_profile(report: &Report, dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("noise.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&NoiseProfile::from_report(report))?)?;
    Ok(path)
}

/// Opens the ledger, if any, and records the run as begun.
/// A resumed run's entry, when the ledger has it, is put back to running.
fn begin_ledger(
    ledger: Option<Ledger>,
    plan: &Plan,
    report: &Report,
    dir: &Path,
    resumed: bool,
) -> anyhow::Result<Option<Entry>> {
    let Some(ledger) = ledger else { return Ok(None) };
    let repository = match &plan.source {
        SourceSettings::Local { repository } => {
            repository.canonicalize().unwrap_or(repository.clone()).display().to_string()
        }
        SourceSettings::Url { url } => url.clone(),
        SourceSettings::None => String::new(),
    };
    Ok(Some(Entry::begin(ledger, &report.run_start(&plan.name, repository, dir, plan.hourly_usd()), resumed)?))
}

/// Puts what the run ended with into the report.
fn finish(report: &mut Report, finished: Finished, notes: Vec<String>, dir: &Path) {
    let Finished { status, mut sides, records, mut errors, warnings, .. } = finished;
    errors.truncate(MAX_ERRORS);
    report.status = status;
    report.errors = errors;
    report.warnings = notes.into_iter().chain(warnings).collect();
    report.warnings.extend(output::agent_warnings(dir));
    report.sandboxes = records;
    let conditions = report::conditions::collect(dir, &report.sandboxes);
    report.add_conditions(conditions);
    report.lens = report::instructions::collect(dir, &report.sandboxes);
    report.finished_at = Some(report::timestamp(SystemTime::now()));
    if let Some(side) = sides.remove(&Side::Base) {
        report.base_side = side;
    }
    if let Some(side) = sides.remove(&Side::Head) {
        report.head_side = side;
    }
    // A shard keeps its own trials only (every shard measures the once-per-sandbox metrics).
    report.retain_owned();
    if report.status == Status::Completed && !report.complete() {
        report.status = Status::Partial;
    }
}

/// An adaptive run's report: analysed at its last look, each grown phase's metrics expecting
/// the trials it grew to.
fn grow_report(report: &mut Report, plan: &Plan, adapted: &Adapted) {
    report.sequential = Some(adapted.sequential.clone());
    for (name, trials) in &adapted.trials {
        for key in plan.metrics_of_phase(*name).into_iter().chain(plan.peak_rss_keys(*name)) {
            // The footprint is taken once; the lens runs in none of the pairs added.
            let lens = sandbench_proto::metric::MetricKey::facet_of(&key).is_lens();
            if key != sandbench_proto::metric::DISK && !lens {
                report.expected.insert(key, *trials);
            }
        }
    }
}

/// `measure 0, 2, 4; runtime 0, 2` — a shard's trials per phase.
fn describe_share(part: &crate::shard::ShardPart) -> String {
    let phases = part.trials.iter().map(|(phase, trials)| {
        let list: Vec<String> = trials.iter().map(u32::to_string).collect();
        format!("{phase} {}", if list.is_empty() { "none".to_string() } else { list.join(", ") })
    });
    phases.collect::<Vec<_>>().join("; ")
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 8)
}
