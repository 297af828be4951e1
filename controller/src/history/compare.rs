//! A compare run's part in the history, at its end (where the run finishes its ledger entry,
//! `run::conduct`): first, per changed metric, where the head stands against main's recent
//! recorded values (the report's [`trend`](crate::report::trend), for the comment); then its base
//! and head kept as records of their commits, every metric's trial values with the machine,
//! setting and conditions they were measured under. The standing is taken before this run's own
//! records are kept, so "main's history" is what was there before it.
//!
//! Main's recent values are those of the most recent recorded commits on the base's first-parent
//! line (the base is main, or where the pull request left it): a pull request's own earlier
//! heads are on no such line and never count. Without a local repository there is no line, and
//! no standing.

use std::path::Path;

use sandbench_proto::Side;
use sandbench_proto::metric::{Facet, MetricKey};
use sandbench_proto::phase::Phase;

use super::series::{self, Kind};
use super::store::{CommitInfo, Record, Records, TrialValue};
use crate::cost::ledger::{Ledger, this_machine};
use crate::report::conditions::Condition;
use crate::report::trend::{Against, Standing};
use crate::report::{Report, Status, decide, lens, noise::NoiseProfile, runs};
use crate::spec::{MetricDef, Plan, SourceSettings};
use crate::stats::Outcome;

/// The origin of a record's values in the history (a compare run's are `base` and `head`).
pub const ORIGIN_RECORD: &str = "record";

/// Main's recent recorded commits a head is set against.
pub const RECENT: usize = 5;
/// How far back the base's first-parent line is read.
const LINE_LIMIT: usize = 10_000;

/// Sets the report's standing against main's history and keeps the run's base and head in it.
/// A run still running (never here) or one that measured nothing keeps nothing.
pub async fn at_run_end(ledger: &Ledger, plan: &Plan, report: &mut Report) -> anyhow::Result<()> {
    if report.status == Status::Running {
        return Ok(());
    }
    let records = Records::on(ledger)?;
    let repository = match &plan.source {
        SourceSettings::Local { repository } => Some(repository.as_path()),
        _ => None,
    };
    if let Some(repo) = repository.filter(|_| !report.record) {
        let line = crate::source::first_parent_line(repo, &report.base.commit, LINE_LIMIT).await?;
        let kept = records.of_spec(&plan.name)?;
        let noise = |image: &str| {
            let stored = ledger.latest_noise(&plan.name, image, &this_machine()).ok().flatten()?;
            serde_json::from_str::<NoiseProfile>(&stored.profile).ok()
        };
        report.trend = standings(&kept, &line, report, &setting(report), &noise);
    }
    // A record measured its revision as base alone.
    let sides: &[Side] = if report.record { &[Side::Base] } else { &[Side::Base, Side::Head] };
    for &side in sides {
        let record = record(plan, report, side, repository).await?;
        if !record.values.is_empty() {
            records.keep(&record)?;
        }
    }
    Ok(())
}

/// What wall time depends on beside the machine: the sandbox's CPUs and memory, and how the
/// trials were taken (two sandboxes at once in a duet, one at a time otherwise, one sandbox
/// alone in a record).
pub fn setting(report: &Report) -> String {
    let cpus = report.resources.cpus;
    let gib = report.resources.memory_bytes as f64 / (1u64 << 30) as f64;
    let taken = if report.record { "alone" } else { report.order.as_str() };
    format!("{cpus} CPU{}, {gib} GiB, {taken}", if cpus == 1.0 { "" } else { "s" })
}

/// The record of one side of the run: its commit, every metric's trial values (the median of each
/// trial's runs) and, for measured values, the conditions of their trials.
async fn record(plan: &Plan, report: &Report, side: Side, repository: Option<&Path>) -> anyhow::Result<Record> {
    let (revision, data) = match side {
        Side::Base => (&report.base, &report.base_side),
        Side::Head => (&report.head, &report.head_side),
    };
    let (committed_at, subject) = match repository {
        Some(repo) => crate::source::describe(repo, &revision.commit).await?,
        None => (String::new(), String::new()),
    };
    let defs = report.metric_defs();
    let mut values = Vec::new();
    for (key, samples) in &data.metrics {
        let lens = match defs.iter().find(|d| &d.key == key) {
            Some(def) => lens::of(def),
            None if MetricKey::facet_of(key) == Facet::Instructions => lens::Lens::Instructions,
            None => continue,
        };
        let counted = lens == lens::Lens::Instructions;
        let phase = phase_of(plan, key);
        for (trial, value) in runs::trial_values(samples) {
            let condition = (!counted).then(|| condition(report, side, phase, trial)).flatten();
            values.push(TrialValue {
                metric: key.clone(),
                lens: lens.name().to_string(),
                trial,
                value,
                steal: condition.and_then(|c| c.steal),
                throttled: condition.and_then(|c| match (c.periods, c.throttled_periods) {
                    (Some(p), Some(t)) if p > 0 => Some(t as f64 / p as f64),
                    _ => None,
                }),
                flagged: condition.is_some_and(|c| c.warning().is_some()),
            });
        }
    }
    // A record's origin says so; a compare run's, which side.
    let origin = if report.record { ORIGIN_RECORD } else { side.as_str() };
    Ok(Record {
        record_id: format!("{}/{origin}", report.run_id),
        run_id: report.run_id.clone(),
        origin: origin.to_string(),
        spec: plan.name.clone(),
        repository: repository.map(|r| r.display().to_string()).unwrap_or_default(),
        commit: CommitInfo { commit: revision.commit.clone(), committed_at, subject },
        image: report.image.clone(),
        machine: this_machine(),
        setting: setting(report),
        recorded_at: report
            .finished_at
            .clone()
            .unwrap_or_else(|| crate::report::timestamp(std::time::SystemTime::now())),
        values,
    })
}

/// The phase whose trials record `key` (a companion's, its step's).
fn phase_of(plan: &Plan, key: &str) -> Option<Phase> {
    let step = lens::step(key);
    let stem = MetricKey::stem_of(step);
    Phase::ALL.into_iter().find(|p| plan.metrics_of_phase(*p).iter().any(|m| m == key || m == step || m == stem))
}

/// The conditions of `side`'s trial of `phase` (by the place each sandbox was given).
fn condition(report: &Report, side: Side, phase: Option<Phase>, trial: u32) -> Option<&Condition> {
    let phase = phase?;
    report
        .conditions
        .iter()
        .find(|c| c.phase == phase && c.trial == trial && c.placement.is_some_and(|p| p.side == side))
}

/// Where the head stands, per regressed or improved metric, against main's recent recorded
/// values on `line` (the base's first-parent line, oldest first): a count against the latest
/// exactly, a measured value against the band of its machine and setting. Metrics with no such
/// history get none.
pub fn standings(
    kept: &[Record],
    line: &[String],
    report: &Report,
    setting: &str,
    noise: &dyn Fn(&str) -> Option<NoiseProfile>,
) -> Vec<Standing> {
    let on_line = series::line(kept, Some(line));
    let all = series::series(kept, &on_line);
    let machine = this_machine();
    let defs = report.metric_defs();
    let noise = noise(&report.image);
    let mut out = Vec::new();
    for comparison in report.analyze() {
        if !matches!(comparison.outcome(), Outcome::Regressed | Outcome::Improved) {
            continue;
        }
        let (Some(def), Some(head)) =
            (defs.iter().find(|d| d.key == comparison.key), comparison.comparison.head_median)
        else {
            continue;
        };
        let kind = Kind::of_lens(lens::of(def).name());
        let found = all.iter().find(|s| {
            s.key.metric == def.key
                && s.key.kind == kind
                && s.key.image == report.image
                && (kind == Kind::Count
                    || (s.key.machine.as_deref() == Some(&machine) && s.key.setting.as_deref() == Some(setting)))
        });
        let Some(found) = found else { continue };
        let recent: Vec<&series::Point> =
            found.points.iter().rev().filter(|p| !p.values.is_empty()).take(RECENT).collect();
        let Some(latest) = recent.first() else { continue };
        let against = against(kind, def, &recent, head, noise.as_ref());
        out.push(Standing {
            key: def.key.clone(),
            commits: recent.len(),
            latest: on_line.commits[latest.at].commit.clone(),
            against,
        });
    }
    out
}

/// A count against main's latest (newest first in `recent`), a measured value against the band.
fn against(kind: Kind, def: &MetricDef, recent: &[&series::Point], head: f64, noise: Option<&NoiseProfile>) -> Against {
    let medians: Vec<f64> = recent.iter().filter_map(|p| crate::stats::median(&p.values)).collect();
    match kind {
        Kind::Count => {
            let (lo, hi) = medians.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(*v), h.max(*v)));
            let spread = if lo > 0.0 { hi / lo - 1.0 } else { 0.0 };
            Against::Count { main: medians[0], head, spread }
        }
        Kind::Measured => {
            let all: Vec<f64> = recent.iter().flat_map(|p| p.values.iter().copied()).collect();
            let level = crate::stats::median(&all).unwrap_or(f64::NAN);
            let floor = decide::floor(def, Some(level), noise).value;
            Against::Band { level, low: level * (1.0 - floor), high: level * (1.0 + floor), head }
        }
    }
}
