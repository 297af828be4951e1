//! `report.md`: the pull-request comment, in the reference harness's skeleton (§4.2): three
//! HTML markers, a title with the status, diagnostics, the overall line, grouped tables of exactly
//! four columns, the cost line, and a details section with the methodology and the samples.
//!
//! Under the reference rule the comment is the reference's, byte for byte. Under the paired rule
//! the overall line counts its verdicts (and says when wall time is inconclusive but CPU time is
//! clear), the Change column shows the paired decision, and the details show each metric's
//! estimate, interval, floor and minimum detectable effect.
//!
//! Markers: line 1 `<!-- sandbench:v1 -->`; line 2 `<!-- run:ID:ATTEMPT head:SHA -->` (ATTEMPT a
//! positive integer, ID and SHA through [`marker_field`]); line 3
//! `<!-- comparison:FINGERPRINT status:STATUS -->`.

use std::fmt::Write;

use super::format::{change, decision, escape, marker_field, value};
use super::{CPU_SUFFIX, MetricComparison, Report, Rule, Status};
use crate::spec::MetricDef;
use crate::stats::{Outcome, Verdict};

const MAX_ERRORS_SHOWN: usize = 3;
const MAX_FAILURES_LISTED: usize = 30;

/// The comment for `report`, as `report.md` holds it.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    header(&mut out, report);
    if report.status == Status::Running {
        let _ = writeln!(out, "Benchmarking the head revision. Results will appear here when this run finishes.\n");
        let _ = writeln!(out, "Local run; raw results are stored beside this report.");
        return out;
    }
    let errors = report.all_errors();
    diagnostics(&mut out, report, &errors);
    let comparisons = report.analyze();
    measurement_warnings(&mut out, &comparisons);
    let defs = report.metric_defs();
    overall_lines(&mut out, report, &defs, &comparisons);
    tables(&mut out, report, &defs, &comparisons);
    cost_line(&mut out, report);
    let _ = writeln!(out, "Local run; raw results are stored beside this report.\n");
    details(&mut out, report, &comparisons, &errors);
    out
}

/// The three markers, the title with the status, and which commits are compared.
fn header(out: &mut String, report: &Report) {
    let status = report.status.as_str();
    let _ = writeln!(out, "<!-- sandbench:v1 -->");
    let _ = writeln!(
        out,
        "<!-- run:{}:{} head:{} -->",
        marker_field(&report.run_id),
        report.attempt.max(1),
        marker_field(&report.head.commit)
    );
    let _ = writeln!(out, "<!-- comparison:{} status:{status} -->", report.fingerprint());
    let _ = writeln!(out, "### {} performance — {status}\n", escape(&report.spec_name));
    let _ = writeln!(
        out,
        "Head `{}` compared with base `{}`.\n",
        escape(short(&report.head.commit)),
        escape(short(&report.base.commit))
    );
}

/// The incomplete-run warning, the first errors, and the operational warnings.
fn diagnostics(out: &mut String, report: &Report, errors: &[String]) {
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
}

/// Most measurement warnings listed.
const MAX_RUN_WARNINGS: usize = 10;

/// hyperfine's warnings about the runs of metrics measured several times a trial.
fn measurement_warnings(out: &mut String, comparisons: &[MetricComparison]) {
    let warnings: Vec<&String> = comparisons.iter().flat_map(|c| &c.warnings).collect();
    if warnings.is_empty() {
        return;
    }
    let _ = writeln!(out, "**Measurement warnings — runs of a trial that disagree:**\n");
    for w in warnings.iter().take(MAX_RUN_WARNINGS) {
        let _ = writeln!(out, "- {}", escape(w));
    }
    if warnings.len() > MAX_RUN_WARNINGS {
        let _ = writeln!(
            out,
            "- … and {} more (`report.json`, `comparisons[].warnings`)",
            warnings.len() - MAX_RUN_WARNINGS
        );
    }
    let _ = writeln!(out);
}

/// Min, median and max of the runs of each trial measured several times.
fn runs_table(out: &mut String, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    if comparisons.iter().all(|c| c.runs.is_empty()) {
        return;
    }
    let _ = writeln!(out, "\nRuns per trial (a trial's value is the median of its runs; warmup runs not counted):\n");
    let _ = writeln!(out, "| Metric | Side | Trial | Runs | Min | Median | Max |");
    let _ = writeln!(out, "| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for (def, c) in defs.iter().zip(comparisons) {
        for r in &c.runs {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                escape(&def.title),
                r.side,
                r.trial,
                r.runs,
                escape(&value(r.min, def)),
                escape(&value(r.median, def)),
                escape(&value(r.max, def))
            );
        }
    }
}

/// The overall line of the report's rule (and, under the paired rule, the CPU line when any).
fn overall_lines(out: &mut String, report: &Report, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    match report.rule {
        Rule::Reference => {
            let _ = writeln!(out, "{}\n", overall(comparisons));
        }
        Rule::Paired => {
            let _ = writeln!(out, "{}\n", overall_paired(comparisons));
            if let Some(line) = cpu_line(defs, comparisons) {
                let _ = writeln!(out, "{line}\n");
            }
        }
    }
}

/// One four-column table per group, in the order the groups first appear; every group but the
/// first under its bold name.
fn tables(out: &mut String, report: &Report, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    let mut groups: Vec<&str> = Vec::new();
    for def in defs {
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
        for (def, cmp) in defs.iter().zip(comparisons).filter(|(d, _)| d.group == *group) {
            let median = |m: Option<f64>| m.map_or("—".to_string(), |v| escape(&value(v, def)));
            let cell = match report.rule {
                Rule::Reference => change(&cmp.comparison, def),
                Rule::Paired => decision(&cmp.comparison, &cmp.paired, def),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                escape(&def.title),
                median(cmp.comparison.base_median),
                median(cmp.comparison.head_median),
                cell
            );
        }
        let _ = writeln!(out);
    }
}

/// The sandboxes' total cost, or why there is none yet.
fn cost_line(out: &mut String, report: &Report) {
    match report.total_cost_usd() {
        Some(usd) => {
            let _ = writeln!(out, "**Sandbox cost: ~${usd:.4}**\n");
        }
        None => {
            let _ = writeln!(out, "Cost pending or unavailable; sandbox usage has not been collected.\n");
        }
    }
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 8)
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

/// The paired rule's overall line: every verdict counted, incomplete and unavailable when any.
fn overall_paired(comparisons: &[MetricComparison]) -> String {
    let count = |o: Outcome| comparisons.iter().filter(|c| c.outcome() == o).count();
    let mut line = format!(
        "**Overall: {} regressed · {} improved · {} no change · {} inconclusive",
        count(Outcome::Regressed),
        count(Outcome::Improved),
        count(Outcome::NoClearChange),
        count(Outcome::Inconclusive)
    );
    for (o, word) in [(Outcome::Incomplete, "incomplete"), (Outcome::Unavailable, "unavailable")] {
        if count(o) > 0 {
            let _ = write!(line, " · {} {word}", count(o));
        }
    }
    line.push_str(".**");
    line
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Regressed => "regressed",
        Outcome::Improved => "improved",
        Outcome::NoClearChange => "no change",
        Outcome::Inconclusive => "inconclusive",
        Outcome::Incomplete => "incomplete",
        Outcome::Unavailable => "unavailable",
    }
}

/// Metrics whose wall time says less than their CPU time: wall inconclusive and CPU decided, or
/// wall unchanged and CPU changed. None when there is no such metric.
pub(super) fn cpu_findings(defs: &[MetricDef], comparisons: &[MetricComparison]) -> Vec<String> {
    let mut found = Vec::new();
    for (def, cpu) in defs.iter().zip(comparisons) {
        let Some(stem) = def.key.strip_suffix(CPU_SUFFIX) else { continue };
        let Some((wall_def, wall)) = defs.iter().zip(comparisons).find(|(d, _)| d.key == stem) else { continue };
        let cpu_changed = matches!(cpu.outcome(), Outcome::Regressed | Outcome::Improved);
        let telling = match wall.outcome() {
            Outcome::Inconclusive => cpu_changed || cpu.outcome() == Outcome::NoClearChange,
            Outcome::NoClearChange => cpu_changed,
            _ => false,
        };
        if telling {
            let estimate = cpu.paired.estimate.map(|e| format!(" ({})", super::format::percent(Some(e))));
            found.push(format!(
                "{} — wall time {}, CPU time {}{}",
                wall_def.title,
                outcome_word(wall.outcome()),
                outcome_word(cpu.outcome()),
                estimate.unwrap_or_default()
            ));
        }
    }
    found
}

fn cpu_line(defs: &[MetricDef], comparisons: &[MetricComparison]) -> Option<String> {
    let found = cpu_findings(defs, comparisons);
    (!found.is_empty())
        .then(|| format!("**CPU time:** {}.", found.iter().map(|f| escape(f)).collect::<Vec<_>>().join("; ")))
}

fn details(out: &mut String, report: &Report, comparisons: &[MetricComparison], errors: &[String]) {
    let defs = report.metric_defs();
    let _ = writeln!(out, "<details><summary>Methodology and samples</summary>\n");
    let _ = writeln!(out, "Run `{}` started at {}.", escape(&report.run_id), escape(&report.started_at));
    let r = &report.resources;
    let _ = writeln!(
        out,
        "Linux x64 sandboxes, {} vCPU, {:.1} GB RAM, {} GB disk (not enforced).",
        r.cpus,
        r.memory_bytes as f64 / 1e9,
        r.disk_gb
    );
    let provisioned: Vec<String> =
        report.base_side.cpus.iter().chain(&report.head_side.cpus).map(|c| escape(&c.describe())).collect();
    if !provisioned.is_empty() {
        let _ = writeln!(out, "CPUs as provisioned: {}.", provisioned.join("; "));
    }
    let _ = writeln!(out, "Image: `{}`.", escape(&report.image));
    let facts: Vec<String> = ["os", "kernel", "cpu", "node", "npm", "git", "python", "agent"]
        .iter()
        .filter_map(|k| report.base_side.facts.get(*k).filter(|v| !v.is_empty()).map(|v| format!("{k} {}", escape(v))))
        .collect();
    if !facts.is_empty() {
        let _ = writeln!(out, "Runtime: {}.", facts.join("; "));
    }
    let _ = writeln!(out);
    let sentences = match report.rule {
        Rule::Reference => REFERENCE_METHOD.iter().map(|s| s.to_string()).collect(),
        Rule::Paired => paired_method(report),
    };
    for sentence in sentences {
        let _ = writeln!(out, "{sentence}");
    }
    if let Some(budget) = report.budget_usd {
        let _ = writeln!(out, "Budget target: ${budget}.");
    }
    let _ = writeln!(out, "Each side stops a phase after {} identical consecutive failures.\n", report.failure_limit);
    let _ =
        writeln!(out, "| Metric | Base successful/attempted | Head successful/attempted | Base spread | Head spread |");
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
    for (def, cmp) in defs.iter().zip(comparisons) {
        let spread = |n: usize, s: f64| match n {
            0 | 1 => "—".to_string(),
            2 | 3 => format!("range {}", escape(&value(s, def))),
            _ => format!("IQR {}", escape(&value(s, def))),
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
    match report.rule {
        Rule::Reference => reference_paired_table(out, &defs, comparisons),
        Rule::Paired => paired_table(out, report, &defs, comparisons),
    }
    runs_table(out, &defs, comparisons);
    // The reference rule keeps the reference's comment byte for byte.
    if report.rule == Rule::Paired
        && let Some(table) = super::companions::table(report)
    {
        out.push_str(&table);
    }
    cost_table(out, report);
    if !errors.is_empty() {
        let _ = writeln!(out, "\nFailures:\n");
        for e in errors.iter().take(MAX_FAILURES_LISTED) {
            let _ = writeln!(out, "- {}", escape(e));
        }
    }
    let _ = writeln!(out, "\n</details>");
}

const REFERENCE_METHOD: [&str; 8] = [
    "Base and head run in fresh, identical containers created from the same image with the same limits.",
    "Trials are interleaved base, head, head, base, … so drift affects both sides alike; one sandbox is timed at a time.",
    "Medians shown. Arrows require a change beyond the absolute floor, the relative floor of the base median, and both sides' spread (IQR from 4 samples, range below).",
    "Startup is timed from just before the program is spawned to the first render of a typed probe; Enter is never sent.",
    "Memory is the summed RSS of the benchmark user's processes after the start has settled.",
    "Installations use a fresh user per trial with empty caches.",
    "The paired estimate compares trials of the same index: the Hodges–Lehmann shift of log(head/base) with a 95% interval (exact Wilcoxon from 6 pairs, t on logs for 3–5).",
    "Costs estimate full sandbox lifetimes at configured rates, including setup and build.",
];

/// The paired rule's methodology, naming this report's floors and looks.
fn paired_method(report: &Report) -> Vec<String> {
    let confidence = 100.0 * (1.0 - report.alpha());
    let floors = match &report.noise {
        Some(p) => format!(
            "Floors come from the A/A noise profile of run `{}` where it has at least {} pairs of a metric (the farther end of its 95% interval), else from the metric's relative floor or its absolute floor over the base median, capped at {:.0}%.",
            escape(&p.run_id),
            super::decide::MIN_PROFILE_PAIRS,
            super::decide::FLOOR_CAP * 100.0
        ),
        None => format!(
            "Floors are the metric's relative floor, or its absolute floor over the base median when larger, capped at {:.0}%; no A/A noise profile was given.",
            super::decide::FLOOR_CAP * 100.0
        ),
    };
    let looks = match &report.sequential {
        Some(s) => format!(
            "Pairs were added while a gating metric ({}) was inconclusive: looks at {:?} pairs, each interval at the alpha its look spends (O'Brien–Fleming-type spending, Bonferroni over looks, {:.0}% in all); this report is look {} at {confidence:.2}% confidence.{}",
            escape(&s.gate.join(", ")),
            s.design.looks(),
            100.0 * (1.0 - s.design.alpha),
            s.look,
            if s.ended.is_empty() {
                String::new()
            } else {
                format!(" The run stopped adding pairs: {}.", escape(&s.ended))
            }
        ),
        None => format!("One look: {confidence:.0}% intervals."),
    };
    vec![
        REFERENCE_METHOD[0].to_string(),
        REFERENCE_METHOD[1].to_string(),
        "Medians shown. Each verdict comes from the pairs (trial t of base with trial t of head): the Hodges–Lehmann estimate of head/base − 1 and its interval (exact Wilcoxon from 6 pairs, t on log ratios for 3–5), against a floor: regressed when the whole interval is above +floor, improved when below −floor, no change when inside ±floor, inconclusive otherwise. Metrics with fewer than 3 pairs compare medians with the floor widened by both spreads.".to_string(),
        floors,
        looks,
        "\"No change larger than X\": X is the larger of the interval's farther end and the minimum detectable effect (the change this run would call regressed with 80% power). A metric with a failed sample is incomplete.".to_string(),
        REFERENCE_METHOD[3].to_string(),
        REFERENCE_METHOD[4].to_string(),
        REFERENCE_METHOD[5].to_string(),
        REFERENCE_METHOD[7].to_string(),
    ]
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Regressed => "regressed",
        Verdict::Improved => "improved",
        Verdict::NoChange => "no change",
        Verdict::Inconclusive => "inconclusive",
        Verdict::TooFewPairs => "too few pairs",
    }
}

fn pct(x: f64) -> String {
    format!("{}{:.2}%", if x >= 0.0 { "+" } else { "-" }, (x * 100.0).abs())
}

/// The reference rule's secondary table of paired figures.
fn reference_paired_table(out: &mut String, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    let paired: Vec<(&MetricDef, &MetricComparison)> =
        defs.iter().zip(comparisons).filter(|(_, c)| c.paired.verdict != Verdict::TooFewPairs).collect();
    if paired.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n| Metric | Paired estimate | 95% interval | Noise floor | Verdict |");
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | --- |");
    for (def, c) in paired {
        let p = &c.paired;
        let interval = p.interval.map_or("—".to_string(), |(lo, hi)| format!("{} … {}", pct(lo), pct(hi)));
        let _ = writeln!(
            out,
            "| {} | {} | {} | ±{:.2}% | {} ({} pairs) |",
            escape(&def.title),
            p.estimate.map_or("—".to_string(), pct),
            interval,
            p.floor * 100.0,
            verdict_word(p.verdict),
            p.pairs
        );
    }
}

/// The paired rule's decision table: every metric's pairs, estimate, interval, floor and
/// minimum detectable effect, then the notes.
fn paired_table(out: &mut String, report: &Report, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    let confidence = 100.0 * (1.0 - report.alpha());
    let _ = writeln!(
        out,
        "\n| Metric | Pairs | Estimate | {confidence:.2}% interval | Floor | MDE (80% power) | Decision |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: | --- |");
    for (def, c) in defs.iter().zip(comparisons) {
        let p = &c.paired;
        let pairs = match p.dropped {
            0 => p.pairs.to_string(),
            d => format!("{} ({d} dropped)", p.pairs),
        };
        let interval = p.interval.map_or("—".to_string(), |(lo, hi)| format!("{} … {}", pct(lo), pct(hi)));
        let mde = p.mde.filter(|m| m.is_finite()).map_or("—".to_string(), |m| format!("{:.2}%", m * 100.0));
        let _ = writeln!(
            out,
            "| {} | {pairs} | {} | {interval} | ±{:.2}% | {mde} | {} |",
            escape(&def.title),
            p.estimate.map_or("—".to_string(), pct),
            p.floor * 100.0,
            outcome_word(c.outcome())
        );
    }
    let notes: Vec<String> = defs
        .iter()
        .zip(comparisons)
        .flat_map(|(def, c)| c.notes.iter().map(move |n| format!("{}: {n}", def.title)))
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(out, "\nNotes:\n");
        for n in notes {
            let _ = writeln!(out, "- {}", escape(&n));
        }
    }
}

fn cost_table(out: &mut String, report: &Report) {
    let Some((allocation, max, usage)) = report.cost_figures() else { return };
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
