//! `[[runtime.bench]]`: parsed into the agent's bench steps, listed by `check`, and refused with
//! the file, line and field when malformed.

use std::path::Path;

use super::*;

const BENCH: &str = r#"name = "b"
[install]
command = "true"
[[runtime.bench]]
name = "tinybench"
run = "node bench/tinybench.mjs"
cwd = "bench-node"
format = "tinybench"
results = "results/tinybench.json"
env = { BENCH_TIME_MS = "300" }
timeout_s = 120
max_benchmarks = 50
[[runtime.bench]]
name = "mitata"
run = "node bench/mitata.mjs"
format = "mitata"
"#;

fn errors(text: &str) -> Vec<String> {
    match parse(Path::new("bench.toml"), text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(SpecErrors(errors)) => errors.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn bench_steps_fill_the_plan_and_check_lists_them() {
    let plan = parse(Path::new("bench.toml"), BENCH).unwrap_or_else(|e| panic!("{e}"));
    let benches = &plan.agent.runtime.benches;
    assert_eq!(benches.len(), 2);
    let tiny = &benches[0];
    assert_eq!((tiny.name.as_str(), tiny.format.as_str()), ("tinybench", "tinybench"));
    assert_eq!(tiny.step.run, "node bench/tinybench.mjs");
    assert_eq!(tiny.step.cwd.as_deref(), Some("bench-node"));
    assert_eq!(tiny.step.timeout_s, 120.0);
    assert_eq!(tiny.step.env.get("BENCH_TIME_MS").map(String::as_str), Some("300"));
    assert_eq!((tiny.results.as_deref(), tiny.max_benchmarks), (Some("results/tinybench.json"), 50));
    let mitata = &benches[1];
    assert_eq!((mitata.results.as_deref(), mitata.max_benchmarks, mitata.step.timeout_s), (None, 1000, 600.0));
    // A section with only bench steps has trials, and its worst case counts their timeouts.
    assert_eq!(plan.trials.runtime, 10);
    assert!(plan.agent_plan("c0ffee").runtime.benches == *benches);
    // The runtime records its steps' benchmarks (keys only a run names), not their companions'
    // steps elsewhere: an adaptive look grows the runtime for an undecided benchmark.
    assert!(
        plan.records(Phase::Runtime, "bench.tinybench.parse") && !plan.records(Phase::Measure, "bench.tinybench.parse")
    );
    assert!(plan.records(Phase::Runtime, "bench.mitata.render.p99") && !plan.records(Phase::Runtime, "bench.other.x"));
    let described = describe(&plan);
    assert!(
        described.contains(
            "bench tinybench: `node bench/tinybench.mjs` read as tinybench from results/tinybench.json, each benchmark a key bench.tinybench.<benchmark> (at most 50)"
        ),
        "{described}"
    );
    assert!(described.contains("bench mitata: `node bench/mitata.mjs` read as mitata from its standard output"));
    let family = format!("{BENCH}[metrics.\"bench.tinybench.*\"]\nrelative = 0.05\ngate = true\n");
    let described = describe(&parse(Path::new("bench.toml"), &family).unwrap());
    assert!(
        described.contains("bench.tinybench.* → the benchmarks bench step tinybench's run names (gating)"),
        "{described}"
    );
}

#[test]
fn a_malformed_bench_step_is_refused_naming_file_line_and_field() {
    let text = r#"name = "b"
[install]
command = "true"
[[runtime.bench]]
name = "Tiny.Bench"
run = " "
format = "benchmarkdotnet"
results = "../out.json"
max_benchmarks = 0
[[runtime.bench]]
name = "crit"
run = "cargo bench"
format = "criterion"
env = { "1BAD" = "x" }
instructions = true
"#;
    let errors = errors(text);
    let expect = [
        "bench.toml:5: runtime.bench[0].name: expected a key segment",
        "bench.toml:6: runtime.bench[0].run: expected the command line that runs the suite",
        "bench.toml:7: runtime.bench[0].format: unknown benchmark format \"benchmarkdotnet\"; expected one of bmf, hyperfine, vitest, tinybench, mitata, pytest-benchmark, pyperf, go, criterion, google-benchmark",
        "bench.toml:8: runtime.bench[0].results: \"../out.json\" leaves its folder",
        "bench.toml:9: runtime.bench[0].max_benchmarks: expected a whole number from 1 to 10000, got 0",
        "bench.toml:13: runtime.bench[1].results: criterion writes a folder, not standard output",
        "bench.toml:14: runtime.bench[1].env.1BAD: expected a variable name",
    ];
    for e in expect {
        assert!(errors.iter().any(|got| got.contains(e)), "missing {e:?} in {errors:#?}");
    }
}

/// `instructions = true` on a bench step: its whole suite once more under the lens, counted as
/// `bench.<name>.instructions` and `.cycles` (defined in the step's group), which the trials
/// that run no lens turn off.
#[test]
fn the_lens_on_a_bench_step_counts_its_whole_suite() {
    let text = BENCH.replace("format = \"mitata\"\n", "format = \"mitata\"\ninstructions = true\n");
    let plan = parse(Path::new("bench.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let benches = &plan.agent.runtime.benches;
    assert_eq!((benches[0].instructions, benches[1].instructions), (false, true));
    assert_eq!(plan.lens_stems_of_phase(Phase::Runtime), ["bench.mitata"]);
    assert!(plan.uses_instruction_lens() && plan.needs_valgrind());
    let keys = plan.metrics_of_phase(Phase::Runtime);
    assert_eq!(keys, ["bench.mitata.instructions", "bench.mitata.cycles"]);
    let def = plan.metrics.iter().find(|d| d.key == "bench.mitata.instructions").expect("defined");
    assert_eq!(
        (def.title.as_str(), def.group.as_str()),
        ("Bench suite mitata, whole (instructions)", "Benchmarks (mitata)")
    );
    assert!(describe(&plan).contains("+ the suite once more under the instruction lens (see lens runs) → bench.mitata.instructions, bench.mitata.cycles (the whole suite's counts)"));
    let runs = [crate::report::lens_runs::decide("bench.mitata", Phase::Runtime, 10, Some(1), false, None)];
    let later = crate::run::schedule::without_lens(&plan.agent_plan("c0ffee"), Phase::Runtime, 1, &runs).unwrap();
    assert!(!later.runtime.benches[1].instructions, "no lens in a trial past its runs");
    assert!(crate::run::schedule::without_lens(&plan.agent_plan("c0ffee"), Phase::Runtime, 0, &runs).is_none());
}

#[test]
fn two_bench_steps_of_a_section_cannot_share_a_name() {
    let text = format!("{BENCH}[[runtime.bench]]\nname = \"mitata\"\nrun = \"x\"\nformat = \"bmf\"\n");
    let errors = errors(&text);
    assert!(
        errors.iter().any(|e| e
            .contains("bench.toml:18: runtime.bench[2].name: another bench step of this section is named \"mitata\"")),
        "{errors:#?}"
    );
}

#[test]
fn a_block_can_ignore_a_metric_or_take_it_out_of_the_gate_and_an_ignored_one_cannot_gate() {
    let text = r#"name = "g"
[install]
command = "true"
[[runtime.command]]
metric = "quick"
run = "true"
[[runtime.command]]
metric = "noisy"
run = "true"
[[runtime.command]]
metric = "slow"
run = "true"
[metrics.quick]
title = "Quick"
unit = "ms"
gate = false
[metrics.noisy]
ignore = true
[metrics.slow]
title = "Slow"
unit = "ms"
"#;
    let plan = parse(Path::new("bench.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    let keys: Vec<&str> = plan.metrics.iter().map(|d| d.key.as_str()).collect();
    assert_eq!(keys, ["install", "quick", "slow"]);
    // The default gate is the timed metrics of measure and runtime, less `gate = false`.
    assert_eq!(plan.trials.gate, ["slow"]);
    let both = text.replace("[metrics.noisy]\nignore = true", "[metrics.noisy]\nignore = true\ngate = true");
    let errors = errors(&both);
    assert!(
        errors.iter().any(|e| e.contains("bench.toml:19: metrics.noisy.gate: an ignored metric is never judged")),
        "{errors:#?}"
    );
    // An exact block may wait for a benchmark only a run names.
    let exact = format!("{BENCH}[metrics.\"bench.mitata.parse\"]\nrelative = 0.3\n");
    assert!(parse(Path::new("bench.toml"), &exact).is_ok());
}
