//! `report.html`: one self-contained page (no script, no external request): the summary line,
//! warnings and failures, then per metric the decision, both distributions as a strip plot with
//! their medians and the floor drawn around the base median, and the numbers (interval, floor,
//! minimum detectable effect). Every text from a spec, a revision or a sandbox is escaped.

use std::fmt::Write;

use sandbench_proto::Side;

use super::format::{Cell, change_cell, decision_cell, value};
use super::markdown::cpu_findings;
use super::{MetricComparison, Report, Rule, Sample};
use crate::spec::MetricDef;
use crate::stats::Outcome;

const WIDTH: f64 = 640.0;
const ROW: f64 = 34.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
/// The axis spans at least ±this (or ± the floor, when larger) around the base median, so a
/// 0.4 % spread stays a small spread.
const MIN_HALF_SPAN: f64 = 0.05;
const MAX_FAILURES_LISTED: usize = 30;

/// Untrusted text made inert in HTML text and quoted attributes, without escape sequences or
/// control characters.
fn esc(text: &str) -> String {
    crate::sanitize::terminal(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

pub fn render(report: &Report) -> String {
    let comparisons = report.analyze();
    let defs = report.metric_defs();
    let mut out = String::new();
    head(&mut out, report);
    summary(&mut out, report, &defs, &comparisons);
    for (def, cmp) in defs.iter().zip(&comparisons) {
        metric(&mut out, report, def, cmp);
    }
    out.push_str("</body></html>\n");
    out
}

fn head(out: &mut String, report: &Report) {
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} performance — {}</title>\n<style>\n\
         body{{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#1f2328;padding:0 1em}}\n\
         h1{{font-size:1.4em}} .metric{{border:1px solid #d0d7de;border-radius:6px;padding:.8em 1em;margin:1em 0}}\n\
         .metric h2{{font-size:1.05em;margin:0 0 .3em}} .verdict{{font-weight:600}} .summary{{font-weight:600}}\n\
         .regressed{{color:#cf222e}} .improved{{color:#1a7f37}} .neutral{{color:#57606a}}\n\
         table{{border-collapse:collapse}} td,th{{padding:.15em .6em;text-align:right}} td:first-child,th:first-child{{text-align:left}}\n\
         .errors li,.warnings li{{font-family:ui-monospace,monospace;font-size:12px}} .notes{{font-size:12px;color:#57606a}}\n</style></head><body>\n",
        esc(&report.spec_name),
        report.status.as_str()
    );
    let _ = writeln!(
        out,
        "<h1>{} performance — {}</h1>\n<p>Head <code>{}</code> ({}) compared with base <code>{}</code> ({}) on <code>{}</code>; run <code>{}</code>, attempt {}.</p>",
        esc(&report.spec_name),
        report.status.as_str(),
        esc(&report.head.commit),
        esc(&report.head.rev),
        esc(&report.base.commit),
        esc(&report.base.rev),
        esc(&report.image),
        esc(&report.run_id),
        report.attempt
    );
}

/// The overall line, the CPU-time findings, cost, warnings and failures.
fn summary(out: &mut String, report: &Report, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    let count = |o: Outcome| comparisons.iter().filter(|c| c.outcome() == o).count();
    let mut parts =
        vec![format!("{} regressed", count(Outcome::Regressed)), format!("{} improved", count(Outcome::Improved))];
    match report.rule {
        Rule::Reference => parts.push(format!("{} no clear change", count(Outcome::NoClearChange))),
        Rule::Paired => {
            parts.push(format!("{} no change", count(Outcome::NoClearChange)));
            parts.push(format!("{} inconclusive", count(Outcome::Inconclusive)));
        }
    }
    for (o, word) in [(Outcome::Incomplete, "incomplete"), (Outcome::Unavailable, "unavailable")] {
        if count(o) > 0 {
            parts.push(format!("{} {word}", count(o)));
        }
    }
    let _ = writeln!(out, "<p class=\"summary\">Overall: {}.</p>", parts.join(" · "));
    let findings = cpu_findings(defs, comparisons);
    if !findings.is_empty() {
        let _ = writeln!(out, "<p class=\"summary\">CPU time: {}.</p>", esc(&findings.join("; ")));
    }
    if report.status != super::Status::Completed && report.status != super::Status::Running {
        let _ = writeln!(
            out,
            "<p><strong>Benchmark execution did not complete successfully. Missing measurements are not performance wins.</strong></p>"
        );
    }
    if let Some(usd) = report.total_cost_usd() {
        let _ = writeln!(out, "<p>Sandbox cost: ~${usd:.4}</p>");
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out, "<h2>Warnings</h2>\n<ul class=\"warnings\">");
        for w in &report.warnings {
            let _ = writeln!(out, "<li>{}</li>", esc(w));
        }
        let _ = writeln!(out, "</ul>");
    }
    let errors = report.all_errors();
    if !errors.is_empty() {
        let _ = writeln!(out, "<h2>Failures</h2>\n<ul class=\"errors\">");
        for e in errors.iter().take(MAX_FAILURES_LISTED) {
            let _ = writeln!(out, "<li>{}</li>", esc(e));
        }
        if errors.len() > MAX_FAILURES_LISTED {
            let _ = writeln!(out, "<li>… and {} more</li>", errors.len() - MAX_FAILURES_LISTED);
        }
        let _ = writeln!(out, "</ul>");
    }
}

fn outcome_word(o: Outcome, rule: Rule) -> &'static str {
    match (o, rule) {
        (Outcome::Regressed, _) => "regressed",
        (Outcome::Improved, _) => "improved",
        (Outcome::NoClearChange, Rule::Reference) => "no clear change",
        (Outcome::NoClearChange, Rule::Paired) => "no change",
        (Outcome::Inconclusive, _) => "inconclusive",
        (Outcome::Incomplete, _) => "incomplete",
        (Outcome::Unavailable, _) => "unavailable",
    }
}

fn metric(out: &mut String, report: &Report, def: &MetricDef, cmp: &MetricComparison) {
    let class = match cmp.outcome() {
        Outcome::Regressed => "regressed",
        Outcome::Improved => "improved",
        _ => "neutral",
    };
    let Cell { text, .. } = match report.rule {
        Rule::Reference => change_cell(&cmp.comparison, def, &def.unit),
        Rule::Paired => decision_cell(&cmp.comparison, &cmp.paired, def, &def.unit),
    };
    let word = outcome_word(cmp.outcome(), report.rule);
    let verdict = if text.contains(word) { text } else { format!("{word}: {text}") };
    let _ = writeln!(
        out,
        "<section class=\"metric\" data-metric=\"{}\"><h2>{} <small class=\"neutral\">({})</small></h2>\n<p class=\"verdict {class}\">{}</p>",
        esc(&def.key),
        esc(&def.title),
        esc(&def.group),
        esc(&verdict)
    );
    let floor = (report.rule == Rule::Paired).then_some(cmp.paired.floor);
    out.push_str(&chart(
        def,
        report.base_side.metrics.get(&def.key),
        report.head_side.metrics.get(&def.key),
        cmp.comparison.base_median,
        floor,
    ));
    let median = |m: Option<f64>| m.map_or("—".to_string(), |v| esc(&value(v, def)));
    let _ = writeln!(
        out,
        "<table><tr><th></th><th>median</th><th>successful/attempted</th></tr>\n<tr><td>base</td><td>{}</td><td>{}/{}</td></tr>\n<tr><td>head</td><td>{}</td><td>{}/{}</td></tr></table>",
        median(cmp.comparison.base_median),
        cmp.base_successful,
        cmp.base_attempted,
        median(cmp.comparison.head_median),
        cmp.head_successful,
        cmp.head_attempted
    );
    let p = &cmp.paired;
    let pct = |x: f64| format!("{}{:.2}%", if x >= 0.0 { "+" } else { "-" }, (x * 100.0).abs());
    let interval = p.interval.map_or("—".to_string(), |(lo, hi)| format!("{} … {}", pct(lo), pct(hi)));
    let confidence = p.confidence.map_or("95%".to_string(), |c| format!("{:.2}%", c * 100.0));
    let mde = p.mde.filter(|m| m.is_finite()).map_or("—".to_string(), |m| format!("{:.2}%", m * 100.0));
    let _ = writeln!(
        out,
        "<p class=\"numbers\">Paired: {} pairs{}, estimate {}, {confidence} interval {interval}, floor ±{:.2}%, minimum detectable effect {mde}; {}.</p>",
        p.pairs,
        if p.dropped > 0 { format!(" ({} dropped: zero or negative)", p.dropped) } else { String::new() },
        p.estimate.map_or("—".to_string(), pct),
        p.floor * 100.0,
        esc(&p.method)
    );
    if !cmp.notes.is_empty() || !cmp.warnings.is_empty() {
        let _ = writeln!(out, "<ul class=\"notes\">");
        for n in cmp.notes.iter().chain(&cmp.warnings) {
            let _ = writeln!(out, "<li>{}</li>", esc(n));
        }
        let _ = writeln!(out, "</ul>");
    }
    runs_table(out, def, cmp);
    out.push_str("</section>\n");
}

/// Min, median and max of each trial measured in several runs.
fn runs_table(out: &mut String, def: &MetricDef, cmp: &MetricComparison) {
    if cmp.runs.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<table class=\"runs\"><caption>Runs per trial (a trial's value is their median)</caption><tr><th>side</th><th>trial</th><th>runs</th><th>min</th><th>median</th><th>max</th></tr>"
    );
    for r in &cmp.runs {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.side),
            r.trial,
            r.runs,
            esc(&value(r.min, def)),
            esc(&value(r.median, def)),
            esc(&value(r.max, def))
        );
    }
    let _ = writeln!(out, "</table>");
}

/// The axis: every sample, and at least ±max(floor, 5 %) around the base median.
fn axis(values: &[f64], base_median: Option<f64>, floor: Option<f64>) -> (f64, f64) {
    let (mut min, mut max) =
        values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    if let Some(m) = base_median.filter(|m| m.is_finite() && *m != 0.0) {
        let half = m.abs() * floor.unwrap_or(0.0).max(MIN_HALF_SPAN);
        min = min.min(m - half);
        max = max.max(m + half);
    }
    if !min.is_finite() || !max.is_finite() {
        return (0.0, 1.0);
    }
    if max > min { (min, max) } else { (min - 0.5 * min.abs().max(1e-9), max + 0.5 * max.abs().max(1e-9)) }
}

/// A strip plot: one row per side, a dot per sample, a bar at the median, the floor shaded
/// around the base median.
fn chart(
    def: &MetricDef,
    base: Option<&Vec<Sample>>,
    head: Option<&Vec<Sample>>,
    base_median: Option<f64>,
    floor: Option<f64>,
) -> String {
    let values = |s: Option<&Vec<Sample>>| -> Vec<f64> {
        s.map(|v| v.iter().filter_map(|x| x.value).filter(|v| v.is_finite()).collect()).unwrap_or_default()
    };
    let (b, h) = (values(base), values(head));
    let all: Vec<f64> = b.iter().chain(&h).copied().collect();
    let (min, max) = axis(&all, base_median, floor);
    let x = |v: f64| LEFT + (v - min) / (max - min) * (WIDTH - LEFT - RIGHT);
    let height = ROW * 2.0 + 24.0;
    let mut svg = format!(
        "<svg role=\"img\" aria-label=\"{} samples\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" xmlns=\"http://www.w3.org/2000/svg\">\n",
        esc(&def.title)
    );
    if let (Some(m), Some(f)) = (base_median, floor.filter(|f| *f > 0.0)) {
        let (lo, hi) = (x(m * (1.0 - f)), x(m * (1.0 + f)));
        let _ = writeln!(
            svg,
            "<rect x=\"{:.1}\" y=\"4\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#ddf4ff\"><title>floor ±{:.2}% around the base median</title></rect>",
            lo.min(hi),
            (hi - lo).abs(),
            ROW * 2.0,
            f * 100.0
        );
    }
    for (row, (label, samples, colour)) in
        [(Side::Base, &b, "#57606a"), (Side::Head, &h, "#0969da")].into_iter().enumerate()
    {
        let y = ROW * row as f64 + ROW / 2.0 + 4.0;
        let _ = writeln!(svg, "<text x=\"4\" y=\"{:.1}\" font-size=\"12\">{label}</text>", y + 4.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d0d7de\"/>",
            WIDTH - RIGHT
        );
        for v in samples.iter() {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{colour}\" fill-opacity=\"0.6\"/>",
                x(*v)
            );
        }
        if let Some(m) = crate::stats::median(samples) {
            let _ = writeln!(
                svg,
                "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/>",
                x(m),
                y - 10.0,
                y + 10.0
            );
        }
    }
    let axis_y = ROW * 2.0 + 16.0;
    let _ = writeln!(svg, "<text x=\"{LEFT}\" y=\"{axis_y}\" font-size=\"11\">{}</text>", esc(&value(min, def)));
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{axis_y}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
        WIDTH - RIGHT,
        esc(&value(max, def))
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_spreads_stay_small_on_the_axis() {
        // Samples within 0.4 % of 100: the axis spans at least ±5 %, so they fill < 10 % of it.
        let (min, max) = axis(&[99.8, 100.0, 100.2], Some(100.0), Some(0.02));
        assert!(min <= 95.0 && max >= 105.0, "{min} {max}");
        // A wider floor widens it; samples outside still fit.
        let (min, max) = axis(&[80.0, 100.0], Some(100.0), Some(0.3));
        assert!(min <= 70.0 && max >= 130.0, "{min} {max}");
        let (min, max) = axis(&[10.0, 300.0], Some(100.0), None);
        assert!(min <= 10.0 && max >= 300.0);
        assert_eq!(axis(&[], None, None), (0.0, 1.0));
    }
}
