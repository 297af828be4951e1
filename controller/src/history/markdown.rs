//! `history.md`: the change points of a spec's history, for a person or an issue tracker — each
//! with its metric and lens, its size, the levels on both sides, the commits on both sides (and
//! how many between them were not recorded), its evidence and, when one ran, the bisection's
//! first bad commit; then every series in one table. Product text (subjects, keys) is escaped:
//! no live mention or link.

use std::fmt::Write;

use super::analysis::{ChangeAt, History, MetricHistory};
use super::series::Kind;
use crate::report::format::{escape, escape_clipped, number};
use crate::spec::MetricDef;

const MAX_SUBJECT: usize = 72;
const MAX_TITLE: usize = 120;

pub fn render(history: &History) -> String {
    let changes: usize = history.metrics.iter().map(|m| m.change_points.len()).sum();
    let mut out = format!(
        "# {} — history: {} change point{}\n\n",
        escape_clipped(&history.spec, MAX_TITLE),
        changes,
        if changes == 1 { "" } else { "s" }
    );
    let _ = writeln!(out, "{}\n", scope(history));
    let _ = writeln!(
        out,
        "Measured values (wall time and the others, per machine and setting): E-Divisive means, each split significant by Student's t on the logs at p ≤ {} after multiplying by the splits tried, and larger than the metric's floor. Counts of the instruction lens (the same on every machine): a step between consecutive recorded commits larger than the count's floor.\n",
        history.alpha
    );
    if changes == 0 {
        let _ = writeln!(out, "No change point in {} series.\n", history.metrics.len());
    } else {
        out.push_str("## Change points\n\n");
        out.push_str("| Metric | Lens | Change | Before → after | Between | Evidence | First bad commit |\n");
        out.push_str("| --- | --- | ---: | --- | --- | --- | --- |\n");
        for metric in &history.metrics {
            for change in &metric.change_points {
                out.push_str(&change_row(history, metric, change));
            }
        }
        out.push('\n');
    }
    series_table(&mut out, history);
    for warning in &history.warnings {
        let _ = writeln!(out, "- warning: {}", escape_clipped(warning, 400));
    }
    out
}

/// Which commits the history holds, and in what order.
fn scope(history: &History) -> String {
    let commits = history.commits.len();
    let span = match (history.commits.first(), history.commits.last()) {
        (Some(a), Some(b)) if commits > 1 => format!(" (`{}` … `{}`)", short(&a.commit), short(&b.commit)),
        (Some(a), _) => format!(" (`{}`)", short(&a.commit)),
        _ => String::new(),
    };
    let order = match &history.line {
        Some(line) => {
            format!("on the first-parent line of `{}`", escape_clipped(&line.rev, MAX_TITLE).replace('`', "'"))
        }
        None => "ordered by commit time".to_string(),
    };
    let off = match history.off_line {
        0 => String::new(),
        n => format!(
            "; {n} record{} of commits off the line (pull requests' heads) left out",
            if n == 1 { "" } else { "s" }
        ),
    };
    format!("{commits} recorded commit{} {order}{span}{off}.", if commits == 1 { "" } else { "s" })
}

fn change_row(history: &History, metric: &MetricHistory, change: &ChangeAt) -> String {
    let def = def_of(metric);
    let commit = |at: usize| {
        let c = &history.commits[at];
        format!("`{}` {}", short(&c.commit), escape_clipped(&c.subject, MAX_SUBJECT))
    };
    let between = match change.unrecorded {
        Some(0) => format!("{} → {} (adjacent)", commit(change.before_at), commit(change.after_at)),
        Some(n) => format!(
            "{} → {} ({n} commit{} between not recorded)",
            commit(change.before_at),
            commit(change.after_at),
            if n == 1 { "" } else { "s" }
        ),
        None => format!("{} → {}", commit(change.before_at), commit(change.after_at)),
    };
    let evidence = match (metric.kind, change.p_value) {
        (Kind::Measured, Some(p)) => format!("p = {p:.1e}, floor ±{:.2} %", metric.floor * 100.0),
        _ => format!("exact step, floor ±{:.2} %", metric.floor * 100.0),
    };
    let first_bad = match &change.bisection {
        Some(b) => match &b.first_bad {
            Some(c) => format!(
                "`{}` {} (bisected, {} visited)",
                short(&c.commit),
                escape_clipped(&c.subject, MAX_SUBJECT),
                crate::report::format::plural(b.steps, "commit")
            ),
            None => format!("bisected: {}", escape_clipped(&b.words, 300)),
        },
        None => "—".to_string(),
    };
    format!(
        "| {} (`{}`) | {} | {} | {} → {} | {between} | {evidence} | {first_bad} |\n",
        escape_clipped(&metric.title, MAX_TITLE),
        code(&metric.key),
        metric.lens,
        number(change.size * 100.0, 2, true) + " %",
        escape(&crate::report::format::value(change.before, &def)),
        escape(&crate::report::format::value(change.after, &def)),
    )
}

fn series_table(out: &mut String, history: &History) {
    out.push_str("## Series\n\n| Metric | Lens | Where | Commits | Latest | Floor | Change points |\n");
    out.push_str("| --- | --- | --- | ---: | ---: | ---: | ---: |\n");
    for metric in &history.metrics {
        let def = def_of(metric);
        let latest = metric
            .points
            .iter()
            .rev()
            .find_map(|p| p.median)
            .map_or("—".to_string(), |v| escape(&crate::report::format::value(v, &def)));
        let place = match (&metric.machine, &metric.setting) {
            (Some(machine), Some(setting)) => format!(
                "{} on {}, {}",
                escape_clipped(&metric.image, 80),
                escape_clipped(machine, 80),
                escape_clipped(setting, 80)
            ),
            _ => format!("{} (any machine)", escape_clipped(&metric.image, 80)),
        };
        let _ = writeln!(
            out,
            "| {} (`{}`) | {} | {place} | {} | {latest} | ±{:.2} % | {} |",
            escape_clipped(&metric.title, MAX_TITLE),
            code(&metric.key),
            metric.lens,
            metric.points.len(),
            metric.floor * 100.0,
            metric.change_points.len()
        );
    }
    out.push('\n');
}

/// A metric's definition as the history holds it, for formatting its values.
pub(super) fn def_of(metric: &MetricHistory) -> MetricDef {
    MetricDef {
        key: metric.key.clone(),
        title: metric.title.clone(),
        unit: metric.unit.clone(),
        scale: metric.scale,
        absolute: 0.0,
        relative: metric.floor,
        group: metric.group.clone(),
        better: crate::stats::Better::Lower,
    }
}

/// Text for a code span: nothing in one is a mention or a link; only a backtick could end it.
fn code(text: &str) -> String {
    crate::sanitize::terminal(crate::sanitize::prefix(text, MAX_TITLE)).replace(['`', '\n', '\r', '|'], "'")
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 8)
}
