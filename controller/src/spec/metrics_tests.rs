//! `[metrics]` as a spec writes it: direction, families and their precedence, facets that
//! inherit, distributions in place of their stem, the judged peak RSS of scripts.

use std::collections::BTreeMap;
use std::path::Path;

use sandbench_proto::metric::Distribution;

use super::raw::RawSpec;
use super::validator::Validator;
use super::*;
use crate::stats::Better;

fn errors(text: &str) -> Vec<String> {
    match parse(Path::new("bench.toml"), text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(SpecErrors(errors)) => errors.iter().map(|e| e.to_string()).collect(),
    }
}

/// A spec with a script reporting a matrix of keys, and `metrics` after it.
fn spec(metrics: &str) -> String {
    format!(
        r#"name = "m"
[install]
command = "true"
[[runtime.command]]
metric = "rt"
run = "true"
[[runtime.script]]
name = "store"
run = "node store.js"
metrics = ["store.jsonl.replay", "store.sqlite.replay", "store.sqlite.ops"]
[metrics.rt]
title = "Request"
unit = "ms"
{metrics}"#
    )
}

const FAMILIES: &str = r#"[metrics."store.*.replay"]
title = "Replay after reopen, {1}"
unit = "ms"
absolute = 0.0005
[metrics."store.*.ops"]
title = "Throughput, {1}"
unit = "ops/s"
better = "higher"
"#;

fn def<'p>(plan: &'p Plan, key: &str) -> &'p MetricDef {
    plan.metrics.iter().find(|m| m.key == key).unwrap_or_else(|| panic!("{key}: {:?}", plan.metrics))
}

#[test]
fn a_family_defines_a_matrix_of_keys_and_says_which_way_is_better() {
    let plan = parse(Path::new("bench.toml"), &spec(FAMILIES)).unwrap();
    assert_eq!(def(&plan, "store.jsonl.replay").title, "Replay after reopen, jsonl");
    assert_eq!(def(&plan, "store.sqlite.replay").absolute, 0.0005);
    let ops = def(&plan, "store.sqlite.ops");
    assert_eq!((ops.title.as_str(), ops.unit.as_str(), ops.better), ("Throughput, sqlite", "ops/s", Better::Higher));
    assert_eq!(def(&plan, "rt").better, Better::Lower);
    // The script's peak RSS is judged, with its built-in definition.
    let rss = def(&plan, "script.store.maxrss");
    assert_eq!((rss.title.as_str(), rss.unit.as_str()), ("Peak RSS, script store", "MB"));
    // The blocks stay in the plan for the keys only a run names.
    let later = plan.definitions.resolve("store.memory.replay", &plan.metrics).unwrap().unwrap();
    assert_eq!(later.title, "Replay after reopen, memory");
    assert_eq!(plan.definitions.resolve("store.memory.size", &plan.metrics).unwrap(), None);
}

#[test]
fn keys_no_block_defines_and_malformed_families_are_errors_naming_them() {
    // Only the replay family: `store.sqlite.ops` is recorded but undefined.
    let replay_only = spec(&FAMILIES[..FAMILIES.find("[metrics.\"store.*.ops\"]").unwrap()]);
    let found = errors(&replay_only);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("bench.toml:10: metrics.store.sqlite.ops: this metric is recorded but not defined"));
    let clash = spec(&format!("{FAMILIES}[metrics.\"store.sqlite.*\"]\ntitle = \"x\"\nunit = \"ms\"\n"));
    assert_eq!(
        errors(&clash),
        [
            "bench.toml:22: metrics.store.sqlite.*: this family and \"store.*.replay\" (line 14) can both define the same key with as many `*`: make one more specific"
        ]
    );
    let bad = spec(&format!("{FAMILIES}[metrics.\"store.x*.size\"]\ntitle = \"x\"\nunit = \"ms\"\n"));
    assert!(
        errors(&bad)[0].contains("metrics.store.x*.size: \"store.x*.size\": each `*` stands for one whole segment")
    );
    let beyond = spec(&FAMILIES.replace("Replay after reopen, {1}", "Replay {2}"));
    assert_eq!(errors(&beyond), ["bench.toml:14: metrics.store.*.replay: uses {2} but the key has 1 `*`"]);
    let sideways = spec(&FAMILIES.replace("better = \"higher\"", "better = \"up\""));
    assert_eq!(
        errors(&sideways),
        ["bench.toml:21: metrics.store.*.ops.better: expected \"lower\" or \"higher\", found \"up\""]
    );
    // An exact block still beats a family, and one nothing records is still an error.
    let exact = spec(&format!("{FAMILIES}[metrics.\"store.sqlite.replay\"]\ntitle = \"SQLite\"\nunit = \"s\"\n"));
    assert_eq!(def(&parse(Path::new("bench.toml"), &exact).unwrap(), "store.sqlite.replay").title, "SQLite");
    let unused = spec(&format!("{FAMILIES}[metrics.never]\ntitle = \"x\"\nunit = \"ms\"\n"));
    assert_eq!(errors(&unused), ["bench.toml:22: metrics.never: defined, but no phase records it"]);
}

/// The definitions of `text`'s `[metrics]` for the plan of `spec(FAMILIES)` with
/// `distributions` set as the steps' validator sets them.
fn with_distributions(text: &str, distributions: &[(&str, Distribution)]) -> Result<Vec<MetricDef>, Vec<String>> {
    let mut plan = parse(Path::new("bench.toml"), &spec(FAMILIES)).unwrap();
    plan.agent.distributions =
        distributions.iter().map(|(k, d)| (k.to_string(), d.clone())).collect::<BTreeMap<_, _>>();
    let raw: RawSpec = toml::from_str(text).unwrap();
    let mut v = Validator { file: "bench.toml".into(), text, errors: Vec::new() };
    let (defs, _) = v.metric_definitions(&plan, &raw.metrics);
    if v.errors.is_empty() { Ok(defs) } else { Err(v.errors.iter().map(|e| e.to_string()).collect()) }
}

#[test]
fn a_distribution_is_judged_by_its_facets_each_inheriting_the_stems_definition() {
    let three = Distribution { percentiles: vec![50, 95, 99], max: true };
    let text = spec(&format!("{FAMILIES}[metrics.\"rt.p99\"]\nrelative = 0.3\n"));
    let defs = with_distributions(&text, &[("rt", three.clone())]).unwrap();
    let keys: Vec<&str> = defs.iter().map(|d| d.key.as_str()).collect();
    assert!(!keys.contains(&"rt"), "{keys:?}");
    let at = keys.iter().position(|k| *k == "rt.p50").unwrap();
    assert_eq!(keys[at..at + 4], ["rt.p50", "rt.p95", "rt.p99", "rt.max"]);
    let p95 = &defs[at + 1];
    // The command records seconds; the stem's unit, ms, sets the scale of every facet.
    assert_eq!((p95.title.as_str(), p95.unit.as_str(), p95.scale, p95.relative), ("Request (p95)", "ms", 1000.0, 0.2));
    assert_eq!((defs[at + 2].title.as_str(), defs[at + 2].relative), ("Request (p99)", 0.3));
    assert_eq!(defs[at + 3].title, "Request (max)");
    // A family's distribution, named by its pattern.
    let defs =
        with_distributions(&spec(FAMILIES), &[("store.*.ops", Distribution { percentiles: vec![90], max: false })])
            .unwrap();
    let p90 = defs.iter().find(|d| d.key == "store.sqlite.ops.p90").unwrap();
    assert_eq!((p90.title.as_str(), p90.better), ("Throughput, sqlite (p90)", Better::Higher));
    assert!(!defs.iter().any(|d| d.key == "store.sqlite.ops"));
    // A facet block of a metric that is no distribution is defined for nothing.
    let stray = spec(&format!("{FAMILIES}[metrics.\"rt.p99\"]\nrelative = 0.3\n"));
    assert_eq!(errors(&stray), ["bench.toml:22: metrics.rt.p99: defined, but no phase records it"]);
}

#[test]
fn check_prints_each_family_with_its_keys_and_each_distribution_with_its_facets() {
    let text = spec(&format!("{FAMILIES}[metrics.\"later.*.ms\"]\ntitle = \"Later {{1}}\"\nunit = \"ms\"\n"));
    let mut plan = parse(Path::new("bench.toml"), &text).unwrap();
    plan.agent.distributions.insert("rt".into(), Distribution { percentiles: vec![50, 99], max: true });
    let check = describe(&plan);
    assert!(check.contains("\nfamilies (3):\n"), "{check}");
    assert!(check.contains("  store.*.replay → store.jsonl.replay, store.sqlite.replay\n"), "{check}");
    assert!(check.contains("  store.*.ops → store.sqlite.ops\n"), "{check}");
    assert!(
        check.contains("  later.*.ms → no key of the spec yet: defines the keys a run's scripts name\n"),
        "{check}"
    );
    assert!(check.contains("  rt → rt.p50, rt.p99, rt.max\n"), "{check}");
    let ops = check.lines().find(|l| l.trim_start().starts_with("store.sqlite.ops ")).unwrap();
    assert!(ops.ends_with("(higher is better)"), "{check}");
    let rt = check.lines().find(|l| l.trim_start().starts_with("rt ")).unwrap();
    assert!(!rt.contains("higher"), "{check}");
}
