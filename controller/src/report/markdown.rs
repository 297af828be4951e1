//! `report.md`: the pull-request comment. Every comment starts with three HTML markers, a title
//! with the status and the commits compared; what follows depends on the rule.
//!
//! **Paired rule** (the default): a reviewer reads it in ten seconds. The headline's counts;
//! one table of the rows that changed (regressed, improved, incomplete, unavailable), each naming
//! its lens; one line for the rest; once, what the run could not resolve (which metrics, the
//! smallest change it could have seen, the pairs or the lens that would reach the floor); the
//! failures; then, collapsed, the warnings, the full table and the methodology.
//!
//! **Reference rule**: the reference harness's skeleton (§4.2): diagnostics, warnings, the overall
//! line, grouped tables of exactly four columns with its change cells, the cost line and the
//! details, in its order and wording. Not its bytes: the markers are sandbench's (the two
//! harnesses never take each other's sticky comment), the columns and the commits line say base
//! and head (the base need not be main), and the methodology states sandbench's method, not the
//! reference's sentences about its own sandboxes.
//!
//! Both fit GitHub's limit on a comment ([`super::comment`]): unchanged rows, then details, then
//! warnings give way, each saying how many were left out. Text from a spec, a revision or a
//! sandbox goes through [`escape`]: inert, and without a live mention or link.
//!
//! Markers: line 1 `<!-- sandbench:v1 -->`; line 2 `<!-- run:ID:ATTEMPT head:SHA -->` (ATTEMPT a
//! positive integer, ID and SHA through [`marker_field`]); line 3
//! `<!-- comparison:FINGERPRINT status:STATUS -->`.

use std::fmt::Write;

use sandbench_proto::metric::{Facet, MetricKey};

use super::comment::{self, Block, Class};
use super::format::{change, decision, escape, escape_clipped, marker_field, value};
use super::summary::{self, Row};
use super::{MetricComparison, Report, Rule, Status, warnings};
use crate::spec::MetricDef;
use crate::stats::{Outcome, Verdict};

const MAX_ERRORS_SHOWN: usize = 3;
const MAX_FAILURES_LISTED: usize = 30;
/// Longest title, group or bullet (in characters, before escaping) a comment shows.
const MAX_TITLE: usize = 120;
const MAX_BULLET: usize = 400;
/// Most metrics the resolution block lists.
const MAX_UNRESOLVED: usize = 10;
/// The sentence `publish` replaces with the link to the CI run.
pub const LOCAL_LINK: &str = "Local run; raw results are stored beside this report.";

/// The comment for `report`, as `report.md` holds it: within [`comment::RENDER_BYTES`].
pub fn render(report: &Report) -> String {
    let mut blocks = vec![Block::kept(header(report))];
    if report.status == Status::Running {
        blocks.push(Block::kept(format!(
            "Benchmarking the head revision. Results will appear here when this run finishes.\n\n{LOCAL_LINK}\n"
        )));
        return comment::assemble(blocks, comment::RENDER_BYTES);
    }
    let comparisons = report.analyze();
    let defs = report.metric_defs();
    match report.rule {
        Rule::Paired => paired(&mut blocks, report, &defs, &comparisons),
        Rule::Reference => reference(&mut blocks, report, &defs, &comparisons),
    }
    comment::assemble(blocks, comment::RENDER_BYTES)
}

/// The paired rule's comment: what changed first, the rest collapsed.
fn paired(blocks: &mut Vec<Block>, report: &Report, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    let rows = summary::rows(defs, comparisons);
    let mut top = String::new();
    if report.status != Status::Completed {
        top.push_str(INCOMPLETE);
    }
    let _ = writeln!(top, "**Overall: {}.**\n", summary::counts(report.rule, comparisons));
    if let Some(line) = cpu_line(defs, comparisons) {
        let _ = writeln!(top, "{line}\n");
    }
    blocks.push(Block::kept(top));
    let changed: Vec<String> =
        rows.iter().filter(|r| summary::changed(r.outcome())).map(|r| metric_row(r, report.rule)).collect();
    let rest = summary::rest(&rows, report.rule);
    if changed.is_empty() {
        let rest = rest.unwrap_or_else(|| "no metric was compared".to_string());
        blocks.push(Block::kept(format!("Nothing regressed, improved or went missing: {rest}.\n\n")));
    } else {
        blocks.push(Block::list(Class::Changed, TABLE_HEAD.to_string(), changed, "\n".into(), "changed rows"));
        if let Some(rest) = rest {
            blocks.push(Block::kept(format!("{}.\n\n", capitalised(&rest))));
        }
    }
    blocks.extend(bisect_block(report));
    blocks.extend(trend_block(report, defs));
    blocks.push(Block::kept(resolution_block(&rows)));
    blocks.push(Block::kept(failure_diagnostics(&report.all_errors())));
    collapsed_warnings(blocks, &warnings::groups(report, comparisons));
    full_table(blocks, &rows, report.rule);
    blocks.extend(instructions_block(report, comparisons));
    blocks.push(Block::kept(format!("{}{LOCAL_LINK}\n\n", cost_line(report))));
    blocks.push(details_block(report, comparisons));
}

/// The reference rule's comment, in the reference's skeleton.
fn reference(blocks: &mut Vec<Block>, report: &Report, defs: &[MetricDef], comparisons: &[MetricComparison]) {
    let errors = report.all_errors();
    let mut top = String::new();
    if report.status != Status::Completed {
        top.push_str(INCOMPLETE);
    }
    top.push_str(&failure_diagnostics(&errors));
    blocks.push(Block::kept(top));
    blocks.extend(warnings::groups(report, comparisons).iter().map(warning_block));
    blocks.push(Block::kept(format!("{}\n\n", overall(comparisons))));
    blocks.extend(bisect_block(report));
    blocks.extend(trend_block(report, defs));
    let rows = summary::rows(defs, comparisons);
    for (i, group) in groups(&rows).into_iter().enumerate() {
        let name = if i > 0 { format!("**{}**\n\n", escape_clipped(group, MAX_TITLE)) } else { String::new() };
        let head = format!("{name}| Metric | Base | Head | Change |\n| --- | ---: | ---: | ---: |\n");
        // Changed rows are kept; the unchanged ones give way first, each table saying how many.
        let lines = rows
            .iter()
            .filter(|r| r.def.group == group)
            .map(|r| {
                let median = |m: Option<f64>| m.map_or("—".to_string(), |v| escape(&value(v, r.def)));
                let line = format!(
                    "| {} | {} | {} | {} |\n",
                    escape_clipped(&r.def.title, MAX_TITLE),
                    median(r.cmp.comparison.base_median),
                    median(r.cmp.comparison.head_median),
                    change(&r.cmp.comparison, r.def)
                );
                (line, summary::changed(r.outcome()))
            })
            .collect();
        blocks.push(Block::mixed(Class::Unchanged, head, lines, "\n".into(), "unchanged rows"));
    }
    blocks.push(Block::kept(format!("{}{LOCAL_LINK}\n\n", cost_line(report))));
    blocks.push(details_block(report, comparisons));
}

const INCOMPLETE: &str =
    "**Benchmark execution did not complete successfully. Missing measurements are not performance wins.**\n\n";

const TABLE_HEAD: &str =
    "| Metric | Lens | Base | Head | Change | Floor |\n| --- | --- | ---: | ---: | ---: | ---: |\n";

/// The three markers, the title with the status, and which commits are compared.
fn header(report: &Report) -> String {
    let status = report.status.as_str();
    let mut out = String::new();
    let _ = writeln!(out, "<!-- sandbench:v1 -->");
    let _ = writeln!(
        out,
        "<!-- run:{}:{} head:{} -->",
        marker_field(&report.run_id),
        report.attempt.max(1),
        marker_field(&report.head.commit)
    );
    let _ = writeln!(out, "<!-- comparison:{} status:{status} -->", report.fingerprint());
    let _ = writeln!(out, "### {} performance — {status}\n", escape_clipped(&report.spec_name, MAX_TITLE));
    let _ = writeln!(
        out,
        "Head `{}` compared with base `{}`.\n",
        escape(short(&report.head.commit)),
        escape(short(&report.base.commit))
    );
    out
}

/// The first errors, when there are any.
fn failure_diagnostics(errors: &[String]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let mut out = String::from("**Failure diagnostics:**\n\n");
    for e in errors.iter().take(MAX_ERRORS_SHOWN) {
        let _ = writeln!(out, "- {}", escape_clipped(e, MAX_BULLET));
    }
    out.push_str("\nSee the saved per-trial logs and terminal transcripts for details.\n\n");
    out
}

/// The warnings, collapsed under their count; each group gives way, counting what it left out.
fn collapsed_warnings(blocks: &mut Vec<Block>, groups: &[warnings::Group]) {
    if groups.is_empty() {
        return;
    }
    blocks.push(Block::kept(format!("<details><summary>{}</summary>\n\n", warnings::count(groups))));
    blocks.extend(groups.iter().map(warning_block));
    blocks.push(Block::kept("</details>\n\n"));
}

/// One group of warnings: its title, a bullet each (giving way, counting what it left out), its
/// footer.
fn warning_block(group: &warnings::Group) -> Block {
    let items = group.items.iter().map(|w| format!("- {}\n", escape_clipped(w, MAX_BULLET))).collect();
    let tail = group.footer.map_or("\n".to_string(), |f| format!("\n{f}\n\n"));
    Block::list(Class::Warnings, format!("**{}:**\n\n", group.title), items, tail, "warnings")
}

/// Every metric, grouped, collapsed: the rows that give way first.
fn full_table(blocks: &mut Vec<Block>, rows: &[Row], rule: Rule) {
    if rows.is_empty() {
        return;
    }
    let mut items = Vec::new();
    for group in groups(rows) {
        items.push(format!("| **{}** | | | | | |\n", escape_clipped(group, MAX_TITLE)));
        items.extend(rows.iter().filter(|r| r.def.group == group).map(|r| metric_row(r, rule)));
    }
    let head = format!("<details><summary>All {} metrics</summary>\n\n{TABLE_HEAD}", rows.len());
    blocks.push(Block::list(Class::Unchanged, head, items, "\n</details>\n\n".into(), "rows of the full table"));
}

/// The groups in the order they first appear.
fn groups<'a>(rows: &[Row<'a>]) -> Vec<&'a str> {
    let mut groups: Vec<&str> = Vec::new();
    for r in rows {
        if !groups.contains(&r.def.group.as_str()) {
            groups.push(&r.def.group);
        }
    }
    groups
}

/// One row of the paired rule's tables.
fn metric_row(r: &Row, rule: Rule) -> String {
    let median = |m: Option<f64>| m.map_or("—".to_string(), |v| escape(&value(v, r.def)));
    let cell = match rule {
        Rule::Reference => change(&r.cmp.comparison, r.def),
        Rule::Paired => decision(&r.cmp.comparison, &r.cmp.paired, r.def),
    };
    format!(
        "| {} | {} | {} | {} | {cell} | ±{:.2}% |\n",
        escape_clipped(&r.def.title, MAX_TITLE),
        r.lens.name(),
        median(r.cmp.comparison.base_median),
        median(r.cmp.comparison.head_median),
        r.cmp.paired.floor * 100.0
    )
}

/// Once, what the run could not resolve: which metrics, the smallest change it could have seen,
/// and the pairs (or the lens) that would reach the floor. Empty when it resolved them all.
fn resolution_block(rows: &[Row]) -> String {
    let unresolved = summary::unresolved(rows);
    if unresolved.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "**Not resolved:** {} inconclusive metric{} could not tell a change of {} floor from noise.\n\n",
        unresolved.len(),
        if unresolved.len() == 1 { "" } else { "s" },
        if unresolved.len() == 1 { "its" } else { "their" }
    );
    out.push_str("| Metric | Lens | Floor | Smallest change this run could see | To reach the floor |\n");
    out.push_str("| --- | --- | ---: | ---: | --- |\n");
    for u in unresolved.iter().take(MAX_UNRESOLVED) {
        let p = &u.row.cmp.paired;
        let pairs = u.pairs_needed.map(|n| format!("≈ {} pairs (this run: {})", summary::about(n), p.pairs));
        let lens = u.other_lens.map(|o| {
            let word = summary::word(o.outcome(), Rule::Paired);
            format!("its {} lens: {word}", o.lens.name())
        });
        let reach = match (pairs, lens) {
            (Some(p), Some(l)) => format!("{p}, or {l}"),
            (p, l) => p.or(l).unwrap_or_else(|| "—".to_string()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {reach} |",
            escape_clipped(&u.row.def.title, MAX_TITLE),
            u.row.lens.name(),
            summary::plus_minus(p.floor),
            summary::plus_minus(u.resolution)
        );
    }
    if unresolved.len() > MAX_UNRESOLVED {
        let _ = writeln!(out, "\n… and {} more in the full table.", unresolved.len() - MAX_UNRESOLVED);
    }
    out.push('\n');
    out
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// The details, collapsed: their lines give way after the unchanged rows.
fn details_block(report: &Report, comparisons: &[MetricComparison]) -> Block {
    let mut body = String::new();
    details(&mut body, report, comparisons, &report.all_errors());
    const HEAD: &str = "<details><summary>Methodology and samples</summary>\n\n";
    const TAIL: &str = "\n</details>\n";
    let inner = body.strip_prefix(HEAD).and_then(|b| b.strip_suffix(TAIL)).unwrap_or(&body);
    let lines = inner.split_inclusive('\n').map(str::to_string).collect();
    Block::list(Class::Details, HEAD.to_string(), lines, TAIL.to_string(), "lines of the methodology and samples")
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
                escape_clipped(&def.title, MAX_TITLE),
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

/// The sandboxes' total cost, or why there is none yet.
fn cost_line(report: &Report) -> String {
    // The lens's words are the run's own, not product text.
    let lens = super::instructions::cost_words(report).map_or(String::new(), |w| format!("{w}\n\n"));
    match report.total_cost_usd() {
        Some(usd) => format!("**Sandbox cost: ~${usd:.4}**\n\n{lens}"),
        None => format!("Cost pending or unavailable; sandbox usage has not been collected.\n\n{lens}"),
    }
}

/// Where the instructions went, for every lens metric that changed: collapsed, and it gives way
/// with the details.
fn instructions_block(report: &Report, comparisons: &[MetricComparison]) -> Option<Block> {
    let steps = super::instructions::changed_steps(report, comparisons);
    let lines = super::instructions::markdown_lines(&steps);
    if lines.is_empty() {
        return None;
    }
    let head = format!(
        "<details><summary>Where the instructions went</summary>\n\nThe {} functions whose own instruction counts changed most, per run (JIT code grouped as one entry):\n\n| Step | Function | Base | Head | Change |\n| --- | --- | ---: | ---: | ---: |\n",
        super::instructions::SHOWN
    );
    Some(Block::list(Class::Details, head, lines, "\n</details>\n\n".into(), "functions"))
}

/// `run --bisect`'s answers, one line each, kept with the changed rows: "**Bisect:** `cold`
/// regressed +8.00 %: first bad commit abc12345 'load plugins eagerly' (+7.60 % of the +8.00 %)".
fn bisect_block(report: &Report) -> Option<Block> {
    if report.bisections.is_empty() {
        return None;
    }
    let mut out = String::new();
    for line in &report.bisections {
        // In a code span nothing is a mention or a link; only a backtick could end it.
        let key =
            crate::sanitize::terminal(crate::sanitize::prefix(&line.key, MAX_TITLE)).replace(['`', '\n', '\r'], "'");
        let _ = writeln!(
            out,
            "**Bisect:** `{key}`{} — {} visited, {:.0} s of sandbox time (~${:.4}).\n",
            escape_clipped(&line.words, MAX_BULLET),
            super::format::plural(line.steps, "commit"),
            line.sandbox_seconds,
            line.cost_usd
        );
    }
    Some(Block::kept(out))
}

/// Where the head stands against main's history, per changed metric: it gives way with the
/// changed rows, and as they do.
fn trend_block(report: &Report, defs: &[MetricDef]) -> Option<Block> {
    let lines = super::trend::lines(&report.trend, defs);
    (!lines.is_empty()).then(|| {
        Block::list(Class::Changed, super::trend::TITLE.into(), lines, "\n".into(), "lines against main's history")
    })
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 8)
}

/// The reference rule's overall line.
fn overall(comparisons: &[MetricComparison]) -> String {
    format!("**Overall: {}.**", summary::counts(Rule::Reference, comparisons))
}

/// Metrics whose wall time says less than their CPU time: wall inconclusive and CPU decided, or
/// wall unchanged and CPU changed. None when there is no such metric.
pub(super) fn cpu_findings(defs: &[MetricDef], comparisons: &[MetricComparison]) -> Vec<String> {
    let mut found = Vec::new();
    for (def, cpu) in defs.iter().zip(comparisons) {
        let Some(stem) = MetricKey::stem_if(&def.key, Facet::Cpu) else { continue };
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
                summary::word(wall.outcome(), Rule::Paired),
                summary::word(cpu.outcome(), Rule::Paired),
                estimate.unwrap_or_default()
            ));
        }
    }
    found
}

fn cpu_line(defs: &[MetricDef], comparisons: &[MetricComparison]) -> Option<String> {
    let found = cpu_findings(defs, comparisons);
    (!found.is_empty()).then(|| {
        format!("**CPU time:** {}.", found.iter().map(|f| escape_clipped(f, MAX_BULLET)).collect::<Vec<_>>().join("; "))
    })
}

fn details(out: &mut String, report: &Report, comparisons: &[MetricComparison], errors: &[String]) {
    let defs = report.metric_defs();
    let _ = writeln!(out, "<details><summary>Methodology and samples</summary>\n");
    let _ = writeln!(out, "Run `{}` started at {}.", escape(&report.run_id), escape(&report.started_at));
    let r = &report.resources;
    // Unknown (no sandbox, or a report from before it was recorded): nothing was bounded.
    let enforced = if r.disk_enforced == Some(true) { "enforced" } else { "not enforced" };
    let _ = writeln!(
        out,
        "Linux x64 sandboxes, {} vCPU, {:.1} GB RAM, {} GB disk ({enforced}).",
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
    let facts: Vec<String> = MACHINE_FACTS
        .iter()
        .filter_map(|k| report.base_side.facts.get(*k).filter(|v| !v.is_empty()).map(|v| format!("{k} {}", escape(v))))
        .collect();
    if !facts.is_empty() {
        let _ = writeln!(out, "Runtime: {}.", facts.join("; "));
    }
    if let Some(line) = release_line(report) {
        let _ = writeln!(out, "{line}");
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
    // The reference rule keeps the reference's details: no companion table.
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

/// The facts of the machine and its tools, shown once (the base side's); the machine's size is
/// said with the resources.
const MACHINE_FACTS: [&str; 9] = ["os", "kernel", "cpu", "machine", "node", "npm", "git", "python", "agent"];
const SIZE_FACTS: [&str; 2] = ["cpus", "memory_bytes"];

/// What each side released and installed: the artifacts' format, the optional prepare steps that
/// ran, the installation's format, the dependency inventory, and the versions the spec named
/// (the facts that are not the machine's). None when no side has any.
fn release_line(report: &Report) -> Option<String> {
    use sandbench_proto::plan::fact;
    let side = |name: &str, facts: &std::collections::BTreeMap<String, String>| {
        let mut parts = Vec::new();
        if let Some(format) = facts.get(fact::ARTIFACT_FORMAT) {
            parts.push(format!("artifacts {}", escape(format)));
        }
        match facts.get(fact::OPTIONAL_STEPS).map(String::as_str) {
            Some("") => parts.push("no optional step ran".to_string()),
            Some(steps) => parts.push(format!("optional steps run: {}", escape(steps))),
            None => {}
        }
        if let Some(format) = facts.get(fact::INSTALLATION_FORMAT) {
            parts.push(format!("installed as {}", escape(format)));
        }
        if let Some(inventory) = facts.get(fact::DEPENDENCY_INVENTORY) {
            parts.push(format!("dependency inventory {}", escape(inventory)));
        }
        let known =
            [fact::ARTIFACT_FORMAT, fact::OPTIONAL_STEPS, fact::INSTALLATION_FORMAT, fact::DEPENDENCY_INVENTORY];
        let named =
            facts.iter().filter(|(k, _)| ![&MACHINE_FACTS[..], &SIZE_FACTS, &known].concat().contains(&k.as_str()));
        parts.extend(named.map(|(k, v)| format!("{} {}", escape(k), escape(v))));
        (!parts.is_empty()).then(|| format!("{name}: {}", parts.join(", ")))
    };
    let sides: Vec<String> =
        [side("base", &report.base_side.facts), side("head", &report.head_side.facts)].into_iter().flatten().collect();
    (!sides.is_empty()).then(|| format!("Release: {}.", sides.join("; ")))
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
            "Floors come from the A/A noise profile of run `{}`{}: {}. {} A metric takes its floor from the profile where the profile has at least {} pairs of it, never below {:.2}% (`[report] min_floor`), else from the metric's relative floor or its absolute floor over the base median, capped at {:.0}%.",
            escape(&p.run_id),
            p.found.as_deref().map_or(String::new(), |f| format!(" ({}; `--noise none` opts out)", escape(f))),
            escape(&p.basis()),
            if p.single_run() {
                "One calibration cannot tell a systematic difference between identical sides from its own noise, so a floor is the farther end of its 95% interval, wider than pooled runs give; later A/A runs of the spec, image and machine narrow it."
            } else {
                "A floor bounds the systematic difference between identical sides: the farther end of the 95% interval of the difference a next run may carry, the runs' estimates pooled with their between-run spread counted (random effects); a run's own noise is its verdict interval's business."
            },
            super::decide::MIN_PROFILE_PAIRS,
            p.min_floor.unwrap_or(super::decide::PROFILE_FLOOR_MIN) * 100.0,
            super::decide::FLOOR_CAP * 100.0
        ),
        None => format!(
            "Floors are the metric's relative floor, or its absolute floor over the base median when larger, capped at {:.0}%; no A/A noise profile was given.",
            super::decide::FLOOR_CAP * 100.0
        ),
    };
    let family = report.family(&report.metric_defs());
    let share = crate::stats::FAMILY_SHARE;
    let margin = crate::stats::family_margin(family, report.alpha());
    let rate = report.alpha() * share * 100.0;
    let floors = match family {
        0 => floors,
        1 => format!(
            "{floors} The one metric judged against the profile has a floor of at least {margin:.2} standard errors of its mean log ratio (z at 1 − {share}α/2 less z at 1 − α/2; the pairs' sd or the profile's, the larger), so that a report of identical sides calls it changed at most about {rate:.1}% of the time."
        ),
        _ => format!(
            "{floors} The {family} metrics judged against the profile are one family: each floor is at least {margin:.2} standard errors of the metric's mean log ratio (z at 1 − {share}α/{} less z at 1 − α/2, Bonferroni; the pairs' sd or the profile's, the larger), so that a report of identical sides calls any of them changed at most about {rate:.1}% of the time.",
            2 * family
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
    let order = match report.order {
        // A report's order is resolved; `auto` is never in one.
        crate::spec::Order::Abba | crate::spec::Order::Auto => REFERENCE_METHOD[1],
        crate::spec::Order::Interleaved => {
            "Runs are interleaved one by one: within each trial base and head take single runs in turn (A, B, B, A, …, the first side alternating from trial to trial), both sandboxes ready and one timed at a time, so drift slower than one run affects both sides alike."
        }
        crate::spec::Order::Duet => {
            "Base and head take each run at the same time, each sandbox pinned to CPUs of its own (swapped every other trial), so the machine's slow spells fall on both sides alike."
        }
    };
    vec![
        REFERENCE_METHOD[0].to_string(),
        order.to_string(),
        "Medians shown. Each verdict comes from the pairs (trial t of base with trial t of head): the Hodges–Lehmann estimate of head/base − 1 and its interval (exact Wilcoxon from 6 pairs, t on log ratios for 3–5), against a floor: regressed when the whole interval is above +floor, improved when below −floor (the other way round for a metric better higher), no change when inside ±floor, inconclusive otherwise. Metrics with fewer than 3 pairs compare medians with the floor widened by both spreads.".to_string(),
        floors,
        looks,
        "The minimum detectable effect (MDE) is the change this run would call regressed with 80% power. \"Smallest change this run could see\": the change it tells apart from none with 80% power, (1 + MDE)/(1 + floor) − 1, which shrinks as 1/√pairs; the pairs that would bring it to the floor are pairs·(ln(1 + it)/ln(1 + floor))². A metric with a failed sample is incomplete.".to_string(),
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
            summary::word(c.outcome(), Rule::Paired)
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
