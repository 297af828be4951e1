//! `report.html`: one self-contained page (no script, no external request) showing, per metric,
//! both distributions as a strip plot with their medians, the verdict and the numbers.

use std::fmt::Write;

use sandbench_proto::Side;

use super::format::{change, value};
use super::{Report, Sample};
use crate::spec::MetricDef;
use crate::stats::{Outcome, Verdict};

const WIDTH: f64 = 640.0;
const ROW: f64 = 34.0;
const LEFT: f64 = 60.0;

fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn render(report: &Report) -> String {
    let comparisons = report.analyze();
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} performance — {}</title>\n<style>\n\
         body{{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#1f2328;padding:0 1em}}\n\
         h1{{font-size:1.4em}} .metric{{border:1px solid #d0d7de;border-radius:6px;padding:.8em 1em;margin:1em 0}}\n\
         .metric h2{{font-size:1.05em;margin:0 0 .3em}} .verdict{{font-weight:600}}\n\
         .regressed{{color:#cf222e}} .improved{{color:#1a7f37}} .neutral{{color:#57606a}}\n\
         table{{border-collapse:collapse}} td,th{{padding:.15em .6em;text-align:right}} td:first-child,th:first-child{{text-align:left}}\n\
         .errors li{{font-family:ui-monospace,monospace;font-size:12px}}\n</style></head><body>\n",
        esc(&report.spec_name),
        report.status.as_str()
    );
    let _ = writeln!(
        out,
        "<h1>{} performance — {}</h1>\n<p>Head <code>{}</code> compared with base <code>{}</code> on <code>{}</code>; run <code>{}</code>.</p>",
        esc(&report.spec_name),
        report.status.as_str(),
        esc(&report.head.commit),
        esc(&report.base.commit),
        esc(&report.image),
        esc(&report.run_id)
    );
    if let Some(usd) = report.total_cost_usd() {
        let _ = writeln!(out, "<p>Sandbox cost: ~${usd:.4}</p>");
    }
    if !report.errors.is_empty() {
        let _ = writeln!(out, "<ul class=\"errors\">");
        for e in &report.errors {
            let _ = writeln!(out, "<li>{}</li>", esc(e));
        }
        let _ = writeln!(out, "</ul>");
    }
    for (def, cmp) in report.metrics.iter().zip(&comparisons) {
        let class = match cmp.comparison.outcome {
            Outcome::Regressed => "regressed",
            Outcome::Improved => "improved",
            _ => "neutral",
        };
        let outcome = match cmp.comparison.outcome {
            Outcome::Regressed => "regressed",
            Outcome::Improved => "improved",
            Outcome::NoClearChange => "no clear change",
            Outcome::Incomplete => "incomplete",
            Outcome::Unavailable => "unavailable",
        };
        let paired = match cmp.paired.verdict {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::NoChange => "no change",
            Verdict::Inconclusive => "inconclusive",
            Verdict::TooFewPairs => "too few pairs",
        };
        let change = change(&cmp.comparison, def);
        let change = if change.starts_with('$') {
            // The MathJax form is for GitHub; the page shows the text inside it.
            change.split("\\textsf{").nth(1).and_then(|s| s.split("}}").next()).unwrap_or_default().replace("\\%", "%")
        } else {
            change
        };
        let _ = writeln!(
            out,
            "<section class=\"metric\" data-metric=\"{}\"><h2>{} <small class=\"neutral\">({})</small></h2>\n<p class=\"verdict {class}\">{outcome}: {}; paired verdict {paired}</p>",
            esc(&def.key),
            esc(&def.title),
            esc(&def.group),
            esc(&change)
        );
        out.push_str(&chart(def, report.base_side.metrics.get(&def.key), report.head_side.metrics.get(&def.key)));
        let median = |m: Option<f64>| m.map_or("—".to_string(), |v| value(v, def));
        let _ = writeln!(
            out,
            "<table><tr><th></th><th>median</th><th>successful/attempted</th></tr>\n<tr><td>base</td><td>{}</td><td>{}/{}</td></tr>\n<tr><td>head</td><td>{}</td><td>{}/{}</td></tr></table></section>",
            median(cmp.comparison.base_median),
            cmp.base_successful,
            cmp.base_attempted,
            median(cmp.comparison.head_median),
            cmp.head_successful,
            cmp.head_attempted
        );
    }
    out.push_str("</body></html>\n");
    out
}

/// A strip plot: one row per side, a dot per sample, a bar at the median.
fn chart(def: &MetricDef, base: Option<&Vec<Sample>>, head: Option<&Vec<Sample>>) -> String {
    let values = |s: Option<&Vec<Sample>>| -> Vec<f64> {
        s.map(|v| v.iter().filter_map(|x| x.value).collect()).unwrap_or_default()
    };
    let (b, h) = (values(base), values(head));
    let all: Vec<f64> = b.iter().chain(&h).copied().collect();
    let (min, max) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    let (min, max) = if all.is_empty() {
        (0.0, 1.0)
    } else if max > min {
        (min, max)
    } else {
        (min - 0.5 * min.abs().max(1e-9), max + 0.5 * max.abs().max(1e-9))
    };
    let x = |v: f64| LEFT + (v - min) / (max - min) * (WIDTH - LEFT - 20.0);
    let height = ROW * 2.0 + 24.0;
    let mut svg = format!(
        "<svg role=\"img\" aria-label=\"{} samples\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" xmlns=\"http://www.w3.org/2000/svg\">\n",
        esc(&def.title)
    );
    for (row, (label, samples, colour)) in
        [(Side::Base, &b, "#57606a"), (Side::Head, &h, "#0969da")].into_iter().enumerate()
    {
        let y = ROW * row as f64 + ROW / 2.0 + 4.0;
        let _ = writeln!(svg, "<text x=\"4\" y=\"{:.1}\" font-size=\"12\">{label}</text>", y + 4.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d0d7de\"/>",
            WIDTH - 20.0
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
        WIDTH - 20.0,
        esc(&value(max, def))
    );
    svg.push_str("</svg>\n");
    svg
}
