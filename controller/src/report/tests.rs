//! Whole-report snapshots (insta): under the reference rule they reproduce the reference
//! harness's test vectors (and must not change); under the paired rule they pin its comment.

use std::collections::BTreeMap;

use super::*;
use crate::spec::metrics::built_in;
use crate::stats::Outcome;

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
    values
        .iter()
        .enumerate()
        .map(|(t, v)| Sample { trial: t as u32, sample: 0, value: Some(*v), error: None })
        .collect()
}

/// The reference example: one metric regressed, one improved, one incomplete, one unavailable,
/// thirteen unchanged; a hostile error and a warning.
pub(super) fn example(status: Status) -> Report {
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
        sample: 0,
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
        resources: Resources { cpus: 2.0, memory_bytes: 4_000_000_000, disk_gb: 20.0, disk_enforced: None },
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
            placement: None,
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
        rule: Rule::Reference,
        order: Default::default(),
        attempt: 1,
        noise: None,
        sequential: None,
        shards: Vec::new(),
        comparisons: Vec::new(),
        conditions: Vec::new(),
        lens: None,
        bisections: Vec::new(),
        lens_runs: Vec::new(),
        trend: Vec::new(),
        estimates: Default::default(),
        record: false,
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
    // Escaped as the reference does, and its link broken (no live link from product text).
    assert!(md.contains(
        "&lt;img src=x onerror=alert\\(1\\)&gt; \\!\\[click\\]\\(http\u{200b}://x\\) &#124; &#96;rm -rf&#96;"
    ));
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

/// The reference example under the paired rule.
fn paired_example(status: Status) -> Report {
    Report { rule: Rule::Paired, ..example(status) }
}

/// One metric, `cold`, with the given base and head values (trial order) and 10 expected.
pub(super) fn one_metric(base: &[f64], head: &[f64]) -> Report {
    let mut r = paired_example(Status::Completed);
    r.metrics.retain(|m| m.key == "cold");
    r.expected = BTreeMap::from([("cold".to_string(), base.len() as u32)]);
    r.base_side.metrics = BTreeMap::from([("cold".to_string(), samples(base))]);
    r.head_side.metrics = BTreeMap::from([("cold".to_string(), samples(head))]);
    r.errors.clear();
    r
}

fn decision_of(report: &Report, key: &str) -> MetricComparison {
    report.analyze().into_iter().find(|c| c.key == key).unwrap()
}

#[test]
fn the_paired_rule_comment() {
    let md = markdown::render(&paired_example(Status::Partial));
    assert!(
        md.contains(
            "**Overall: 1 regressed · 1 improved · 13 no change · 0 inconclusive · 1 incomplete · 1 unavailable.**"
        ),
        "{md}"
    );
    assert!(md.contains("| Cold startup | wall | 2,000.0 ms | 2,500.0 ms | $`\\textcolor{#b9625f}{\\textsf{↑ +25.00\\% (+25.00\\% to +25.00\\%)}}`$ | ±20.00% |"));
    assert!(
        md.contains("| Compressed release artifacts | size | 10.00 MB | 10.00 MB | ≈ +0.001 MB (+0.01%) | ±0.66% |")
    );
    assert!(md.contains("| Installation | wall | 2.00 s | 2.00 s | +0.00 s (+0.00%); incomplete | ±50.00% |"), "{md}");
    // The changed rows come first, before the full table.
    let changed = md.find("| Cold startup | wall").unwrap();
    assert!(changed < md.find("<details><summary>All 17 metrics").unwrap(), "{md}");
    assert!(md.contains("Installation: 1 sample failed"), "{md}");
    insta::assert_snapshot!("report_md_partial_paired", md);
    let mut report = paired_example(Status::Partial);
    report.comparisons = report.analyze();
    let json = serde_json::to_string_pretty(&report).unwrap();
    assert!(json.contains("\"rule\": \"paired\""));
    assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
    insta::assert_snapshot!("report_json_partial_paired", json);
}

#[test]
fn a_wide_spread_does_not_hide_a_30_percent_regression() {
    // Base 1..10 s, head 1.3 × base: the head IQR (5.85 s) exceeds the delta, so the reference
    // rule sees no clear change; every pair says +30 %, so the paired rule regresses.
    let base: Vec<f64> = (1..=10).map(f64::from).collect();
    let head: Vec<f64> = base.iter().map(|b| b * 1.3).collect();
    let report = one_metric(&base, &head);
    let c = decision_of(&report, "cold");
    assert_eq!((c.outcome(), c.paired.estimate, c.paired.floor), (Outcome::Regressed, Some(0.3), 0.2), "{c:?}");
    let md = markdown::render(&report);
    assert!(md.contains("**Overall: 1 regressed · 0 improved · 0 no change · 0 inconclusive.**"), "{md}");
    assert!(md.contains("↑ +30.00\\% (+30.00\\% to +30.00\\%)"), "{md}");
    let reference = Report { rule: Rule::Reference, ..report };
    assert_eq!(decision_of(&reference, "cold").outcome(), Outcome::NoClearChange);
}

#[test]
fn a_ratio_of_0_82_at_a_20_percent_floor_is_what_the_comment_says() {
    let base: Vec<f64> = (0..10).map(|i| 2.0 + 0.01 * f64::from(i)).collect();
    let head: Vec<f64> = base.iter().map(|b| b * 0.82).collect();
    let report = one_metric(&base, &head);
    let c = decision_of(&report, "cold");
    assert_eq!(c.outcome(), Outcome::NoClearChange, "{c:?}");
    let md = markdown::render(&report);
    // The table shows the floor tested and the interval inside it; no arrow.
    assert!(md.contains("| Cold startup | 10 | -18.00% | -18.00% … -18.00% | ±20.00% |"), "{md}");
    assert!(md.contains("≈ -18.00% (-18.00% to -18.00%) | ±20.00% |"), "{md}");
    assert!(!md.contains('↓'));
    // Past the floor it is improved, and the comment says so.
    let head: Vec<f64> = base.iter().map(|b| b * 0.79).collect();
    let md = markdown::render(&one_metric(&base, &head));
    assert!(md.contains("↓ -21.00\\%"), "{md}");
}

#[test]
fn every_metric_says_what_it_could_have_seen() {
    // Noisy pairs around no change: inconclusive or no change, never a bare "≈".
    let base: Vec<f64> = (0..10).map(|i| 1.0 + 0.02 * f64::from(i % 4)).collect();
    let head: Vec<f64> = (0..10).map(|i| 1.0 + 0.02 * f64::from((i + 1) % 4)).collect();
    let report = one_metric(&base, &head);
    let c = decision_of(&report, "cold");
    let mde = c.paired.mde.unwrap();
    assert!(mde > c.paired.floor && mde < 0.5, "{c:?}");
    let md = markdown::render(&report);
    let row = md.lines().find(|l| l.starts_with("| Cold startup | wall | 1,0")).unwrap();
    assert!(!row.contains("no change larger than "), "said once, not on every row: {row}");
    assert!(md.contains(&format!("| {:.2}% |", mde * 100.0)), "the MDE column: {md}");
}

#[test]
fn dropped_and_failed_samples_are_said() {
    let mut report = one_metric(&[1.0, 1.0, 0.0, 1.0, 1.0, 1.0], &[1.0, 1.0, 1.0, -1.0, 1.0, 1.0]);
    report.head_side.metrics.get_mut("cold").unwrap()[5] =
        Sample { trial: 5, sample: 0, value: None, error: Some("boom".into()) };
    let c = decision_of(&report, "cold");
    assert_eq!((c.outcome(), c.paired.pairs, c.paired.dropped), (Outcome::Incomplete, 3, 2), "{c:?}");
    let notes = c.notes.join("; ");
    assert!(notes.contains("2 pairs left out: a value was zero or negative") && notes.contains("1 sample failed"));
    assert!(notes.contains("1 sample without the other side's trial"), "{notes}");
    let md = markdown::render(&report);
    assert!(md.contains("| Cold startup | 3 (2 dropped) |"), "{md}");
}

#[test]
fn markers_carry_the_attempt_and_cannot_be_broken_out_of() {
    let mut report = example(Status::Completed);
    report.attempt = 3;
    let md = markdown::render(&report);
    assert_eq!(
        md.lines().nth(1),
        Some("<!-- run:20261129-000000-abcd:3 head:2222222222222222222222222222222222222222 -->")
    );
    report.run_id = "x --> <script>".into();
    report.head.commit = "abc-->\n<!--".into();
    let md = markdown::render(&report);
    let marker = md.lines().nth(1).unwrap();
    assert_eq!(marker, "<!-- run:x%20-%2D%3E%20%3Cscript%3E:3 head:abc-%2D%3E%0A%3C%21-%2D -->");
    assert_eq!(md.lines().take(3).map(|l| l.matches("-->").count()).sum::<usize>(), 3);
    assert_eq!(super::attempt_from(Some("7")), 7);
    for bad in [None, Some(""), Some("0"), Some("-1"), Some("2x")] {
        assert_eq!(super::attempt_from(bad), 1, "{bad:?}");
    }
}

#[test]
fn text_from_specs_revisions_and_sandboxes_cannot_break_a_table() {
    let mut report = paired_example(Status::Completed);
    let cold = report.metrics.iter_mut().find(|m| m.key == "cold").unwrap();
    cold.title = "Cold | start\n<b>".into();
    cold.unit = "ms|x".into();
    cold.group = "CLI".into();
    report.head.commit = "`rm -rf`|<img>".into();
    report.warnings = vec!["bad | warning\nsecond <line>".into()];
    let md = markdown::render(&report);
    for line in md.lines().filter(|l| l.starts_with("| Cold")) {
        assert!(!line.contains("<b>") && !line.contains("ms|x"), "{line}");
        assert_eq!(line.matches(" | ").count() + 1, line.matches('|').count() - 1, "{line}");
    }
    assert!(md.contains("Cold &#124; start &lt;b&gt;"), "{md}");
    assert!(md.contains("- bad &#124; warning second &lt;line&gt;"), "{md}");
    assert!(md.contains("Head `&#96;rm -rf&#96;` compared"), "{md}");
    let html = html::render(&report);
    assert!(!html.contains("<b>") && !html.contains("<img>") && html.contains("Cold | start\n&lt;b&gt;"));
}

#[test]
fn cpu_companions_get_their_own_verdicts_and_the_headline_says_when_they_are_clearer() {
    // Wall time: noisy, inconclusive. CPU time: +30 %, tight.
    let base: Vec<f64> = (0..10).map(|i| 1.0 + 0.3 * f64::from(i % 2)).collect();
    let head: Vec<f64> = (0..10).map(|i| 1.0 + 0.3 * f64::from((i + 1) % 2)).collect();
    let mut report = one_metric(&base, &head);
    let cpu_base: Vec<f64> = (0..10).map(|i| 0.5 + 0.001 * f64::from(i)).collect();
    let cpu_head: Vec<f64> = cpu_base.iter().map(|v| v * 1.3).collect();
    report.base_side.metrics.insert("cold.cpu".into(), samples(&cpu_base));
    report.head_side.metrics.insert("cold.cpu".into(), samples(&cpu_head));
    let defs = report.metric_defs();
    assert_eq!(defs.iter().map(|d| d.title.as_str()).collect::<Vec<_>>(), ["Cold startup", "Cold startup (CPU)"]);
    assert_eq!((defs[1].unit.as_str(), defs[1].scale), ("ms", 1000.0));
    assert_eq!(decision_of(&report, "cold").outcome(), Outcome::Inconclusive);
    assert_eq!(decision_of(&report, "cold.cpu").outcome(), Outcome::Regressed);
    let md = markdown::render(&report);
    assert!(
        md.contains("**CPU time:** Cold startup — wall time inconclusive, CPU time regressed \\(+30.00%\\).\n"),
        "{md}"
    );
    assert!(md.contains("| Cold startup \\(CPU\\) | CPU | 504.5 ms | 655.9 ms | $`\\textcolor"), "{md}");
    assert!(html::render(&report).contains("CPU time: Cold startup — wall time inconclusive, CPU time regressed"));
}

/// Ten A/A pairs of `cold` whose log ratios spread by about ±2 %.
fn a_a_report(pairs: usize) -> Report {
    let base: Vec<f64> = (0..pairs).map(|i| 1.0 + 0.001 * i as f64).collect();
    let head: Vec<f64> =
        base.iter().enumerate().map(|(i, b)| b * (1.0 + 0.02 * [-1.0, 0.5, 1.0, -0.5][i % 4])).collect();
    one_metric(&base, &head)
}

#[test]
fn a_noise_profile_sets_floors_only_from_ten_pairs() {
    let profile = NoiseProfile::from_report(&a_a_report(12));
    let noise = &profile.metrics["cold"];
    assert_eq!(noise.pairs, 12);
    assert!(noise.floor > 0.005 && noise.floor < 0.03, "{noise:?}");
    // A later run: +5 % with little noise. The spec's 20 % floor calls it no change; the
    // profile's floor lets it regress.
    let base: Vec<f64> = (0..12).map(|i| 1.0 + 0.01 * f64::from(i)).collect();
    let head: Vec<f64> = base.iter().enumerate().map(|(i, b)| b * (1.05 + 0.002 * [-1.0, 1.0][i % 2])).collect();
    let mut later = one_metric(&base, &head);
    assert_eq!(decision_of(&later, "cold").outcome(), Outcome::NoClearChange);
    later.noise = Some(profile.clone());
    let c = decision_of(&later, "cold");
    assert_eq!((c.outcome(), c.paired.floor), (Outcome::Regressed, (noise.floor * 1e4).round() / 1e4), "{c:?}");
    assert!(markdown::render(&later).contains("Floors come from the A/A noise profile of run"));
    // Three pairs are not a calibration: the spec's floor, and the report says why.
    later.noise = Some(NoiseProfile::from_report(&a_a_report(3)));
    let c = decision_of(&later, "cold");
    assert_eq!((c.outcome(), c.paired.floor), (Outcome::NoClearChange, 0.2));
    assert!(c.notes[0].contains("has 3 pairs of this metric (at least 10 needed)"), "{:?}", c.notes);
    assert!(later.noise.as_ref().unwrap().warning(Rule::Paired).unwrap().contains("fewer than 10 pairs of cold"));
    // An old profile (no pair counts) is never used.
    let old: NoiseProfile =
        serde_json::from_str(r#"{"spec":"Demo","run_id":"r","image":"i","relative":{"cold":0.0165}}"#).unwrap();
    assert!(old.floor("cold").is_err() && old.uncalibrated() == ["cold"]);
}

#[test]
fn an_adaptive_report_uses_its_look_and_says_what_to_do_next() {
    let mut report = a_a_report(10);
    assert_eq!(report.alpha(), 0.05);
    assert_eq!(report.next_look(1), None);
    let design = crate::stats::sequential::Design { alpha: 0.05, initial: 10, max_pairs: 20 };
    report.sequential = Some(Sequential { design, look: 1, gate: vec!["cold".into()], ended: String::new() });
    assert!((report.alpha() - design.alpha_at(1)).abs() < 1e-12);
    // ±2 % noise against a 20 % floor: decided (no change) at the first look.
    assert_eq!(report.next_look(1), Some(Next::Decided));
    let c = decision_of(&report, "cold");
    assert!((c.paired.confidence.unwrap() - (1.0 - design.alpha_at(1))).abs() < 1e-12);
    assert!(markdown::render(&report).contains("this report is look 1 at 99.44% confidence"));
    // With a 1 % floor it needs the next look's pairs.
    report.metrics[0].relative = 0.01;
    report.metrics[0].absolute = 0.0;
    assert_eq!(report.next_look(1), Some(Next::MorePairs { pairs: 20, undecided: vec!["cold".into()] }));
}

#[test]
fn the_cpus_each_sandbox_was_given_are_stated() {
    let mut report = example(Status::Completed);
    report.base_side.cpus = vec![SandboxCpus::provisioned("base0", 2_000_000_000, "0")];
    report.head_side.cpus = vec![
        SandboxCpus::provisioned("head0", 2_000_000_000, "0-1"),
        SandboxCpus::provisioned("head1", 1_500_000_000, ""),
    ];
    let md = markdown::render(&report);
    assert!(
        md.contains("CPUs as provisioned: base0: 2 vCPU quota, but pinned to CPU 0: at most 1 CPU; head0: 2 vCPU on CPUs 0-1; head1: 1.5 vCPU, not pinned."),
        "{md}"
    );
    assert_eq!(SandboxCpus::provisioned("s", 0, "0-3,6,8-9").pinned_count(), Some(7));
    assert_eq!(SandboxCpus::provisioned("s", 0, "").pinned_count(), None);
    assert_eq!(SandboxCpus::provisioned("s", 0, "2").describe(), "s: no CPU quota on CPU 2");
    // Kept in the JSON, and absent from it when unknown (older reports read alike).
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains(r#""cpuset":"0-1""#), "{json}");
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back.head_side.cpus, report.head_side.cpus);
    assert!(!serde_json::to_string(&example(Status::Completed)).unwrap().contains("\"cpus\":["));
}

/// Every text a report carries that came from a spec, a revision or a sandbox, set to an attack:
/// marker breakouts, tags, table pipes, newlines, terminal escapes, a `%` unit, a revision that
/// is not ASCII.
fn hostile_report(rule: Rule) -> Report {
    const ATTACK: &str = "x --> <!-- <script>alert(1)</script> | a\nb \u{1b}[31mred\u{1b}]0;title\u{7} ";
    let mut report = Report { rule, ..example(Status::Failed) };
    report.run_id = format!("run{ATTACK}");
    report.spec_name = format!("spec{ATTACK}");
    report.image = format!("image{ATTACK}");
    report.head = Revision { rev: format!("aéééé{ATTACK}"), commit: "aéééé".into() };
    report.base = Revision { rev: "é".into(), commit: format!("é{ATTACK}") };
    for m in &mut report.metrics {
        m.title = format!("{}{ATTACK}", m.title);
        m.group = format!("{}{ATTACK}", m.group);
    }
    report.metrics[0].unit = "%".into();
    report.metrics[1].unit = "<script>".into();
    report.errors = vec![format!("error{ATTACK}")];
    report.warnings = vec![format!("warning{ATTACK}")];
    report.base_side.facts.insert("os".into(), format!("os{ATTACK}"));
    report.sandboxes[0].role = format!("role{ATTACK}");
    report
}

#[test]
fn a_hostile_report_renders_inert() {
    for rule in [Rule::Reference, Rule::Paired] {
        let report = hostile_report(rule);
        let md = markdown::render(&report);
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines[0] == "<!-- sandbench:v1 -->" && lines[1].starts_with("<!-- run:"), "{md}");
        assert_eq!(md.matches("-->").count(), 3, "only the three markers close a comment:\n{md}");
        assert_eq!(md.matches("<!--").count(), 3, "{md}");
        assert!(!md.contains("<script") && !md.contains('\u{1b}') && !md.contains('\u{7}'), "{md}");
        assert!(!md.contains("<!-- <"), "{md}");
        assert!(md.contains("Head `aéééé` compared with base `é"), "{md}");
        for line in lines.iter().filter(|l| l.starts_with("| ") && l.ends_with(" |")) {
            let cells = line.matches(" | ").count() + 1;
            assert!((4..=8).contains(&cells), "a text broke a table row: {line}");
        }
        // A `%` unit is plain text, not a MathJax cell it would break.
        let cold = lines.iter().find(|l| l.starts_with("| Cold startup")).unwrap();
        assert!(!cold.contains("textcolor") && cold.contains("%"), "{cold}");
        let html = html::render(&report);
        assert!(!html.contains("<script") && !html.contains("<!--") && !html.contains('\u{1b}'), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{html}");
    }
}

#[test]
fn a_crafted_report_json_is_rendered_again_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let mut report = hostile_report(Rule::Paired);
    std::fs::write(dir.path().join("report.json"), serde_json::to_vec(&report).unwrap()).unwrap();
    let again = crate::run::rerender(dir.path()).unwrap();
    report.comparisons = report.analyze();
    assert_eq!(again.head.commit, "aéééé");
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(!md.contains("<script") && !md.contains('\u{1b}'));
    // Not a report, or far too big for one: a clear error.
    std::fs::write(dir.path().join("report.json"), b"{\"x\": 1}").unwrap();
    let err = crate::run::rerender(dir.path()).unwrap_err().to_string();
    assert!(err.contains("is not a sandbench report"), "{err}");
}

/// `runs` per trial of `cold` (each a list of run values), as samples numbered from 0.
fn runs_of(trials: &[Vec<f64>]) -> Vec<Sample> {
    trials
        .iter()
        .enumerate()
        .flat_map(|(t, runs)| {
            runs.iter().enumerate().map(move |(i, v)| Sample {
                trial: t as u32,
                sample: i as u32,
                value: Some(*v),
                error: None,
            })
        })
        .collect()
}

#[test]
fn a_trial_of_several_runs_is_one_pair_by_their_median_with_its_spread_and_warnings_shown() {
    let base: Vec<Vec<f64>> = (0..6).map(|_| vec![1.00, 1.01, 0.99, 1.00, 1.02]).collect();
    let mut head: Vec<Vec<f64>> = base.iter().map(|r| r.iter().map(|v| v * 1.3).collect()).collect();
    // A slow first run in head's trial 2, an outlier later in base's trial 4.
    head[2][0] = 5.0;
    let mut base = base;
    base[4][3] = 9.0;
    let mut report = one_metric(&[0.0; 6], &[0.0; 6]);
    report.base_side.metrics.insert("cold".into(), runs_of(&base));
    report.head_side.metrics.insert("cold".into(), runs_of(&head));
    let c = decision_of(&report, "cold");
    assert_eq!((c.base_successful, c.base_attempted, c.head_attempted, c.paired.pairs), (6, 6, 6, 6));
    assert_eq!(c.comparison.base_median, Some(1.0));
    assert_eq!(c.outcome(), Outcome::Regressed, "the medians: +30 % in every trial, outliers or not");
    assert_eq!(c.runs.len(), 12);
    let first = &c.runs[0];
    assert_eq!((first.side.as_str(), first.trial, first.runs, first.min, first.max), ("base", 0, 5, 0.99, 1.02));
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(c.warnings[0].starts_with("base cold trial 4: 1 of 5 runs are statistical outliers"), "{:?}", c.warnings);
    assert!(
        c.warnings[1].starts_with("head cold trial 2: the first run was much slower than the rest (5,000"),
        "{:?}",
        c.warnings
    );
    let md = markdown::render(&report);
    assert!(md.contains("**Measurement warnings — runs of a trial that disagree:**"), "{md}");
    assert!(md.contains("- head cold trial 2: the first run was much slower"), "{md}");
    assert!(md.contains("| Metric | Side | Trial | Runs | Min | Median | Max |"), "{md}");
    assert!(md.contains("| Cold startup | base | 0 | 5 | 990"), "{md}");
    let html = html::render(&report);
    assert!(html.contains("<table class=\"runs\">") && html.contains("head cold trial 2: the first run"), "{html}");
    // The run index survives report.json.
    let json: Report = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    assert_eq!(json.head_side.metrics["cold"][7].sample, 2);
    // A failed run fails its trial.
    report.head_side.metrics.get_mut("cold").unwrap()[1] =
        Sample { trial: 0, sample: 1, value: None, error: Some("boom".into()) };
    let c = decision_of(&report, "cold");
    assert_eq!((c.head_successful, c.head_attempted, c.outcome()), (5, 6, Outcome::Incomplete));
}

#[test]
fn a_command_declared_in_milliseconds_is_shown_in_milliseconds() {
    // The agent records 0.137 s for a 137 ms command; the spec declares only `unit = "ms"`.
    let spec = "name = \"u\"\n[install]\ncommand = \"true\"\n[[runtime.command]]\nmetric = \"probe\"\nrun = \"node cli.js\"\n[metrics.probe]\ntitle = \"Probe\"\nunit = \"ms\"\n";
    let plan = crate::spec::parse(std::path::Path::new("bench.toml"), spec).unwrap();
    let mut report = one_metric(&[0.137; 6], &[0.137; 6]);
    report.metrics = plan.metrics.iter().filter(|m| m.key == "probe").cloned().collect();
    report.expected = BTreeMap::from([("probe".to_string(), 6)]);
    for side in [&mut report.base_side, &mut report.head_side] {
        let samples = side.metrics.remove("cold").unwrap();
        side.metrics.insert("probe".into(), samples);
    }
    let md = markdown::render(&report);
    assert!(md.contains("| Probe | wall | 137.000 ms | 137.000 ms |"), "{md}");
    assert!(!md.contains("0.137 ms") && !md.contains("0.14 ms"), "{md}");
    assert!(html::render(&report).contains("137.000 ms"));
}

#[test]
fn each_side_says_what_it_released_and_how_it_was_installed() {
    let mut report = example(Status::Completed);
    let md = markdown::render(&report);
    assert!(!md.contains("Release:"), "no side recorded a release fact: {md}");
    let facts = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    report.base_side.facts = facts(&[
        ("node", "v24.19.0"),
        ("machine", "x86_64"),
        ("cpus", "2"),
        ("artifact_format", "npm-tarball"),
        ("optional_steps", ""),
        ("installation_format", "script"),
        ("dependency_inventory", "ok"),
    ]);
    report.head_side.facts = facts(&[
        ("node", "v24.19.0"),
        ("artifact_format", "npm-tarball+linux-x64-single-executable"),
        ("optional_steps", "compiled"),
        ("installation_format", "compiled"),
        ("dependency_inventory", "exit status 1 (a note, not a failure; see installed-dependencies.json)"),
        ("sea", "<b>v24</b>"),
    ]);
    let md = markdown::render(&report);
    assert!(md.contains("Runtime: machine x86\\_64; node v24.19.0."), "{md}");
    let line = md.lines().find(|l| l.starts_with("Release: ")).unwrap_or_else(|| panic!("{md}"));
    assert_eq!(
        line,
        "Release: base: artifacts npm-tarball, no optional step ran, installed as script, dependency inventory ok; \
         head: artifacts npm-tarball+linux-x64-single-executable, optional steps run: compiled, installed as compiled, \
         dependency inventory exit status 1 \\(a note, not a failure; see installed-dependencies.json\\), sea &lt;b&gt;v24&lt;/b&gt;."
    );
}

#[test]
fn the_reference_rule_keeps_the_references_layout_not_its_bytes() {
    let md = markdown::render(&example(Status::Partial));
    // The reference's parts, in its order and words.
    let parts = [
        "### Demo performance — partial\n\n",
        "**Benchmark execution did not complete successfully. Missing measurements are not performance wins.**",
        "**Failure diagnostics:**",
        "See the saved per-trial logs and terminal transcripts for details.",
        "**Operational warnings — log collection or sandbox cleanup needs attention:**",
        "These warnings do not change measurement completeness.",
        "**Overall: 1 regressed · 1 improved · 13 no clear change · 1 incomplete · 1 unavailable.**",
        "| Cold startup |",
        "\n**Python runtime**\n\n| Metric |",
        "**Sandbox cost: ~$",
        "Local run; raw results are stored beside this report.",
        "<details><summary>Methodology and samples</summary>",
        "Each side stops a phase after 2 identical consecutive failures.",
        "| Metric | Base successful/attempted | Head successful/attempted | Base spread | Head spread |",
    ];
    let mut from = 0;
    for part in parts {
        let at = md[from..].find(part).unwrap_or_else(|| panic!("{part:?} not after byte {from} of:\n{md}"));
        from += at + part.len();
    }
    assert!(md.contains("$`\\textcolor{#b9625f}{\\textsf{↑ +500.0 ms (+25.00\\%)}}`$"), "{md}");
    // Its own: the markers (never the reference's, whose comment it would take), base and head.
    assert!(md.starts_with("<!-- sandbench:v1 -->\n") && !md.contains("prime-agent-benchmark"), "{md}");
    assert!(md.contains("Head `22222222` compared with base `11111111`.") && !md.contains("This PR"), "{md}");
    assert_eq!(md.matches("| Metric | Base | Head | Change |\n| --- | ---: | ---: | ---: |").count(), 2);
}

/// `cold` redefined as a throughput, better higher, at these values.
fn throughput(base: &[f64], head: &[f64]) -> Report {
    let mut report = one_metric(base, head);
    report.metrics[0].better = crate::stats::Better::Higher;
    report.metrics[0].title = "Throughput".into();
    report
}

#[test]
fn a_metric_better_higher_is_judged_the_right_way_round_everywhere() {
    let base: Vec<f64> = (0..10).map(|i| 100.0 + f64::from(i)).collect();
    let halved: Vec<f64> = base.iter().map(|b| b * 0.5).collect();
    let report = throughput(&base, &halved);
    let c = decision_of(&report, "cold");
    assert_eq!((c.outcome(), c.paired.verdict), (Outcome::Regressed, crate::stats::Verdict::Regressed), "{c:?}");
    let md = markdown::render(&report);
    assert!(md.contains("**Overall: 1 regressed · 0 improved"), "{md}");
    // The arrow says where the value went (down), the colour that it is a regression (red).
    let red = format::colour(Outcome::Regressed, Some(-0.5));
    assert!(md.contains(&format!("\\textcolor{{{red}}}{{\\textsf{{↓ -50.00\\%")), "{md}");
    assert!(!md.contains('↑'), "{md}");
    let html = html::render(&report);
    assert!(html.contains("data-outcome=\"regressed\"") && html.contains("(CLI, wall, higher is better)"), "{html}");
    let mut judged = report.clone();
    judged.comparisons = judged.analyze();
    let lines = summary::terminal(&judged);
    assert!(lines.iter().any(|l| l.contains("regressed") && l.contains("Throughput") && l.contains('↓')), "{lines:?}");
    // The reference rule turns the same way.
    let reference = Report { rule: Rule::Reference, ..report.clone() };
    assert_eq!(decision_of(&reference, "cold").outcome(), Outcome::Regressed);
    // Doubled: improved, an up arrow in green.
    let doubled: Vec<f64> = base.iter().map(|b| b * 2.0).collect();
    let report = throughput(&base, &doubled);
    assert_eq!(decision_of(&report, "cold").outcome(), Outcome::Improved);
    let md = markdown::render(&report);
    assert!(md.contains("**Overall: 0 regressed · 1 improved"), "{md}");
    assert!(md.contains("↑ +100.00\\%") && !md.contains('↓'), "{md}");
    // Kept in report.json only when higher: a lower metric's JSON is as before.
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"better\":\"higher\""), "{json}");
    assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
    assert!(!serde_json::to_string(&one_metric(&base, &halved)).unwrap().contains("better"));
}
