//! `report.md`: the pull-request comment, in the reference harness's skeleton (§4.2): three
//! HTML markers, a title with the status, diagnostics, the overall line, grouped tables of exactly
//! four columns, the cost line, and a details section with the methodology and the samples.

use std::fmt::Write;

use sandbench_proto::Side;

use super::format::{change, escape, value};
use super::{MetricComparison, Report, Status};
use crate::stats::{Outcome, Verdict};

const MAX_ERRORS_SHOWN: usize = 3;
const MAX_FAILURES_LISTED: usize = 30;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let status = report.status.as_str();
    let _ = writeln!(out, "<!-- sandbench:v1 -->");
    let _ = writeln!(out, "<!-- run:{}:1 head:{} -->", report.run_id, report.head.commit);
    let _ = writeln!(out, "<!-- comparison:{} status:{status} -->", report.fingerprint());
    let _ = writeln!(out, "### {} performance — {status}\n", escape(&report.spec_name));
    let _ =
        writeln!(out, "Head `{}` compared with base `{}`.\n", short(&report.head.commit), short(&report.base.commit));
    if report.status == Status::Running {
        let _ = writeln!(out, "Benchmarking the head revision. Results will appear here when this run finishes.\n");
        let _ = writeln!(out, "Local run; raw results are stored beside this report.");
        return out;
    }
    let errors = all_errors(report);
    if report.status != Status::Completed {
        let _ = writeln!(
            out,
            "**Benchmark execution did not complete successfully. Missing measurements are not performance wins.**\n"
        );
    }
    if !errors.is_empty() {
        let _ = writeln!(out, "**Failure diagnostics:**\n");
        for e in errors.iter().take(MAX_ERRORS_SHOWN) {
            let _ = writeln!(out, "- {}", escape(e));
        }
        let _ = writeln!(out, "\nSee the saved per-trial logs and terminal transcripts for details.\n");
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out, "**Operational warnings — log collection or sandbox cleanup needs attention:**\n");
        for w in &report.warnings {
            let _ = writeln!(out, "- {}", escape(w));
        }
        let _ = writeln!(out, "\nThese warnings do not change measurement completeness.\n");
    }
    let comparisons = report.analyze();
    let _ = writeln!(out, "{}\n", overall(&comparisons));
    let mut groups: Vec<&str> = Vec::new();
    for def in &report.metrics {
        if !groups.contains(&def.group.as_str()) {
            groups.push(&def.group);
        }
    }
    for (i, group) in groups.iter().enumerate() {
        if i > 0 {
            let _ = writeln!(out, "**{}**\n", escape(group));
        }
        let _ = writeln!(out, "| Metric | Base | Head | Change |");
        let _ = writeln!(out, "| --- | ---: | ---: | ---: |");
        for (def, cmp) in report.metrics.iter().zip(&comparisons).filter(|(d, _)| d.group == *group) {
            let median = |m: Option<f64>| m.map_or("—".to_string(), |v| value(v, def));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                escape(&def.title),
                median(cmp.comparison.base_median),
                median(cmp.comparison.head_median),
                change(&cmp.comparison, def)
            );
        }
        let _ = writeln!(out);
    }
    match report.total_cost_usd() {
        Some(usd) => {
            let _ = writeln!(out, "**Sandbox cost: ~${usd:.4}**\n");
        }
        None => {
            let _ = writeln!(out, "Cost pending or unavailable; sandbox usage has not been collected.\n");
        }
    }
    let _ = writeln!(out, "Local run; raw results are stored beside this report.\n");
    details(&mut out, report, &comparisons, &errors);
    out
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(8)]
}

/// Run errors, then every failed sample, as `<side> <metric> trial <n>: <error>`.
fn all_errors(report: &Report) -> Vec<String> {
    let mut errors = report.errors.clone();
    for (label, side) in [(Side::Base, &report.base_side), (Side::Head, &report.head_side)] {
        for def in &report.metrics {
            for sample in side.metrics.get(&def.key).into_iter().flatten() {
                if let Some(e) = &sample.error {
                    errors.push(format!("{label} {} trial {}: {e}", def.key, sample.trial));
                }
            }
        }
    }
    errors
}

fn overall(comparisons: &[MetricComparison]) -> String {
    let count = |o: Outcome| comparisons.iter().filter(|c| c.comparison.outcome == o).count();
    let mut line = format!(
        "**Overall: {} regressed · {} improved · {} no clear change",
        count(Outcome::Regressed),
        count(Outcome::Improved),
        count(Outcome::NoClearChange)
    );
    for (o, word) in [(Outcome::Incomplete, "incomplete"), (Outcome::Unavailable, "unavailable")] {
        if count(o) > 0 {
            let _ = write!(line, " · {} {word}", count(o));
        }
    }
    line.push_str(".**");
    line
}

fn details(out: &mut String, report: &Report, comparisons: &[MetricComparison], errors: &[String]) {
    let _ = writeln!(out, "<details><summary>Methodology and samples</summary>\n");
    let _ = writeln!(out, "Run `{}` started at {}.", escape(&report.run_id), report.started_at);
    let r = &report.resources;
    let _ = writeln!(
        out,
        "Linux x64 sandboxes, {} vCPU, {:.1} GB RAM, {} GB disk.",
        r.cpus,
        r.memory_bytes as f64 / 1e9,
        r.disk_gb
    );
    let _ = writeln!(out, "Image: `{}`.", escape(&report.image));
    let facts: Vec<String> = ["os", "kernel", "cpu", "node", "npm", "git", "python", "agent"]
        .iter()
        .filter_map(|k| report.base_side.facts.get(*k).filter(|v| !v.is_empty()).map(|v| format!("{k} {}", escape(v))))
        .collect();
    if !facts.is_empty() {
        let _ = writeln!(out, "Runtime: {}.", facts.join("; "));
    }
    let _ = writeln!(out);
    for sentence in [
        "Base and head run in fresh, identical containers created from the same image with the same limits.",
        "Trials are interleaved base, head, head, base, … so drift affects both sides alike; one sandbox is timed at a time.",
        "Medians shown. Arrows require a change beyond the absolute floor, the relative floor of the base median, and both sides' spread (IQR from 4 samples, range below).",
        "Startup is timed from just before the program is spawned to the first render of a typed probe; Enter is never sent.",
        "Memory is the summed RSS of the benchmark user's processes after the start has settled.",
        "Installations use a fresh user per trial with empty caches.",
        "The paired estimate compares trials of the same index: the Hodges–Lehmann shift of log(head/base) with a 95% interval (exact Wilcoxon from 6 pairs, t on logs for 3–5).",
        "Costs estimate full sandbox lifetimes at configured rates, including setup and build.",
    ] {
        let _ = writeln!(out, "{sentence}");
    }
    if let Some(budget) = report.budget_usd {
        let _ = writeln!(out, "Budget target: ${budget}.");
    }
    let _ = writeln!(out, "Each side stops a phase after {} identical consecutive failures.\n", report.failure_limit);
    let _ =
        writeln!(out, "| Metric | Base successful/attempted | Head successful/attempted | Base spread | Head spread |");
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
    for (def, cmp) in report.metrics.iter().zip(comparisons) {
        let spread = |n: usize, s: f64| match n {
            0 | 1 => "—".to_string(),
            2 | 3 => format!("range {}", value(s, def)),
            _ => format!("IQR {}", value(s, def)),
        };
        let _ = writeln!(
            out,
            "| {} | {}/{} | {}/{} | {} | {} |",
            escape(&def.title),
            cmp.base_successful,
            cmp.base_attempted,
            cmp.head_successful,
            cmp.head_attempted,
            spread(cmp.base_successful, cmp.comparison.base_spread),
            spread(cmp.head_successful, cmp.comparison.head_spread)
        );
    }
    let paired: Vec<(&crate::spec::MetricDef, &MetricComparison)> =
        report.metrics.iter().zip(comparisons).filter(|(_, c)| c.paired.verdict != Verdict::TooFewPairs).collect();
    if !paired.is_empty() {
        let _ = writeln!(out, "\n| Metric | Paired estimate | 95% interval | Noise floor | Verdict |");
        let _ = writeln!(out, "| --- | ---: | ---: | ---: | --- |");
        for (def, c) in paired {
            let p = &c.paired;
            let pct = |x: f64| format!("{}{:.2}%", if x >= 0.0 { "+" } else { "-" }, (x * 100.0).abs());
            let interval = p.interval.map_or("—".to_string(), |(lo, hi)| format!("{} … {}", pct(lo), pct(hi)));
            let verdict = match p.verdict {
                Verdict::Regressed => "regressed",
                Verdict::Improved => "improved",
                Verdict::NoChange => "no change",
                Verdict::Inconclusive => "inconclusive",
                Verdict::TooFewPairs => "too few pairs",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | ±{:.2}% | {verdict} ({} pairs) |",
                escape(&def.title),
                p.estimate.map_or("—".to_string(), pct),
                interval,
                p.floor * 100.0,
                p.pairs
            );
        }
    }
    if let Some((allocation, max, usage)) = report.cost_figures() {
        let _ = writeln!(
            out,
            "\nCost: allocation ${allocation:.4} (requested resources × lifetime) · max(request, usage) ${max:.4} · usage only ${usage:.4}.\n"
        );
        let _ = writeln!(
            out,
            "| Sandbox | Phase | Seconds | CPU-seconds | Memory GiB-seconds | Allocation | Max(request, usage) | Usage |"
        );
        let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        for sandbox in &report.sandboxes {
            for p in sandbox.cost.iter().flat_map(|c| &c.phases) {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} | {:.2} | {:.2} | ${:.5} | ${:.5} | ${:.5} |",
                    escape(&sandbox.role),
                    escape(&p.usage.phase),
                    p.usage.seconds,
                    p.usage.cpu_seconds,
                    p.usage.memory_gib_seconds,
                    p.allocation_usd,
                    p.max_usd,
                    p.usage_usd
                );
            }
        }
    }
    if !errors.is_empty() {
        let _ = writeln!(out, "\nFailures:\n");
        for e in errors.iter().take(MAX_FAILURES_LISTED) {
            let _ = writeln!(out, "- {}", escape(e));
        }
    }
    let _ = writeln!(out, "\n</details>");
}
