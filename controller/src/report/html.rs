//! `report.html`: one self-contained page (no script, no external request). At the top the
//! summary (the headline's counts, the CPU-time findings, the status, cost, warnings and
//! failures), what the run could not resolve, and an overview: one chart with a row per metric
//! (a forest plot) — the estimate of head/base − 1 and its interval against the ±floor band, on
//! one log scale, changed metrics first, then the others by group, each row linking to its card.
//! Below, the cards in the same order: per metric the decision, both distributions as a strip
//! plot with their medians and the floor drawn around the base median, and the numbers. Readable
//! at 1280 px and on a phone (the overview's rows wrap, the charts shrink). Every text from a
//! spec, a revision or a sandbox is escaped.

use std::fmt::Write;

use sandbench_proto::Side;

use super::format::{Cell, change_cell, decision_cell, percent, value};
use super::markdown::cpu_findings;
use super::summary::{self, Row};
use super::{MetricComparison, Report, Rule, Sample, warnings};
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
/// The overview's scale spans at least ×1.1 and at most ×3 either way (log of head/base); an
/// interval beyond is drawn to the edge with an arrow.
const MIN_SPAN: f64 = 1.1;
const MAX_SPAN: f64 = 3.0;

/// Untrusted text made inert in HTML text and quoted attributes, without escape sequences or
/// control characters.
pub(crate) fn esc(text: &str) -> String {
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
    let rows = summary::rows(&defs, &comparisons);
    let order = summary::overview(&rows);
    let mut out = String::new();
    head(&mut out, report);
    headline(&mut out, report, &defs, &comparisons);
    overview(&mut out, report, &order);
    failures(&mut out, report);
    unresolved(&mut out, &rows);
    warnings(&mut out, report, &comparisons);
    instructions(&mut out, report, &comparisons);
    for row in &order {
        metric(&mut out, report, row);
    }
    out.push_str("</body></html>\n");
    out
}

const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#1f2328;padding:0 1em}
h1{font-size:1.4em;overflow-wrap:anywhere} h2{font-size:1.15em} .metric{border:1px solid #d0d7de;border-radius:6px;padding:.8em 1em;margin:1em 0}
.metric h2{font-size:1.05em;margin:0 0 .3em;overflow-wrap:anywhere} .verdict{font-weight:600} .summary{font-weight:600}
.regressed{color:#cf222e} .improved{color:#1a7f37} .neutral{color:#57606a}
table{border-collapse:collapse} td,th{padding:.15em .6em;text-align:right} td:first-child,th:first-child{text-align:left}
.metric table,.wide{display:block;overflow-x:auto;max-width:100%} .wide td:last-child{text-align:left} svg{max-width:100%;height:auto}
.errors li,.warnings li{font-family:ui-monospace,monospace;font-size:12px;overflow-wrap:anywhere} .notes{font-size:12px;color:#57606a}
.forest{margin:.5em 0 1.5em} .legend{font-size:12px;color:#57606a}
.forest .part{font-weight:600;margin:.8em 0 .2em;border-bottom:1px solid #d0d7de}
.forest .row{display:grid;grid-template-columns:18em minmax(8em,1fr) 17em;gap:.1em .8em;align-items:center;padding:.15em 0;text-decoration:none;color:#1f2328}
.forest a.row:hover{background:#f6f8fa}
.forest .name{overflow:hidden;text-overflow:ellipsis;white-space:nowrap} .forest .lens{font-size:11px;color:#57606a}
.forest .num{font-variant-numeric:tabular-nums;font-size:12px;white-space:nowrap} .forest .num small{color:#57606a}
.track{position:relative;height:16px;margin:0 10px}
.track .zero{position:absolute;left:50%;top:0;bottom:0;border-left:1px solid #8c959f}
.track .band{position:absolute;top:2px;bottom:2px;background:#ddf4ff;border:1px solid #b6e3ff;box-sizing:border-box}
.track .ci{position:absolute;top:7px;height:3px;background:currentColor}
.track .ci.clip-lo::before,.track .ci.clip-hi::after{content:\"\";position:absolute;top:-4px;border:5.5px solid transparent}
.track .ci.clip-lo::before{left:-9px;border-right:7px solid currentColor;border-left-width:0}
.track .ci.clip-hi::after{right:-9px;border-left:7px solid currentColor;border-right-width:0}
.track .dot{position:absolute;top:3px;width:10px;height:10px;margin-left:-5px;border-radius:50%;background:currentColor}
.axis .track{height:14px;font-size:11px;color:#57606a} .axis .tick{position:absolute;transform:translateX(-50%);white-space:nowrap}
.forest .o-regressed{color:#cf222e} .forest .o-improved{color:#1a7f37} .forest .o-no-change,.forest .o-no-clear-change{color:#57606a}
.forest .o-inconclusive{color:#9a6700} .forest .o-incomplete,.forest .o-unavailable{color:#8250df}
.forest .row .name{color:#1f2328}
@media (max-width:640px){
 body{margin:1em auto;padding:0 .6em}
 .forest .row{grid-template-columns:minmax(0,1fr) auto}
 .forest .row .track{grid-column:1 / -1;order:3} .forest .num small{display:none}
 .forest .axis span:empty{display:none}
}
";

fn head(out: &mut String, report: &Report) {
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{} performance — {}</title>\n<style>\n{STYLE}</style></head><body>\n",
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

/// The overall line, the CPU-time findings, the status and the cost.
fn headline(out: &mut String, report: &Report, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    let _ = writeln!(out, "<p class=\"summary\">Overall: {}.</p>", summary::counts(report.rule, comparisons));
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
    if let Some(words) = super::instructions::cost_words(report) {
        let _ = writeln!(out, "<p class=\"notes\">{}</p>", esc(&words));
    }
}

/// Where the instructions went, for every lens metric that changed.
fn instructions(out: &mut String, report: &Report, comparisons: &[MetricComparison]) {
    let steps = super::instructions::changed_steps(report, comparisons);
    let rows = super::instructions::rows(&steps);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h2 id=\"instructions\">Where the instructions went</h2>\n<p class=\"notes\">For each step whose counts changed, the {} functions whose own instruction counts changed most, per run (JIT code grouped as one entry).</p>\n<table class=\"wide\"><tr><th>Step</th><th>Function</th><th>Base</th><th>Head</th><th>Change</th></tr>",
        super::instructions::SHOWN
    );
    for [step, name, base, head, change] in rows {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td><code>{}</code></td><td>{base}</td><td>{head}</td><td>{change}</td></tr>",
            esc(&step),
            esc(&name)
        );
    }
    let _ = writeln!(out, "</table>");
}

/// The warnings, as the comment groups them.
fn warnings(out: &mut String, report: &Report, comparisons: &[MetricComparison]) {
    let groups = warnings::groups(report, comparisons);
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(out, "<h2>Warnings</h2>");
    for group in groups {
        let _ = writeln!(out, "<p>{}:</p>\n<ul class=\"warnings\">", esc(group.title));
        for w in &group.items {
            let _ = writeln!(out, "<li>{}</li>", esc(w));
        }
        let _ = writeln!(out, "</ul>");
        if let Some(footer) = group.footer {
            let _ = writeln!(out, "<p class=\"notes\">{}</p>", esc(footer));
        }
    }
}

/// The run's errors and failed samples.
fn failures(out: &mut String, report: &Report) {
    let errors = report.all_errors();
    if errors.is_empty() {
        return;
    }
    let _ = writeln!(out, "<h2>Failures</h2>\n<ul class=\"errors\">");
    for e in errors.iter().take(MAX_FAILURES_LISTED) {
        let _ = writeln!(out, "<li>{}</li>", esc(e));
    }
    if errors.len() > MAX_FAILURES_LISTED {
        let _ = writeln!(out, "<li>… and {} more</li>", errors.len() - MAX_FAILURES_LISTED);
    }
    let _ = writeln!(out, "</ul>");
}

/// What the run could not resolve, as the comment says it.
fn unresolved(out: &mut String, rows: &[Row]) {
    let found = summary::unresolved(rows);
    if found.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h2>Not resolved</h2>\n<p>{} inconclusive metric{} could not tell a change of {} floor from noise.</p>\n<table class=\"wide\"><tr><th>metric</th><th>floor</th><th>could see</th><th>to reach the floor</th></tr>",
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        if found.len() == 1 { "its" } else { "their" }
    );
    for u in &found {
        let p = &u.row.cmp.paired;
        let pairs = u.pairs_needed.map(|n| format!("≈ {} pairs (this run: {})", summary::about(n), p.pairs));
        let lens =
            u.other_lens.map(|o| format!("its {} lens: {}", o.lens.name(), summary::word(o.outcome(), Rule::Paired)));
        let reach = [pairs, lens].into_iter().flatten().collect::<Vec<_>>().join(", or ");
        let _ = writeln!(
            out,
            "<tr><td><a href=\"#metric-{}\">{}</a> <small class=\"neutral\">{}</small></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            u.row.index,
            esc(&u.row.def.title),
            u.row.lens.name(),
            summary::plus_minus(p.floor),
            summary::plus_minus(u.resolution),
            if reach.is_empty() { "—".to_string() } else { reach }
        );
    }
    let _ = writeln!(out, "</table>");
}

/// The class of an outcome: `o-regressed`, `o-no-change`, ….
fn outcome_class(o: Outcome, rule: Rule) -> String {
    format!("o-{}", summary::word(o, rule).replace(' ', "-"))
}

/// The overview's half span, as a log ratio: every interval, estimate and floor, within bounds.
fn span(rows: &[Row]) -> f64 {
    let log = |x: f64| if 1.0 + x > 0.0 { (1.0 + x).ln().abs() } else { f64::INFINITY };
    let mut span = MIN_SPAN.ln();
    for r in rows {
        let p = &r.cmp.paired;
        let ends = p.interval.map_or(Vec::new(), |(lo, hi)| vec![lo, hi]);
        for v in ends.into_iter().chain(p.estimate).chain([p.floor]) {
            span = span.max(log(v));
        }
    }
    span.min(MAX_SPAN.ln())
}

/// Where head/base − 1 = `x` sits on the overview's scale, in percent of its width.
fn at(x: f64, span: f64) -> f64 {
    let l = if 1.0 + x > 0.0 { (1.0 + x).ln() } else { f64::NEG_INFINITY };
    (50.0 + 50.0 * l / span).clamp(0.0, 100.0)
}

/// Ticks of the scale that do not crowd each other, 0 first.
fn ticks(span: f64) -> Vec<f64> {
    const CANDIDATES: [f64; 15] =
        [0.0, -0.02, 0.02, -0.05, 0.05, -0.1, 0.1, -0.2, 0.25, -0.33, 0.5, -0.5, 1.0, -0.67, 2.0];
    let mut kept: Vec<f64> = Vec::new();
    for t in CANDIDATES {
        let x = at(t, span);
        let fits = (1.0 + t).ln().abs() <= span + 1e-9;
        let room = kept.iter().all(|k| (at(*k, span) - x).abs() >= 12.0);
        if (fits && x > 3.0 && x < 97.0 || t == 0.0) && room {
            kept.push(t);
        }
    }
    kept.sort_by(f64::total_cmp);
    kept
}

/// The forest plot: a row per metric in the overview's order, under a heading per part.
fn overview(out: &mut String, report: &Report, order: &[Row]) {
    if order.is_empty() {
        return;
    }
    let span = span(order);
    let _ = writeln!(
        out,
        "<h2>Overview</h2>\n<p class=\"legend\">Each row is head/base − 1 of one metric: the dot its estimate, the bar its interval, the shaded band ± its floor, on one log scale (bars beyond ×{MAX_SPAN} either way end in an arrow). A row links to its card.</p>\n<div class=\"forest\" role=\"list\">"
    );
    let ticks: String = ticks(span)
        .iter()
        .map(|t| format!("<span class=\"tick\" style=\"left:{:.2}%\">{}</span>", at(*t, span), tick_label(*t)))
        .collect();
    let axis = format!(
        "<div class=\"row axis\" aria-hidden=\"true\"><span></span><span class=\"track\">{ticks}</span><span></span></div>"
    );
    let mut part: Option<String> = None;
    for row in order {
        let name = if summary::changed(row.outcome()) { "Changed".to_string() } else { row.def.group.clone() };
        if part.as_ref() != Some(&name) {
            let _ = writeln!(out, "<div class=\"part\">{}</div>\n{axis}", esc(&name));
            part = Some(name);
        }
        forest_row(out, report, row, span);
    }
    let _ = writeln!(out, "</div>");
}

fn tick_label(t: f64) -> String {
    if t == 0.0 { "0".to_string() } else { format!("{}{:.0}%", if t > 0.0 { "+" } else { "−" }, (t * 100.0).abs()) }
}

fn forest_row(out: &mut String, report: &Report, row: &Row, span: f64) {
    let p = &row.cmp.paired;
    let outcome = row.outcome();
    let mut track = String::from("<span class=\"zero\"></span>");
    if p.floor > 0.0 {
        let (lo, hi) = (at(-p.floor, span), at(p.floor, span));
        let _ = write!(track, "<span class=\"band\" style=\"left:{lo:.2}%;width:{:.2}%\"></span>", hi - lo);
    }
    if let Some((lo, hi)) = p.interval {
        let (a, b) = (at(lo, span), at(hi, span));
        let clip = match (a <= 0.0, b >= 100.0) {
            (true, true) => " clip-lo clip-hi",
            (true, false) => " clip-lo",
            (false, true) => " clip-hi",
            _ => "",
        };
        let _ = write!(track, "<span class=\"ci{clip}\" style=\"left:{a:.2}%;width:{:.2}%\"></span>", (b - a).max(0.3));
    }
    if let Some(e) = p.estimate {
        let _ = write!(track, "<span class=\"dot\" style=\"left:{:.2}%\"></span>", at(e, span));
    }
    let interval = p
        .interval
        .map_or(String::new(), |(lo, hi)| format!(" <small>({} … {})</small>", percent(Some(lo)), percent(Some(hi))));
    let word = summary::word(outcome, report.rule);
    let _ = writeln!(
        out,
        "<a class=\"row {}\" role=\"listitem\" href=\"#metric-{}\" data-metric=\"{}\" data-outcome=\"{word}\"><span class=\"name\" title=\"{}\">{} <span class=\"lens\">{}</span></span><span class=\"track\">{track}</span><span class=\"num\">{word} {}{interval}</span></a>",
        outcome_class(outcome, report.rule),
        row.index,
        esc(&row.def.key),
        esc(&row.def.title),
        esc(&row.def.title),
        row.lens.name(),
        p.estimate.map_or("—".to_string(), |e| percent(Some(e))),
    );
}

fn metric(out: &mut String, report: &Report, row: &Row) {
    let (def, cmp) = (row.def, row.cmp);
    let class = match cmp.outcome() {
        Outcome::Regressed => "regressed",
        Outcome::Improved => "improved",
        _ => "neutral",
    };
    let Cell { text, .. } = match report.rule {
        Rule::Reference => change_cell(&cmp.comparison, def, &def.unit),
        Rule::Paired => decision_cell(&cmp.comparison, &cmp.paired, def, &def.unit),
    };
    let word = summary::word(cmp.outcome(), report.rule);
    let verdict = if text.contains(word) { text } else { format!("{word}: {text}") };
    let _ = writeln!(
        out,
        "<section class=\"metric\" id=\"metric-{}\" data-metric=\"{}\"><h2>{} <small class=\"neutral\">({}, {}{})</small></h2>\n<p class=\"verdict {class}\">{}</p>",
        row.index,
        esc(&def.key),
        esc(&def.title),
        esc(&def.group),
        row.lens.name(),
        if def.better.is_lower() { "" } else { ", higher is better" },
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
    let sees = summary::resolution(p)
        .map_or(String::new(), |r| format!(", smallest change it could see {}", summary::plus_minus(r)));
    let _ = writeln!(
        out,
        "<p class=\"numbers\">Paired: {} pairs{}, estimate {}, {confidence} interval {interval}, floor ±{:.2}%, minimum detectable effect {mde}{sees}; {}.</p>",
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
