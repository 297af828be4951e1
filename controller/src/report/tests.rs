//! Whole-report snapshots (insta) reproducing the reference harness's test vectors.

use std::collections::BTreeMap;

use super::*;
use crate::spec::metrics::built_in;

const KEYS: [&str; 17] = [
    "cold",
    "warm",
    "install",
    "bundle",
    "disk",
    "rss",
    "kernel_start",
    "kernel_exec",
    "bash",
    "git_status",
    "output",
    "mixed",
    "interrupt",
    "snapshot",
    "restore",
    "kernel_rss",
    "loaded_rss",
];

fn samples(values: &[f64]) -> Vec<Sample> {
    values.iter().enumerate().map(|(t, v)| Sample { trial: t as u32, value: Some(*v), error: None }).collect()
}

/// The reference example: one metric regressed, one improved, one incomplete, one unavailable,
/// thirteen unchanged; a hostile error and a warning.
fn example(status: Status) -> Report {
    let metrics: Vec<MetricDef> = KEYS.iter().map(|k| built_in(k).unwrap()).collect();
    let expected: BTreeMap<String, u32> = KEYS
        .iter()
        .map(|k| {
            (
                k.to_string(),
                match *k {
                    "install" => 3,
                    "bundle" | "disk" => 1,
                    _ => 10,
                },
            )
        })
        .collect();
    let mut base = Side::default();
    let mut head = Side::default();
    for k in KEYS {
        let n = expected[k] as usize;
        let constant = match k {
            "bundle" | "disk" => 10_000_000.0,
            "rss" | "kernel_rss" | "loaded_rss" => 50_000_000.0,
            _ => 2.0,
        };
        base.metrics.insert(k.into(), samples(&vec![constant; n]));
        head.metrics.insert(k.into(), samples(&vec![constant; n]));
    }
    head.metrics.insert("cold".into(), samples(&[2.5; 10]));
    head.metrics.insert("warm".into(), samples(&[1.5; 10]));
    // One failed install on head, with hostile text.
    let mut install = samples(&[2.0, 2.0]);
    install.push(Sample {
        trial: 2,
        value: None,
        error: Some("<img src=x onerror=alert(1)> ![click](http://x) | `rm -rf`".into()),
    });
    head.metrics.insert("install".into(), install);
    base.metrics.insert("rss".into(), Vec::new());
    head.metrics.insert("bundle".into(), samples(&[10_001_000.0]));
    base.facts.insert("kernel".into(), "6.1.0".into());
    Report {
        schema_version: SCHEMA_VERSION,
        run_id: "20261129-000000-abcd".into(),
        spec_name: "Demo".into(),
        status,
        base: Revision { rev: "main".into(), commit: "1111111111111111111111111111111111111111".into() },
        head: Revision { rev: "pr".into(), commit: "2222222222222222222222222222222222222222".into() },
        image: "node:24-bookworm".into(),
        resources: Resources { cpus: 2.0, memory_bytes: 4_000_000_000, disk_gb: 20.0 },
        started_at: "2026-11-29T00:00:00Z".into(),
        finished_at: Some("2026-11-29T00:10:00Z".into()),
        failure_limit: 2,
        budget_usd: Some(1.0),
        metrics,
        expected,
        base_side: base,
        head_side: head,
        sandboxes: vec![SandboxRecord {
            id: "sandbench-x-base".into(),
            role: "base".into(),
            created_at: "2026-11-29T00:00:00Z".into(),
            removed_at: Some("2026-11-29T00:10:00Z".into()),
            seconds: 600.0,
            deleted: true,
            estimated_usd: 0.0219,
            peak_memory_bytes: 0,
            cost: None,
        }],
        errors: vec!["head install trial 2: failed | see <log>".into()],
        warnings: vec!["base: cannot collect the agent log".into()],
        comparisons: Vec::new(),
    }
}

#[test]
fn the_overall_line_and_tables_match_the_reference_example() {
    let md = markdown::render(&example(Status::Partial));
    assert!(
        md.contains("**Overall: 1 regressed · 1 improved · 13 no clear change · 1 incomplete · 1 unavailable.**"),
        "{md}"
    );
    assert!(md.contains("$`\\textcolor{#b9625f}{\\textsf{↑ +500.0 ms (+25.00\\%)}}`$"));
    assert!(md.contains("≈ +0.001 MB (+0.01%)"));
    for line in md.lines().filter(|l| l.starts_with("| ") && !l.contains("successful") && !l.contains("Paired")) {
        let in_details = md.find("<details>").unwrap() < md.find(line).unwrap();
        if !in_details {
            assert_eq!(line.matches(" | ").count(), 3, "not four cells: {line}");
        }
    }
    assert!(!md.contains("<img"), "hostile text must be escaped");
    assert!(md.contains("&lt;img src=x onerror=alert\\(1\\)&gt; \\!\\[click\\]\\(http://x\\) &#124; &#96;rm -rf&#96;"));
    assert!(md.contains("| Installation | 2/3 |") || md.contains("| Installation | 3/3 | 2/3 |"));
    insta::assert_snapshot!("report_md_partial", md);
}

#[test]
fn running_bodies_have_no_tables() {
    let md = markdown::render(&example(Status::Running));
    assert!(md.contains("status:running"));
    assert!(!md.contains("| Metric |"));
    assert!(!md.contains("500.0"));
    insta::assert_snapshot!("report_md_running", md);
}

#[test]
fn the_json_round_trips_and_is_stable() {
    let mut report = example(Status::Partial);
    report.comparisons = report.analyze();
    let json = serde_json::to_string_pretty(&report).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    assert!(!report.complete());
    insta::assert_snapshot!("report_json_partial", json);
}

#[test]
fn the_html_page_has_one_chart_per_metric_and_nothing_external() {
    let html = html::render(&example(Status::Partial));
    assert_eq!(html.matches("<svg").count(), KEYS.len());
    assert!(!html.contains("<script") && !html.contains("src=\"http") && !html.contains("href=\"http"));
    assert!(!html.contains("<img"));
}
