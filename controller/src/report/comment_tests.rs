//! The comment a reviewer reads: snapshots (insta) of an A/A run, a run with one regression, an
//! incomplete run and a run of 300 metrics; the size bound under 500 metrics and 500 long
//! warnings, and under more changed rows than fit; the lens of each row.

use std::collections::BTreeMap;

use super::tests::example;
use super::*;
use crate::stats::Outcome;

/// A deterministic spread: `n` values around 1 by ±`noise` (relative), from `seed`.
fn noisy(n: usize, noise: f64, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
            1.0 + noise * (2.0 * unit - 1.0)
        })
        .collect()
}

fn samples(values: &[f64]) -> Vec<Sample> {
    values
        .iter()
        .enumerate()
        .map(|(t, v)| Sample { trial: t as u32, sample: 0, value: Some(*v), error: None })
        .collect()
}

/// How a metric of [`run`] behaves: its base value, the spread of both sides, head/base.
#[derive(Clone, Copy)]
struct Shape {
    base: f64,
    noise: f64,
    ratio: f64,
}

const QUIET: Shape = Shape { base: 0.2, noise: 0.01, ratio: 1.0 };
const NOISY: Shape = Shape { base: 0.05, noise: 0.6, ratio: 1.0 };

/// A completed paired run of `metrics` (title, unit, group, shape), 6 pairs each.
fn run(metrics: &[(String, &str, &str, Shape)]) -> Report {
    let mut report = Report { rule: Rule::Paired, ..example(Status::Completed) };
    report.errors.clear();
    report.warnings = vec!["disk_gb (10 GB) is not enforced: sandboxes get no disk quota".into()];
    report.metrics.clear();
    report.expected.clear();
    report.base_side.metrics.clear();
    report.head_side.metrics.clear();
    for (i, (title, unit, group, shape)) in metrics.iter().enumerate() {
        let key = format!("m{i:03}");
        let scale = if *unit == "ms" { 1000.0 } else { 1e-6 };
        report.metrics.push(crate::spec::MetricDef {
            key: key.clone(),
            title: title.clone(),
            unit: unit.to_string(),
            scale,
            absolute: 0.0,
            relative: 0.05,
            group: group.to_string(),
            better: crate::stats::Better::Lower,
        });
        report.expected.insert(key.clone(), 6);
        let base: Vec<f64> = noisy(6, shape.noise, 2 * i as u64).iter().map(|v| v * shape.base).collect();
        let head: Vec<f64> =
            noisy(6, shape.noise, 2 * i as u64 + 1).iter().map(|v| v * shape.base * shape.ratio).collect();
        report.base_side.metrics.insert(key.clone(), samples(&base));
        report.head_side.metrics.insert(key, samples(&head));
    }
    report
}

/// The demo's shape: start-up, installs, memory and UI steps, a few noisy.
fn demo_like() -> Vec<(String, &'static str, &'static str, Shape)> {
    vec![
        ("Cold startup".into(), "ms", "CLI", QUIET),
        ("Warm startup".into(), "ms", "CLI", NOISY),
        ("Installation".into(), "ms", "CLI", QUIET),
        ("Idle memory, summed RSS".into(), "MB", "CLI", Shape { base: 1e8, noise: 0.005, ratio: 1.0 }),
        ("Python cell round trip".into(), "ms", "Python runtime", NOISY),
        ("Bash git status".into(), "ms", "Python runtime", QUIET),
        ("Search sessions by name".into(), "ms", "UI interactions", QUIET),
        ("Expand a session's 20 children".into(), "ms", "UI interactions", QUIET),
    ]
}

fn outcomes(report: &Report) -> Vec<Outcome> {
    report.analyze().iter().map(|c| c.outcome()).collect()
}

#[test]
fn an_a_a_comment_with_nothing_changed_fits_in_a_screen() {
    let report = run(&demo_like());
    let found = outcomes(&report);
    assert!(found.iter().all(|o| matches!(o, Outcome::NoClearChange | Outcome::Inconclusive)), "{found:?}");
    assert!(found.contains(&Outcome::Inconclusive), "the noisy ones: {found:?}");
    let md = markdown::render(&report);
    assert!(
        md.contains(
            "Nothing regressed, improved or went missing: 6 metrics unchanged within their floors, 2 inconclusive.\n"
        ),
        "{md}"
    );
    // What it could not resolve, said once, with the pairs that would.
    assert_eq!(md.matches("**Not resolved:**").count(), 1, "{md}");
    assert!(md.contains("| Warm startup | wall | ±5.00% | ±") && md.contains(" pairs (this run: 6) |"), "{md}");
    // A screen: what shows before the collapsed sections is short.
    let shown = &md[..md.find("<details>").unwrap()];
    assert!(
        shown.lines().count() <= 30,
        "{} lines before the first collapsed section:\n{shown}",
        shown.lines().count()
    );
    assert!(!md.contains("no change larger than"), "{md}");
    insta::assert_snapshot!("comment_a_a", md);
}

#[test]
fn a_comment_with_one_regression_leads_with_it() {
    let mut metrics = demo_like();
    metrics[0].3 = Shape { ratio: 1.25, ..QUIET };
    let report = run(&metrics);
    assert_eq!(outcomes(&report).iter().filter(|o| **o == Outcome::Regressed).count(), 1);
    let md = markdown::render(&report);
    let overall = md.find("**Overall: 1 regressed · 0 improved · 5 no change · 2 inconclusive.**").expect(&md);
    let row = md.find("| Cold startup | wall | 199.570 ms | 250.158 ms | ").expect(&md);
    let rest = md.find("5 metrics unchanged within their floors, 2 inconclusive.").expect(&md);
    let full = md.find("<details><summary>All 8 metrics</summary>").expect(&md);
    assert!(overall < row && row < rest && rest < full, "{md}");
    insta::assert_snapshot!("comment_one_regression", md);
}

#[test]
fn an_incomplete_run_says_so_first_and_lists_what_is_missing() {
    let mut report = run(&demo_like());
    report.status = Status::Partial;
    let head = report.head_side.metrics.get_mut("m002").unwrap();
    head[4] = Sample { trial: 4, sample: 0, value: None, error: Some("install.sh exited 1 | see the log".into()) };
    head.truncate(5);
    report.head_side.metrics.insert("m003".into(), Vec::new());
    let md = markdown::render(&report);
    let status = md.find("**Benchmark execution did not complete successfully.").expect(&md);
    assert!(status < md.find("**Overall: ").unwrap(), "{md}");
    assert!(md.contains("| Installation | wall | "), "{md}");
    assert!(md.contains("; incomplete | ±5.00% |") && md.contains("unavailable: a side has no sample"), "{md}");
    assert!(
        md.contains("**Failure diagnostics:**\n\n- head m002 trial 4: install.sh exited 1 &#124; see the log"),
        "{md}"
    );
    insta::assert_snapshot!("comment_incomplete", md);
}

/// 300 metrics over five groups: 3 regressed, 2 improved, one noisy in ten.
fn three_hundred() -> Report {
    let groups = ["CLI", "Python runtime", "Session transport", "UI interactions", "Product script"];
    let metrics: Vec<(String, &str, &str, Shape)> = (0..300)
        .map(|i| {
            let shape = match i {
                7 | 150 | 299 => Shape { ratio: 1.3, ..QUIET },
                42 | 201 => Shape { ratio: 0.7, ..QUIET },
                i if i % 10 == 3 => NOISY,
                _ => QUIET,
            };
            let (unit, base) = if i % 7 == 0 { ("MB", 5e7) } else { ("ms", shape.base) };
            (format!("Step {i}"), unit, groups[i % 5], Shape { base, ..shape })
        })
        .collect();
    run(&metrics)
}

#[test]
fn a_comment_of_300_metrics_shows_the_five_that_changed_and_collapses_the_rest() {
    let report = three_hundred();
    let md = markdown::render(&report);
    assert!(md.len() <= comment::RENDER_BYTES, "{}", md.len());
    assert!(md.contains("**Overall: 3 regressed · 2 improved · "), "{md}");
    let changed_table = &md[..md.find("<details>").unwrap()];
    for title in ["Step 7", "Step 150", "Step 299", "Step 42", "Step 201"] {
        assert!(changed_table.contains(&format!("| {title} | ")), "{title}: {md}");
    }
    assert_eq!(changed_table.matches("\n| Step ").count(), 5 + 10, "5 changed rows, 10 unresolved rows: {md}");
    assert!(changed_table.contains("… and 20 more in the full table."), "{md}");
    insta::assert_snapshot!("comment_300_metrics", md);
}

/// A warning of 500 characters full of what escaping multiplies.
fn long_warning(i: usize) -> String {
    let mut w = format!("warning {i}: ");
    while w.chars().count() < 500 {
        w.push_str("|`|` ");
    }
    w.chars().take(500).collect()
}

#[test]
fn five_hundred_metrics_and_500_long_warnings_fit_with_every_changed_row() {
    let metrics: Vec<(String, &str, &str, Shape)> = (0..500)
        .map(|i| {
            let shape = if i % 5 == 0 { Shape { ratio: 1.5, ..QUIET } } else { QUIET };
            (format!("A metric with a long title of some length, number {i}"), "ms", "CLI", shape)
        })
        .collect();
    let mut report = run(&metrics);
    report.warnings = (0..500).map(long_warning).collect();
    for rule in [Rule::Paired, Rule::Reference] {
        report.rule = rule;
        let md = markdown::render(&report);
        assert!(md.len() <= comment::RENDER_BYTES && md.chars().count() <= comment::MAX_BYTES, "{}", md.len());
        assert!(md.starts_with("<!-- sandbench:v1 -->\n") && md.contains(" status:completed -->\n"), "{md}");
        assert!(md.contains("**Overall: 100 regressed · 0 improved · 400 "), "{md}");
        for i in (0..500).step_by(5) {
            let row = format!("| A metric with a long title of some length, number {i} | ");
            assert!(md.contains(&row), "changed row {i} missing ({rule:?})");
        }
        // Unchanged rows gave way first, all of them, then all the details; warnings last, some
        // kept; each list says how many it left out and that report.html has them.
        let unchanged = if rule == Rule::Paired { "rows of the full table" } else { "unchanged rows" };
        let (gone, of) = left_out(&md, unchanged);
        assert!(gone > 0 && gone == of, "{gone} of {of} {unchanged}");
        let (gone, of) = left_out(&md, "lines of the methodology and samples");
        assert!(gone > 0 && gone == of, "{gone} of {of} lines of the details");
        let (gone, of) = left_out(&md, "warnings");
        assert!(gone > 0 && gone < of && of == 500, "{gone} of {of} warnings");
        assert!(md.contains("\n- warning 0: "), "the first warnings stay: {md}");
        assert_eq!(md.matches("report.html has them._").count(), 3, "{md}");
    }
}

/// The counts of the note saying how many `noun` a comment left out (`_N of M noun left out …_`).
fn left_out(md: &str, noun: &str) -> (usize, usize) {
    let tail = format!(" {noun} left out to keep this comment within GitHub's limit of 65,536 characters");
    let line = md
        .lines()
        .find(|l| l.starts_with('_') && l.contains(&tail))
        .unwrap_or_else(|| panic!("no note for {noun}: {md}"));
    let counts = line[1..line.find(&tail).unwrap()].replace(',', "");
    let (gone, of) = counts.split_once(" of ").unwrap_or_else(|| panic!("{line}"));
    (gone.parse().unwrap(), of.parse().unwrap())
}

#[test]
fn a_bisection_is_said_beside_the_changed_rows_inert_and_never_cut() {
    let metrics: Vec<(String, &str, &str, Shape)> = (0..500)
        .map(|i| (format!("A metric with a long title of some length, number {i}"), "ms", "CLI", QUIET))
        .collect();
    let mut report = run(&metrics);
    report.warnings = (0..500).map(long_warning).collect();
    report.bisections = vec![crate::report::BisectLine {
        key: "work.instructions".into(),
        words: " regressed +2.00 %: first bad commit 0123abcd 'ping @octocat, see owner/repo#1 | *x*' (+2.00 % of the +2.00 %)"
            .into(),
        dir: "bisect-work.instructions".into(),
        steps: 3,
        sandbox_seconds: 61.0,
        cost_usd: 0.0123,
    }];
    for rule in [Rule::Paired, Rule::Reference] {
        report.rule = rule;
        let md = markdown::render(&report);
        assert!(md.len() <= comment::RENDER_BYTES, "{}", md.len());
        let line = md.lines().find(|l| l.starts_with("**Bisect:** `work.instructions` regressed +2.00 %: first bad"));
        let line = line.unwrap_or_else(|| panic!("{rule:?}: {md}"));
        assert!(!line.contains("@octocat") && !line.contains("repo#1") && !line.contains(" | "), "{line}");
        assert!(line.ends_with("3 commits visited, 61 s of sandbox time (~$0.0123)."), "{line}");
    }
}

#[test]
fn more_changed_rows_than_fit_still_make_a_comment_that_posts() {
    let title = "x".repeat(110);
    let metrics: Vec<(String, &str, &str, Shape)> =
        (0..1500).map(|i| (format!("{title} {i}"), "ms", "CLI", Shape { ratio: 2.0, ..QUIET })).collect();
    let md = markdown::render(&run(&metrics));
    assert!(md.len() <= comment::RENDER_BYTES, "{}", md.len());
    assert!(md.contains("**Overall: 1500 regressed"), "{md}");
    assert!(md.contains(" of 1500 changed rows left out to keep this comment within GitHub's limit"), "{md}");
    assert!(md.contains("Local run; raw results are stored beside this report."), "the link stays: {md}");
}

#[test]
fn every_row_names_its_lens() {
    let mut report = run(&demo_like());
    // A CPU companion with samples: its own row, lens CPU.
    report.base_side.metrics.insert("m000.cpu".into(), samples(&[0.1; 6]));
    report.head_side.metrics.insert("m000.cpu".into(), samples(&[0.2; 6]));
    let md = markdown::render(&report);
    assert!(md.contains("| Cold startup \\(CPU\\) | CPU | 100.000 ms | 200.000 ms | "), "{md}");
    assert!(md.contains("| Idle memory, summed RSS | memory | "), "{md}");
    assert!(md.contains("| Cold startup | wall | "), "{md}");
    let expected: BTreeMap<&str, &str> = BTreeMap::from([("m000", "wall"), ("m000.cpu", "CPU"), ("m003", "memory")]);
    for def in report.metric_defs() {
        if let Some(lens) = expected.get(def.key.as_str()) {
            assert_eq!(lens::of(&def).name(), *lens, "{}", def.key);
        }
    }
}
