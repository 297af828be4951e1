//! `history.html`: one self-contained page (no script, no external request), readable at a glance.
//! At the top how many change points and a list of them linking to their charts; then one small
//! chart per series, grouped as the report groups its metrics: values by commit (each commit's
//! median as a dot, its trials as faint dots), for measured values the band of each stretch
//! between change points (its level ± the floor: the noise a value stays in), for counts the
//! level, and each change point marked between its two commits. Every commit is at the same
//! place in every chart. Every text from a spec, a revision or a sandbox is escaped.

use std::fmt::Write;

use super::analysis::{History, MetricHistory};
use super::markdown::def_of;
use super::series::Kind;
use crate::report::format::value;

const WIDTH: f64 = 320.0;
const HEIGHT: f64 = 130.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 22.0;

/// Untrusted text made inert in HTML text and quoted attributes.
fn esc(text: &str) -> String {
    crate::sanitize::terminal(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#1f2328;padding:0 1em}
h1{font-size:1.4em;overflow-wrap:anywhere} h2{font-size:1.1em;border-bottom:1px solid #d0d7de;margin-top:1.5em}
.summary{font-weight:600} .notes{font-size:12px;color:#57606a} .changes li{overflow-wrap:anywhere}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(19em,1fr));gap:.8em}
.metric{border:1px solid #d0d7de;border-radius:6px;padding:.5em .7em;min-width:0}
.metric h3{font-size:.95em;margin:0;overflow-wrap:anywhere} .metric .lens{font-size:11px;color:#57606a;font-weight:400}
.metric .where,.metric .numbers{font-size:11px;color:#57606a;margin:.1em 0;overflow-wrap:anywhere}
.metric.changed{border-color:#cf222e}
svg{width:100%;height:auto;display:block}
.band{fill:#ddf4ff;stroke:#b6e3ff} .level{stroke:#0969da;stroke-width:1} .trial{fill:#8c959f;opacity:.45}
.point{fill:#1f2328} .change{stroke:#cf222e;stroke-width:1.5;stroke-dasharray:4 3} .axis{font-size:10px;fill:#57606a}
.frame{fill:none;stroke:#d0d7de}
@media (max-width:640px){body{margin:1em auto;padding:0 .6em} .grid{grid-template-columns:1fr}}
";

pub fn render(history: &History) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{} — history</title>\n<style>\n{STYLE}</style></head><body>\n<h1>{} — history</h1>\n",
        esc(&history.spec),
        esc(&history.spec)
    );
    summary(&mut out, history);
    let mut group: Option<&str> = None;
    for (i, metric) in history.metrics.iter().enumerate() {
        if group != Some(metric.group.as_str()) {
            if group.is_some() {
                out.push_str("</div>\n");
            }
            let _ = writeln!(out, "<h2 class=\"group\">{}</h2>\n<div class=\"grid\">", esc(&metric.group));
            group = Some(&metric.group);
        }
        card(&mut out, history, i, metric);
    }
    if group.is_some() {
        out.push_str("</div>\n");
    }
    out.push_str("</body></html>\n");
    out
}

/// The counts, the order of the commits, and the change points as links to their charts.
fn summary(out: &mut String, history: &History) {
    let changes: usize = history.metrics.iter().map(|m| m.change_points.len()).sum();
    let _ = writeln!(
        out,
        "<p class=\"summary\">{changes} change point{} in {} series over {} recorded commits.</p>",
        if changes == 1 { "" } else { "s" },
        history.metrics.len(),
        history.commits.len()
    );
    let order = match &history.line {
        Some(line) => format!("Commits on the first-parent line of <code>{}</code>", esc(&line.rev)),
        None => "Commits ordered by commit time".to_string(),
    };
    let _ = writeln!(
        out,
        "<p class=\"notes\">{order}. Bands: each stretch's level ± the metric's floor (measured values, per machine and setting). Change points: E-Divisive means with Student's t at p ≤ {} (corrected for the splits tried) beyond the floor; counts: an exact step beyond the count's floor.</p>",
        history.alpha
    );
    if changes == 0 {
        return;
    }
    out.push_str("<ul class=\"changes\">\n");
    for (i, metric) in history.metrics.iter().enumerate() {
        let def = def_of(metric);
        for c in &metric.change_points {
            let first_bad = c.bisection.as_ref().and_then(|b| b.first_bad.as_ref()).map_or(String::new(), |f| {
                format!("; first bad commit <code>{}</code> {}", esc(short(&f.commit)), esc(&f.subject))
            });
            let _ = writeln!(
                out,
                "<li><a href=\"#m-{i}\">{}</a> <span class=\"notes\">{}</span>: {:+.2} % ({} → {}) between <code>{}</code> and <code>{}</code>{first_bad}</li>",
                esc(&metric.title),
                esc(&metric.lens),
                c.size * 100.0,
                esc(&value(c.before, &def)),
                esc(&value(c.after, &def)),
                esc(short(&c.before_commit)),
                esc(short(&c.after_commit))
            );
        }
    }
    out.push_str("</ul>\n");
}

/// One series' card: title, where it was measured, the chart and its numbers.
fn card(out: &mut String, history: &History, i: usize, metric: &MetricHistory) {
    let def = def_of(metric);
    let kind = match metric.kind {
        Kind::Count => "count",
        Kind::Measured => "measured",
    };
    let _ = writeln!(
        out,
        "<section class=\"metric{}\" id=\"m-{i}\" data-key=\"{}\" data-kind=\"{kind}\" data-points=\"{}\" data-changes=\"{}\">",
        if metric.change_points.is_empty() { "" } else { " changed" },
        esc(&metric.key),
        metric.points.len(),
        metric.change_points.len()
    );
    let unit = if metric.unit.is_empty() { String::new() } else { format!(" · {}", esc(&metric.unit)) };
    let _ = writeln!(out, "<h3>{} <span class=\"lens\">{}{unit}</span></h3>", esc(&metric.title), esc(&metric.lens));
    let place = match (&metric.machine, &metric.setting) {
        (Some(m), Some(s)) => format!("{} on {} — {}", esc(&metric.image), esc(m), esc(s)),
        _ => format!("{} — any machine", esc(&metric.image)),
    };
    let _ = writeln!(out, "<p class=\"where\">{place}</p>");
    chart(out, history, metric);
    let latest = metric.points.iter().rev().find_map(|p| p.median).map_or("—".to_string(), |v| esc(&value(v, &def)));
    let changes: Vec<String> = metric
        .change_points
        .iter()
        .map(|c| format!("{:+.2} % at <code>{}</code>", c.size * 100.0, esc(short(&c.after_commit))))
        .collect();
    let _ = writeln!(
        out,
        "<p class=\"numbers\">latest {latest} · floor ±{:.2} % ({}) · {}</p>\n</section>",
        metric.floor * 100.0,
        esc(&metric.floor_source),
        if changes.is_empty() { "no change point".to_string() } else { changes.join(", ") }
    );
}

/// The chart: bands or levels per stretch, the trials and medians by commit, the change points.
fn chart(out: &mut String, history: &History, metric: &MetricHistory) {
    let def = def_of(metric);
    let values = metric.points.iter().flat_map(|p| p.values.iter().copied());
    let bands = metric.segments.iter().filter(|_| metric.kind == Kind::Measured).flat_map(|s| [s.low, s.high]);
    let (mut lo, mut hi) = values
        .chain(bands)
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.08).max(hi.abs().max(lo.abs()) * 0.005).max(f64::MIN_POSITIVE);
    (lo, hi) = (lo - pad, hi + pad);
    let commits = history.commits.len().max(1);
    let x = |at: usize| match commits {
        1 => (LEFT + WIDTH - RIGHT) / 2.0,
        n => LEFT + (WIDTH - LEFT - RIGHT) * at as f64 / (n - 1) as f64,
    };
    let y = |v: f64| TOP + (HEIGHT - TOP - BOTTOM) * (hi - v) / (hi - lo);
    let _ = writeln!(
        out,
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{} by commit\"><rect class=\"frame\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\"/>",
        esc(&metric.title),
        WIDTH - LEFT - RIGHT,
        HEIGHT - TOP - BOTTOM
    );
    for s in &metric.segments {
        let (from, to) = (x(metric.points[s.from].at), x(metric.points[s.to].at));
        let (x0, x1) = ((from - 4.0).max(LEFT), (to + 4.0).min(WIDTH - RIGHT));
        if metric.kind == Kind::Measured {
            let _ = writeln!(
                out,
                "<rect class=\"band\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>",
                y(s.high),
                x1 - x0,
                (y(s.low) - y(s.high)).max(0.5)
            );
        }
        let _ = writeln!(
            out,
            "<line class=\"level\" x1=\"{x0:.1}\" x2=\"{x1:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
            y(s.level),
            y(s.level)
        );
    }
    for c in &metric.change_points {
        let at = (x(c.before_at) + x(c.after_at)) / 2.0;
        let _ = writeln!(
            out,
            "<line class=\"change\" data-before=\"{}\" data-after=\"{}\" x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"{TOP}\" y2=\"{}\"><title>{:+.2} %</title></line>",
            esc(&c.before_commit),
            esc(&c.after_commit),
            HEIGHT - BOTTOM,
            c.size * 100.0
        );
    }
    for p in &metric.points {
        for v in &p.values {
            let _ = writeln!(out, "<circle class=\"trial\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.6\"/>", x(p.at), y(*v));
        }
        if let Some(m) = p.median {
            let subject = history.commits.get(p.at).map_or("", |c| c.subject.as_str());
            let _ = writeln!(
                out,
                "<circle class=\"point\" data-commit=\"{}\" data-at=\"{}\" data-value=\"{m}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\"><title>{} {}: {}</title></circle>",
                esc(&p.commit),
                p.at,
                x(p.at),
                y(m),
                esc(short(&p.commit)),
                esc(crate::sanitize::prefix(subject, 72)),
                esc(&value(m, &def))
            );
        }
    }
    axes(out, history, &def, (lo, hi));
    out.push_str("</svg>\n");
}

/// The values at the top and bottom of the chart (in the unit its title names), the first and
/// last commit below it.
fn axes(out: &mut String, history: &History, def: &crate::spec::MetricDef, (lo, hi): (f64, f64)) {
    let number =
        |v: f64| esc(&crate::report::format::number(v * def.scale, crate::report::format::precision(def), false));
    for (v, y) in [(hi, TOP + 8.0), (lo, HEIGHT - BOTTOM)] {
        let _ = writeln!(
            out,
            "<text class=\"axis\" x=\"{}\" y=\"{y}\" text-anchor=\"end\">{}</text>",
            LEFT - 3.0,
            number(v)
        );
    }
    if let (Some(first), Some(last)) = (history.commits.first(), history.commits.last()) {
        let _ = writeln!(
            out,
            "<text class=\"axis\" x=\"{LEFT}\" y=\"{}\">{}</text>",
            HEIGHT - 6.0,
            esc(short(&first.commit))
        );
        if history.commits.len() > 1 {
            let _ = writeln!(
                out,
                "<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                WIDTH - RIGHT,
                HEIGHT - 6.0,
                esc(short(&last.commit))
            );
        }
    }
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 8)
}
