//! How the terminal ends a run: how it ended and, when it did not complete, why (the stop, the
//! error that ended it, or what is missing); then the verdicts as the comment leads with them
//! (`report::summary::terminal`: the counts, the changed rows, the rest) — and where the reports
//! are. Errors printed while the run went are referred to, not repeated. Pure: the run prints these lines through its display.

use std::path::Path;

use sandbench_proto::metric::{Facet, MetricKey};

use crate::report::{Report, Status};
use crate::stats::Outcome;

/// Most metric names listed on one line.
const MAX_NAMES: usize = 12;

/// The closing lines of a run. `reason` is why it ended early, when it was not printed already
/// (a stop, or the error that ended it before any sandbox).
pub fn ending(report: &Report, reason: Option<&str>, dir: &Path) -> Vec<String> {
    let id = &report.run_id;
    let status = report.status.as_str();
    let mut lines = vec![match (report.status, reason) {
        (Status::Completed, _) => format!("run {id} completed"),
        (_, Some(reason)) => format!("run {id} {status}: {reason}"),
        (Status::Partial, None) => format!("run {id} partial: {}", missing(report)),
        (_, None) if !report.errors.is_empty() => {
            format!("run {id} {status}: no sandbox could be set up; the errors above say why")
        }
        (_, None) => format!("run {id} {status}"),
    }];
    if report.record {
        lines.extend(crate::report::record::terminal(report));
    } else {
        lines.extend(crate::report::summary::terminal(report));
    }
    lines.push(format!("reports in {}", dir.display()));
    lines
}

/// Why a run whose gating metrics ended inconclusive added no pairs, when it had no adaptive
/// plan to add them by (a run that had one says why at its last look): a sharded run, or
/// `trials.max_pairs` not above the trials of the phases that hold the gating metrics.
pub fn not_grown(report: &Report, plan: &crate::spec::Plan, sharded: bool) -> Option<String> {
    if report.sequential.is_some() || plan.rule != crate::spec::Rule::Paired {
        return None;
    }
    let inconclusive: Vec<&str> = report
        .comparisons
        .iter()
        .filter(|c| c.outcome() == Outcome::Inconclusive)
        .filter(|c| {
            let named = !plan.metrics.iter().any(|m| m.key == c.key);
            plan.trials.gate.contains(&c.key) || (named && plan.gates_named(&c.key))
        })
        .map(|c| c.key.as_str())
        .collect();
    if inconclusive.is_empty() {
        return None;
    }
    let names = names(report, &inconclusive);
    let initial = plan.gated_trials(&plan.trials.gate);
    Some(if sharded {
        format!("adaptive pairs: none added though {names} ended inconclusive: a sharded run does not adapt")
    } else {
        format!(
            "adaptive pairs: none added though {names} ended inconclusive at {initial} pairs: [trials] max_pairs ({}) \
             is not above the {initial} trials of the phases that hold the gating metrics; raise it to let the run \
             add pairs",
            plan.trials.max_pairs
        )
    })
}

/// What a partial run misses: its incomplete metrics by name.
fn missing(report: &Report) -> String {
    let incomplete: Vec<&str> = report
        .comparisons
        .iter()
        .filter(|c| matches!(c.outcome(), Outcome::Incomplete | Outcome::Unavailable))
        .map(|c| c.key.as_str())
        .collect();
    let because = if report.errors.is_empty() { "" } else { "; the errors above say why" };
    if incomplete.is_empty() {
        return format!("measurements are missing{because}");
    }
    format!(
        "{} of {} metrics incomplete ({}){because}",
        incomplete.len(),
        report.comparisons.len(),
        names(report, &incomplete)
    )
}

/// Metrics by title (a CPU companion `<key>.cpu` as "<title> (CPU)"), at most [`MAX_NAMES`].
fn names(report: &Report, keys: &[&str]) -> String {
    let title = |key: &str| -> String {
        let def = |k: &str| report.metrics.iter().find(|m| m.key == k).map(|m| m.title.clone());
        match (def(key), MetricKey::stem_if(key, Facet::Cpu).and_then(def)) {
            (Some(title), _) => title,
            (None, Some(wall)) => format!("{wall} (CPU)"),
            (None, None) => key.to_string(),
        }
    };
    let mut shown: Vec<String> = keys.iter().take(MAX_NAMES).map(|k| title(k)).collect();
    if keys.len() > MAX_NAMES {
        shown.push(format!("and {} more", keys.len() - MAX_NAMES));
    }
    shown.join(", ")
}
