use std::path::Path;

use sandbench_proto::plan::{Check, ScenarioStep, Source};

use super::phases::unescape;
use super::*;

const MINIMAL: &str = r#"
name = "mini"
[install]
command = "true"
"#;

fn errors(text: &str) -> Vec<String> {
    match parse(Path::new("bench.toml"), text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(SpecErrors(errors)) => errors.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn a_minimal_spec_gets_the_reference_defaults() {
    let plan = parse(Path::new("bench.toml"), MINIMAL).unwrap();
    assert_eq!(plan.sandbox.image, "node:24-bookworm");
    // Measure and runtime have nothing to do: no trials, so a run prints none and books no time.
    assert_eq!(
        (plan.trials.install, plan.trials.measure, plan.trials.runtime, plan.trials.failure_limit),
        (3, 0, 0, 2)
    );
    // With something to do, ten trials each; `--trials` gives none to an empty phase either.
    let full = format!(
        "{MINIMAL}[measure]\nstartup = [\"p\"]\n[[runtime.command]]\nmetric = \"m\"\nrun = \"p\"\n[metrics.m]\ntitle = \"m\"\nunit = \"s\"\n"
    );
    let full = parse(Path::new("bench.toml"), &full).unwrap();
    assert_eq!((full.trials.measure, full.trials.runtime, full.trials.max_pairs), (10, 10, 10));
    assert_eq!(
        (plan.cost.cpu_usd_per_hour, plan.cost.memory_usd_per_gb_hour, plan.cost.disk_usd_per_gb_hour),
        (0.05, 0.01, 0.001)
    );
    assert_eq!(plan.agent.install.command.timeout_s, 240.0);
    assert!(!plan.sandbox.network);
    assert_eq!(plan.metrics.iter().map(|m| m.key.as_str()).collect::<Vec<_>>(), ["install"]);
    assert_eq!(plan.agent_plan("abc").source, Source::None);
}

#[test]
fn the_examples_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let demo = load(&root.join("examples/demo/bench.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(demo.source, SourceSettings::Local { .. }));
    assert!(matches!(demo.agent_plan("c0ffee").source, Source::Archive { ref commit } if commit == "c0ffee"));
    let keys: Vec<&str> = demo.metrics.iter().map(|m| m.key.as_str()).collect();
    for key in [
        "bundle",
        "install",
        "cold",
        "warm",
        "rss",
        "disk",
        "kernel_start",
        "interrupt",
        "restore",
        "git_status",
        "parse_ms",
    ] {
        assert!(keys.contains(&key), "demo lacks {key}");
    }
    // A partial definition overrides only what it names.
    let exec = demo.metrics.iter().find(|m| m.key == "kernel_exec").unwrap();
    assert_eq!((exec.unit.as_str(), exec.absolute), ("ms", 0.0001));
    // Its entry point is a script or, on revisions with the compiled build, a single
    // executable: each trial records which, and a side that built the executable must have
    // installed it.
    assert_eq!(demo.agent.install.entry_point.as_deref(), Some("~/.local/bin/demo"));
    assert!(
        demo.agent
            .install
            .checks
            .contains(&Check::ExpectFormat { format: sandbench_proto::plan::InstallationFormat::Compiled })
    );
    assert_eq!(demo.agent.prepare.optional[0].when, ["scripts/build-binary.js", "scripts/assemble-release.js"]);
    let prime = load(&root.join("examples/prime-agent/bench.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(prime.trials.install, 3);
    assert_eq!(prime.trials.measure, 10);
    assert_eq!(prime.agent.install.command.env["PRIME_AGENT_INSTALLER_PLAIN"], "1");
    // The reference's 42, and the judged peak RSS of its two transport scripts (issue 33).
    assert_eq!(prime.metrics.len(), 44, "{:?}", prime.metrics.iter().map(|m| &m.key).collect::<Vec<_>>());
    assert_eq!((prime.trials.transport, prime.trials.ui), (10, 3));
    let prime_keys: Vec<&str> = prime.metrics.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(prime_keys[..6], ["cold", "warm", "install", "bundle", "disk", "rss"]);
    assert_eq!(
        prime_keys[17..23],
        [
            "switch_fetch",
            "frame_decode",
            "script.switch_fetch.maxrss",
            "script.frame_decode.maxrss",
            "resume_large",
            "resume_large_cpu"
        ]
    );
    assert_eq!(prime_keys.last(), Some(&"ui_rss"));
    assert!(prime.agent.harness["ui-fixtures.py"].contains("def catalog_fixture"));
    prime_transport_and_catalog_as_the_reference(&prime);
    // The demo's sections come in the reference's order, its own UI metrics in the UI section.
    let groups: Vec<&str> = demo.metrics.iter().map(|m| m.group.as_str()).collect();
    let mut sections = groups.clone();
    sections.dedup();
    assert_eq!(sections, ["CLI", "Python runtime", "Session transport", "UI interactions", "Product script"]);
    // The lens's counts sit right after the step they count.
    assert_eq!(keys[..5], ["cold", "cold.instructions", "cold.cycles", "warm", "install"]);
    let work = keys.iter().position(|k| *k == "work").unwrap();
    assert_eq!(keys[work..work + 3], ["work", "work.instructions", "work.cycles"]);
    assert!(demo.uses_instruction_lens() && !prime.uses_instruction_lens());
    assert!(
        demo.trials.gate.iter().all(|k| !sandbench_proto::metric::MetricKey::facet_of(k).is_lens()),
        "{:?}",
        demo.trials.gate
    );
    assert!(demo.trials.ui > 0 && demo.trials.transport > 0);
    assert_eq!(demo.timed_phases().iter().map(|p| p.0).collect::<Vec<_>>(), Phase::TIMED);
    // The demo grows its pairs on its two gating metrics.
    assert_eq!(
        (demo.trials.max_pairs, demo.trials.gate.as_slice()),
        (10, ["work".to_string(), "cold".to_string()].as_slice())
    );
    // The default gate stays with measure and runtime, the phases `max_pairs` grows: ui and
    // transport keep their own trial counts, so more pairs would not settle their metrics.
    let text = std::fs::read_to_string(root.join("examples/demo/bench.toml")).unwrap();
    // Beside the demo's (its source and harness are found from there); removed when dropped.
    let spec = tempfile::Builder::new().suffix(".toml").tempfile_in(root.join("examples/demo")).unwrap();
    std::fs::write(spec.path(), text.replace("\ngate = [\"work\", \"cold\"]\n", "\n")).unwrap();
    let defaulted = load(spec.path()).unwrap_or_else(|e| panic!("{e}"));
    let fixed = [demo.metrics_of_phase(Phase::Ui), demo.metrics_of_phase(Phase::Transport)].concat();
    let gate = &defaulted.trials.gate;
    assert!(gate.iter().any(|k| k == "cold") && gate.iter().any(|k| k == "kernel_exec"), "{gate:?}");
    assert!(gate.iter().all(|k| !fixed.contains(k)), "{gate:?}");
    assert_eq!(prime.cost.budget_usd, Some(1.0));
}

/// The prime spec's transport benches run against the side's build (§2.6; from each side's own
/// source, not main's copy as the reference does: the spec cannot name a base revision's file);
/// its catalog requests are timed from send to reply and checked as strictly as the
/// reference's `check_scheduled_jobs` (§2.5).
fn prime_transport_and_catalog_as_the_reference(prime: &Plan) {
    for (script, bench) in prime.agent.transport.scripts.iter().zip(["switch-fetch.mjs", "frame-decode.mjs"]) {
        let run = format!("node scripts/benchmarks/{bench} --dist packages/coding-agent/dist");
        assert_eq!(script.step.run, run);
    }
    let catalog = prime.agent.ui.scenarios.iter().find(|s| s.name == "catalog").unwrap();
    let mut checked = Vec::new();
    for step in &catalog.steps {
        let (name, expect) = match step {
            ScenarioStep::StartTimer { metric, .. } => {
                assert_eq!(metric, &None, "the catalog times requests, not timer windows");
                continue;
            }
            ScenarioStep::Request { metric, expect, .. } => (metric.clone().unwrap_or_default(), expect),
            ScenarioStep::Collect { tag, expect } => (tag.clone(), expect),
            _ => continue,
        };
        let Some(set) = expect.get("/data/heartbeats/*") else { continue };
        let entries = set["set"].as_array().unwrap();
        let ids: Vec<&str> = entries.iter().map(|e| e["job"]["id"].as_str().unwrap()).collect();
        assert_eq!(ids, (1..=13).map(|i| format!("catalog-job-{i}")).collect::<Vec<_>>());
        assert_eq!(entries[12]["sessionName"], "ui-bench-catalog-13");
        assert_eq!((&entries[0]["job"]["status"], &entries[0]["job"]["runCount"]), (&"paused".into(), &0.into()));
        checked.push(name);
    }
    assert_eq!(checked, ["scheduled_catalog", "scheduled_catalog_warm", "scan"]);
}

#[test]
fn syntax_and_unknown_fields_name_the_line() {
    assert_eq!(
        errors("name = \"x\"\n[install]\ncommand = \"true\"\ntimeout = 3\n"),
        [
            "bench.toml:4: timeout: unknown field `timeout`, expected one of `command`, `timeout_s`, `env`, `checks`, `footprint_excludes`, `fixture`, `entry_point`, `inventory`"
        ]
    );
    let e = errors("name = \"x\"\n[install\n");
    assert!(e[0].starts_with("bench.toml:2: (syntax):"), "{e:?}");
    assert_eq!(errors("name = \"x\"\n"), ["bench.toml:1: install: missing field `install`"]);
    assert_eq!(
        errors("name = \"x\"\n[install]\ncommand = \"true\"\n[sandbox]\ncpus = \"two\"\n"),
        ["bench.toml:5: cpus: invalid type: string \"two\", expected f64"]
    );
}

#[test]
fn every_semantic_error_is_reported_with_file_line_and_field() {
    let spec = r#"name = "bad"
[sandbox]
cpus = -1
memory_gb = 0
[source]
url = "https://example.invalid/repo.git"
[trials]
measure = 0
[prepare]
origin_port = 70000
artifacts = ["../outside/*.tgz"]
[install]
command = "sh install.sh"
checks = [ { output = "x --version" }, { file_exists = "a", file_starts_with = "b" }, { file_starts_with = "b", prefix = "\\xZZ" } ]
[measure]
startup = []
[[runtime.scenario]]
name = "k"
command = ["kernel"]
  [[runtime.scenario.step]]
  kind = "interrupt"
  metric = "stop"
  [[runtime.scenario.step]]
  kind = "teleport"
[[runtime.command]]
metric = "Git-Status"
run = "git status"
aggregate = "median"
[metrics.never]
title = "Never"
unit = "s"
"#;
    assert_eq!(
        errors(spec),
        [
            "bench.toml:3: sandbox.cpus: expected a number greater than 0 and at most 64, got -1",
            "bench.toml:4: sandbox.memory_gb: expected a number greater than 0 and at most 512, got 0",
            "bench.toml:6: source.url: a git URL is cloned inside the sandbox, which needs sandbox.network = true",
            "bench.toml:8: trials.measure: expected a whole number from 1 to 100, got 0",
            "bench.toml:10: prepare.origin_port: expected a TCP port from 1 to 65535, got 70000",
            "bench.toml:11: prepare.artifacts[0]: expected a path inside the source folder: \"../outside/*.tgz\" leaves its folder through `..`",
            "bench.toml:14: install.checks[0]: an output check needs `contains`",
            "bench.toml:14: install.checks[1]: expected exactly one of output (with contains), file_exists, file_starts_with (with prefix), expect_format",
            "bench.toml:14: install.checks[2].prefix: expected two hex digits after \\x, got \"ZZ\"",
            "bench.toml:16: measure.startup: expected the command line of the program, e.g. [\"demo\"]",
            "bench.toml:21: runtime.scenario[0].step[0]: an interrupt step needs `send`, `marker` and `interrupt`",
            "bench.toml:24: runtime.scenario[0].step[1].kind: expected request, batch, interrupt, memory, cpu, size, restart, settle, ready, type, keys, wait_for, retry, start_timer, stop_timer, send or collect, got \"teleport\"",
            "bench.toml:26: runtime.command[0].metric: expected a metric key of lowercase letters, digits and '_', got \"Git-Status\"",
            "bench.toml:26: metrics.Git-Status: this metric is recorded but not defined: add [metrics.KEY] with title, unit, scale, absolute and relative",
            "bench.toml:28: runtime.command[0].aggregate: expected \"samples\", \"mean\" or \"total\", got \"median\"",
            "bench.toml:29: metrics.never: defined, but no phase records it",
        ]
    );
}

#[test]
fn scenario_steps_become_the_agent_plan() {
    let spec = r#"name = "s"
[install]
command = "true"
[[runtime.scenario]]
name = "kernel"
command = ["python3", "k.py"]
start_metric = "kernel_start"
shutdown = { type = "shutdown" }
  [[runtime.scenario.step]]
  kind = "request"
  metric = "kernel_exec"
  send = { type = "execute", code = "pass" }
  repeat = 3
  aggregate = "total"
  expect = { status = "ok" }
"#;
    let plan = parse(Path::new("bench.toml"), spec).unwrap();
    let scenario = &plan.agent.runtime.scenarios[0];
    assert_eq!(scenario.ready_event.as_deref(), Some("ready"));
    assert_eq!(scenario.shutdown, Some(serde_json::json!({"type": "shutdown"})));
    match &scenario.steps[0] {
        ScenarioStep::Request { metric, send, repeat, aggregate, expect, output_bytes, distribution: None } => {
            assert_eq!(metric.as_deref(), Some("kernel_exec"));
            assert_eq!(send, &serde_json::json!({"type": "execute", "code": "pass"}));
            assert_eq!((*repeat, *aggregate, output_bytes), (3, sandbench_proto::plan::Aggregate::Total, &None));
            assert_eq!(expect["status"], "ok");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(plan.metrics_of_phase(Phase::Runtime), ["kernel_start", "kernel_exec"]);
}

#[test]
fn prefixes_accept_hex_escapes() {
    assert_eq!(unescape("\\x7fELF").unwrap(), b"\x7fELF");
    assert_eq!(unescape("#!").unwrap(), b"#!");
    assert!(unescape("\\x7").is_err());
}

#[test]
fn steps_must_suit_their_channel() {
    let spec = r#"name = "c"
[install]
command = "true"
[[runtime.scenario]]
name = "ui"
channel = "terminal"
command = ["demo"]
start_metric = "ui_start"
  [[runtime.scenario.step]]
  kind = "request"
  send = { type = "x" }
  [[runtime.scenario.step]]
  kind = "type"
[[runtime.scenario]]
name = "kernel"
command = ["k"]
  [[runtime.scenario.step]]
  kind = "wait_for"
  text = "ok"
[metrics.ui_start]
title = "start"
unit = "ms"
"#;
    assert_eq!(
        errors(spec),
        [
            "bench.toml:8: runtime.scenario[0].start_metric: a terminal scenario times its start with a `ready` step",
            "bench.toml:10: runtime.scenario[0].step[0].kind: this step needs channel = \"jsonl\" or \"socket\"",
            "bench.toml:13: runtime.scenario[0].step[1].text: a type step needs `text`",
            "bench.toml:18: runtime.scenario[1].step[0].kind: this step needs channel = \"terminal\"",
        ]
    );
}

#[test]
fn adaptive_pairs_gates_and_the_rule() {
    let plan = parse(Path::new("bench.toml"), &format!("{MINIMAL}[measure]\nstartup = [\"p\"]\n")).unwrap();
    assert_eq!((plan.trials.max_pairs, plan.rule), (10, super::Rule::Paired));
    let spec = r#"name = "mini"
[trials]
measure = 5
runtime = 4
max_pairs = 20
[measure]
startup = ["demo"]
[install]
command = "true"
[report]
rule = "reference"
"#;
    let plan = parse(Path::new("bench.toml"), spec).unwrap();
    assert_eq!((plan.trials.max_pairs, plan.rule), (20, super::Rule::Reference));
    // Default gate: the timed metrics of measure and runtime (not memory, not install).
    assert_eq!(plan.trials.gate, ["cold", "warm"]);
    let gated = spec.replace("max_pairs = 20", "max_pairs = 20\ngate = [\"cold.cpu\", \"rss\"]");
    assert_eq!(parse(Path::new("bench.toml"), &gated).unwrap().trials.gate, ["cold.cpu", "rss"]);
    let bad = spec
        .replace("max_pairs = 20", "max_pairs = 3\ngate = [\"nope\"]")
        .replace("rule = \"reference\"", "rule = \"vibes\"");
    let errors = errors(&bad);
    assert!(
        errors.iter().any(|e| e.contains(
            ":5: trials.max_pairs: expected at least the trials of the phases that hold the gating metrics (5), got 3"
        )),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains(":6: trials.gate: \"nope\" is not a metric this spec records")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains(":12: report.rule: expected \"paired\" or \"reference\", got \"vibes\"")),
        "{errors:?}"
    );
}

#[test]
fn looks_are_planned_from_the_phases_that_hold_gating_metrics() {
    // The eslint case: no [measure], three runtime trials gated, up to ten pairs. The empty
    // measure phase has no trials, and no phantom ten stands in for the first look.
    let runtime =
        "[[runtime.command]]\nmetric = \"lint\"\nrun = \"eslint x.js\"\n[metrics.lint]\ntitle = \"l\"\nunit = \"s\"\n";
    let spec = format!("name = \"m\"\n[trials]\nruntime = 3\nmax_pairs = 10\n[install]\ncommand = \"true\"\n{runtime}");
    let plan = parse(Path::new("bench.toml"), &spec).unwrap();
    assert_eq!(
        (plan.trials.measure, plan.trials.runtime, plan.trials.gate.as_slice()),
        (0, 3, ["lint".to_string()].as_slice())
    );
    assert_eq!((plan.gated_trials(&plan.trials.gate), plan.trials.max_pairs), (3, 10));
    assert!(
        describe(&plan).contains("adaptive: up to 10 pairs while any of lint is inconclusive"),
        "{}",
        describe(&plan)
    );
    // A measure phase with more trials but no gating metric does not raise the first look.
    let measured =
        spec.replace("runtime = 3", "measure = 10\nruntime = 3\ngate = [\"lint\"]") + "[measure]\nstartup = [\"p\"]\n";
    let plan = parse(Path::new("bench.toml"), &measured).unwrap();
    assert_eq!(plan.gated_trials(&plan.trials.gate), 3);
}

#[test]
fn the_practical_minimum_of_profile_floors_is_the_specs() {
    let plan = parse(Path::new("bench.toml"), MINIMAL).unwrap();
    assert_eq!(plan.min_floor, DEFAULT_MIN_FLOOR);
    assert!(describe(&plan).contains("(from A/A runs: at least 0.50%)"), "{}", describe(&plan));
    let spec = format!("{MINIMAL}[report]\nmin_floor = 0.01\n");
    let plan = parse(Path::new("bench.toml"), &spec).unwrap();
    assert_eq!(plan.min_floor, 0.01);
    assert!(describe(&plan).contains("at least 1.00%"), "{}", describe(&plan));
    for bad in ["-0.01", "0.6", "nan"] {
        let errors = errors(&format!("{MINIMAL}[report]\nmin_floor = {bad}\n"));
        assert!(
            errors.iter().any(|e| e.starts_with("bench.toml:6: report.min_floor: expected a number from 0 to 0.5")),
            "{bad}: {errors:?}"
        );
    }
}

#[test]
fn paths_names_envs_cpusets_and_repositories_that_escape_are_refused() {
    let spec = r#"name = "hostile"
[sandbox]
cpuset = "0-9999,abc"
ttl_minutes = 1
[source]
repository = "no/such/folder"
[env]
"A=B" = "x"
"" = "empty"
[prepare]
release_dir = "../../../etc"
artifacts = ["/etc/*", "dist//x"]
[install]
command = "true"
env = { "1BAD" = "x" }
checks = [ { file_exists = "/proc/1/environ" }, { file_starts_with = "~/../../etc/shadow", prefix = "root" } ]
[install.fixture]
dir = "../outside"
files = { "../../x" = "a" }
home_files = { "/etc/passwd" = "root::0:0::/:/bin/sh" }
[measure]
startup = ["demo"]
cwd = "/etc"
[[runtime.scenario]]
name = "../../../../escape"
command = ["k"]
cwd = "~/../root"
[[runtime.script]]
name = "ok"
run = "true"
cwd = "a/./b"
metrics = ["s"]
[metrics.s]
title = "S"
unit = "s"
"#;
    let found = errors(spec);
    let expect = [
        "bench.toml:3: sandbox.cpuset: CPU 9999 is beyond 8191",
        "bench.toml:4: sandbox.ttl_minutes: 1 min is shorter than this plan's worst case",
        "bench.toml:6: source.repository: no folder no/such/folder",
        "bench.toml:8: env.A=B: expected a variable name",
        "bench.toml:9: env.: expected a variable name",
        "bench.toml:11: prepare.release_dir: expected a folder inside the source folder: \"../../../etc\" leaves its folder",
        "bench.toml:12: prepare.artifacts[0]: expected a path inside the source folder: expected a relative path",
        "bench.toml:12: prepare.artifacts[1]: expected a path inside the source folder: expected a path without empty",
        "bench.toml:15: install.env.1BAD: expected a variable name",
        "bench.toml:16: install.checks[0].file_exists: expected a file inside the home: expected a relative path, got the absolute path \"/proc/1/environ\"",
        "bench.toml:16: install.checks[1].file_starts_with: expected a file inside the home: \"../../etc/shadow\" leaves its folder",
        "bench.toml:18: install.fixture.dir: expected a path inside the home: \"../outside\" leaves its folder",
        "bench.toml:19: install.fixture.files: expected a path inside the home: \"../../x\" leaves its folder",
        "bench.toml:20: install.fixture.home_files: expected a path inside the home: expected a relative path",
        "bench.toml:23: measure.cwd: expected a relative path, got the absolute path \"/etc\"",
        "bench.toml:25: runtime.scenario[0].name: expected a name of 1 to 64 letters",
        "bench.toml:27: runtime.scenario[0].cwd: \"../root\" leaves its folder through `..`",
        "bench.toml:31: runtime.script[0].cwd: expected a path without empty or `.` parts",
    ];
    for e in expect {
        assert!(found.iter().any(|got| got.starts_with(e)), "missing {e:?} in\n{}", found.join("\n"));
    }
    assert_eq!(found.len(), expect.len(), "{}", found.join("\n"));
    // A NUL in a key, and a cpuset's syntax.
    let nul = MINIMAL.replace("[install]", "[env]\n\"A\\u0000B\" = \"x\"\n[install]");
    assert!(errors(&nul).iter().any(|e| e.contains("env.A\0B: expected a variable name")), "{:?}", errors(&nul));
    let cpuset = MINIMAL.replace("[install]", "[sandbox]\ncpuset = \"1-0\"\n[install]");
    assert_eq!(errors(&cpuset), ["bench.toml:4: sandbox.cpuset: the range \"1-0\" goes backwards"]);
}

#[test]
fn the_expiry_covers_the_worst_case() {
    let plan = parse(Path::new("bench.toml"), MINIMAL).unwrap();
    // Provisioning and teardown, prepare's margin, then per side three installs at 240 s, each
    // with the controller's margin (measure and runtime have nothing to do: no trials).
    assert_eq!(plan.worst_case().as_secs(), 180 + 600 + 2 * (3 * 360));
    // Ten measure trials each, with its margin, when the spec has a start to time.
    let measured = format!("{MINIMAL}[measure]\nstartup = [\"p\"]\ntimeout_s = 1\nsettle_s = 0\n");
    let measured = parse(Path::new("bench.toml"), &measured).unwrap();
    // A trial: two starts of 1 s and the margin.
    assert_eq!(measured.worst_case().as_secs(), 180 + 600 + 2 * (3 * 360 + 10 * 182));
    assert_eq!(plan.sandbox.ttl, default_ttl(plan.worst_case()));
    assert!(plan.sandbox.ttl >= plan.worst_case() + EXPIRY_MARGIN);
    assert_eq!(plan.sandbox.ttl.as_secs() % 60, 0);
    // An explicit ttl at least as long is kept.
    let long = MINIMAL.replace("[install]", "[sandbox]\nttl_minutes = 180\n[install]");
    assert_eq!(parse(Path::new("bench.toml"), &long).unwrap().sandbox.ttl.as_secs(), 180 * 60);
    // More pairs, a longer worst case.
    let grown = MINIMAL.replace("[install]", "[trials]\nmax_pairs = 40\n[measure]\nstartup = [\"x\"]\n[install]");
    let grown = parse(Path::new("bench.toml"), &grown).unwrap();
    let measure = grown.phase_timeout(Phase::Measure).as_secs_f64();
    assert!(grown.worst_case().as_secs_f64() >= 2.0 * 40.0 * measure, "{:?}", grown.worst_case());
}

#[test]
fn a_cpuset_is_checked_against_this_machine() {
    let spec = MINIMAL.replace("[install]", "[sandbox]\ncpuset = \"0,8191\"\n[install]");
    let plan = parse(Path::new("bench.toml"), &spec).unwrap();
    if bounds::host_cpus().is_some_and(|cpus| !cpus.contains(&8191)) {
        let err = plan.check_host().unwrap_err().to_string();
        assert!(err.contains("sandbox.cpuset \"0,8191\": CPU 8191 not on this machine"), "{err}");
    }
    let ok = parse(Path::new("bench.toml"), &MINIMAL.replace("[install]", "[sandbox]\ncpuset = \"0\"\n[install]"));
    assert!(ok.unwrap().check_host().is_ok());
}

#[test]
fn repeated_commands_take_warmup_prepare_and_are_per_run_samples_by_default() {
    let spec = r#"name = "r"
[install]
command = "true"
[[runtime.command]]
metric = "probe"
run = "wc -l < runs"
cwd = "~/work"
repeat = 5
warmup = 2
prepare = "echo x >> runs"
timeout_s = 7
[[runtime.command]]
metric = "probe_mean"
run = "true"
aggregate = "mean"
[metrics.probe]
title = "Probe"
unit = "ms"
[metrics.probe_mean]
title = "Probe, mean"
unit = "µs"
"#;
    let plan = parse(Path::new("bench.toml"), spec).unwrap();
    let commands = &plan.agent.runtime.commands;
    let c = &commands[0];
    assert_eq!((c.repeat, c.warmup, c.aggregate), (5, 2, sandbench_proto::plan::Aggregate::Samples));
    let prepare = c.prepare.as_ref().unwrap();
    assert_eq!(
        (prepare.run.as_str(), prepare.cwd.as_deref(), prepare.timeout_s),
        ("echo x >> runs", Some("~/work"), 7.0)
    );
    assert_eq!(
        (commands[1].warmup, commands[1].aggregate, &commands[1].prepare),
        (0, sandbench_proto::plan::Aggregate::Mean, &None)
    );
    // Every warmup and timed run, each after its prepare, at their timeouts.
    assert_eq!(plan.phase_limit_s(Phase::Runtime), 7.0 * 2.0 * 7.0 + 60.0);
    let check = describe(&plan);
    assert!(check.contains("command probe: `wc -l < runs` × 5 after 2 warmup, each after `echo x >> runs`"), "{check}");
    // The unit sets the scale from seconds.
    let scale = |key: &str| plan.metrics.iter().find(|m| m.key == key).unwrap().scale;
    assert_eq!((scale("probe"), scale("probe_mean")), (1000.0, 1e6));

    let bad = r#"name = "r"
[install]
command = "true"
[[runtime.command]]
metric = "probe"
run = "true"
warmup = -1
prepare = " "
[[runtime.scenario]]
name = "k"
command = ["kernel"]
  [[runtime.scenario.step]]
  kind = "request"
  metric = "probe_request"
  send = { type = "x" }
  aggregate = "samples"
[metrics.probe]
title = "Probe"
unit = "s"
[metrics.probe_request]
title = "Request"
unit = "s"
"#;
    assert_eq!(
        errors(bad),
        [
            "bench.toml:7: runtime.command[0].warmup: expected a whole number from 0 to 10000, got -1",
            "bench.toml:8: runtime.command[0].prepare: expected a command line, or no `prepare`",
            "bench.toml:16: runtime.scenario[0].step[0].aggregate: expected \"mean\" or \"total\", got \"samples\"",
        ]
    );
}

#[test]
fn units_are_converted_from_what_is_recorded_or_refused_where_they_are_declared() {
    let spec = |unit: &str, scale: &str| {
        format!(
            r#"name = "u"
[install]
command = "true"
[[runtime.scenario]]
name = "k"
command = ["kernel"]
  [[runtime.scenario.step]]
  kind = "memory"
  metric = "heap"
[[runtime.command]]
metric = "probe"
run = "true"
[[runtime.script]]
name = "bench"
run = "node bench.js"
metrics = ["parsed"]
[metrics.heap]
title = "Heap"
unit = "MiB"
[metrics.probe]
title = "Probe"
unit = {unit}
{scale}
[metrics.parsed]
title = "Parsed"
unit = "ms"
"#
        )
    };
    let plan = parse(Path::new("bench.toml"), &spec("\"ms\"", "")).unwrap();
    let def = |key: &str| plan.metrics.iter().find(|m| m.key == key).unwrap().clone();
    assert_eq!((def("heap").scale, def("probe").scale), (1.0 / 1_048_576.0, 1000.0));
    // A script's metric is in what the script prints: the spec's scale, 1 by default.
    assert_eq!(def("parsed").scale, 1.0);
    assert_eq!(plan.observed_unit("heap"), Some("bytes"));
    assert_eq!(plan.observed_unit("probe"), Some("s"));
    assert_eq!(plan.observed_unit("install"), Some("s"));
    assert_eq!(plan.observed_unit("parsed"), None);
    // A scale that agrees with the unit is fine.
    assert!(parse(Path::new("bench.toml"), &spec("\"ms\"", "scale = 1000")).is_ok());
    assert_eq!(
        errors(&spec("\"ms\"", "scale = 1")),
        [
            "bench.toml:23: metrics.probe.scale: scale 1 does not turn s into ms: that takes 1000; leave `scale` out, the unit sets it"
        ]
    );
    assert_eq!(
        errors(&spec("\"MB\"", "")),
        [
            "bench.toml:22: metrics.probe.unit: the metric is a time (recorded in s) but unit \"MB\" is a size; expected one of ns, µs, us, ms, s, min, h"
        ]
    );
    assert_eq!(
        errors(&spec("\"runs\"", "")),
        [
            "bench.toml:22: metrics.probe.unit: the metric is a time (recorded in s); unit \"runs\" cannot be converted to: expected one of ns, µs, us, ms, s, min, h"
        ]
    );
    // A memory probe into a metric declared in seconds.
    let memory_in_seconds = spec("\"s\"", "").replace("unit = \"MiB\"", "unit = \"s\"");
    assert_eq!(
        errors(&memory_in_seconds),
        [
            "bench.toml:19: metrics.heap.unit: the metric is a size (recorded in bytes) but unit \"s\" is a time; expected one of bytes, B, KB, kB, MB, GB, KiB, MiB, GiB"
        ]
    );
}

#[test]
fn check_prints_floors_in_the_units_shown() {
    let plan = parse(
        Path::new("bench.toml"),
        "name = \"f\"\n[install]\ncommand = \"true\"\n[measure]\nstartup = [\"demo\"]\n",
    )
    .unwrap();
    let check = describe(&plan);
    let line = |key: &str| check.lines().find(|l| l.trim_start().starts_with(&format!("{key} "))).unwrap().to_string();
    assert!(line("cold").contains(" 100.0 ms ") && line("cold").contains(" 20.0% "), "{check}");
    assert!(line("rss").contains(" 10.49 MB "), "{check}");
    assert!(!check.contains("10485760"), "{check}");
}

#[test]
fn harness_files_stay_inside_the_spec_folder() {
    let dir = tempfile::tempdir().unwrap();
    let spec_dir = dir.path().join("spec");
    std::fs::create_dir(&spec_dir).unwrap();
    std::fs::write(spec_dir.join("ok.js"), "ok").unwrap();
    std::fs::write(dir.path().join("secret"), "host secret").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", spec_dir.join("passwd.js")).unwrap();
    std::os::unix::fs::symlink("../secret", spec_dir.join("up.js")).unwrap();
    std::os::unix::fs::symlink("ok.js", spec_dir.join("alias.js")).unwrap();
    let spec = MINIMAL.replace(
        "[install]",
        "[harness]\na = \"ok.js\"\nb = \"passwd.js\"\nc = \"up.js\"\nd = \"../secret\"\ne = \"/etc/passwd\"\nf = \"alias.js\"\ng = \".\"\n[install]",
    );
    let path = spec_dir.join("bench.toml");
    let found = match parse(&path, &spec) {
        Ok(_) => panic!("accepted"),
        Err(SpecErrors(errors)) => errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    };
    let at = |line: usize, field: &str, why: &str| {
        let want = format!("{}:{line}: harness.{field}: ", path.display());
        assert!(
            found.iter().any(|e| e.starts_with(&want) && e.contains(why)),
            "missing {want}…{why} in\n{}",
            found.join("\n")
        );
    };
    at(5, "b", "outside the spec's folder");
    at(6, "c", "outside the spec's folder");
    at(7, "d", "leaves its folder through `..`");
    at(8, "e", "expected a relative path");
    at(10, "g", "expected a path without empty or `.` parts");
    assert_eq!(found.len(), 5, "{}", found.join("\n"));
    assert!(found.iter().all(|e| !e.contains("host secret") && !e.contains("root:")), "{found:?}");
}

#[test]
fn the_output_kept_per_command_is_the_specs_within_bounds() {
    let plan = parse(Path::new("bench.toml"), MINIMAL).unwrap();
    assert_eq!(plan.sandbox.output_cap_bytes, sandbench_proto::DEFAULT_OUTPUT_CAP_BYTES);
    let small = MINIMAL.replace("[install]", "[sandbox]\noutput_kb = 256\n[install]");
    assert_eq!(parse(Path::new("bench.toml"), &small).unwrap().sandbox.output_cap_bytes, 256 * 1024);
    for bad in ["0", "3", "65537", "-1"] {
        let spec = MINIMAL.replace("[install]", &format!("[sandbox]\noutput_kb = {bad}\n[install]"));
        let found = errors(&spec);
        assert!(found.len() == 1 && found[0].starts_with("bench.toml:4: sandbox.output_kb: "), "{bad}: {found:?}");
    }
    assert!(super::describe(&plan).contains("GB disk (bounded where the engine can)"), "{}", super::describe(&plan));
}

#[test]
fn check_asks_git_whether_a_url_names_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git").arg("-C").arg(&repo).args(args).output().unwrap().status.success();
        assert!(ok, "git {args:?}");
    };
    std::fs::create_dir(&repo).unwrap();
    git(&["init", "-q"]);
    git(&["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"]);
    let spec_path = dir.path().join("bench.toml");
    let spec = |url: &str| {
        MINIMAL.replace("[install]", &format!("[sandbox]\nnetwork = true\n[source]\nurl = \"{url}\"\n[install]"))
    };
    let url = format!("file://{}", repo.display());
    std::fs::write(&spec_path, spec(&url)).unwrap();
    let plan = parse(&spec_path, &spec(&url)).unwrap();
    assert_eq!(check_remote(&spec_path, &plan).unwrap(), None);
    let missing = format!("file://{}", dir.path().join("nope").display());
    std::fs::write(&spec_path, spec(&missing)).unwrap();
    let plan = parse(&spec_path, &spec(&missing)).unwrap();
    let err = check_remote(&spec_path, &plan).unwrap_err().to_string();
    let want = format!("{}:6: source.url: {missing} is not a repository: ", spec_path.display());
    assert!(err.contains(&want) && err.contains("does not appear to be a git repository"), "{err}");
    // A host git cannot reach (no network here; the sandbox may have one) is a warning only.
    let unreachable = "https://sandbench.invalid/x.git";
    std::fs::write(&spec_path, spec(unreachable)).unwrap();
    let plan = parse(&spec_path, &spec(unreachable)).unwrap();
    let warning = check_remote(&spec_path, &plan).unwrap().expect("a warning");
    assert!(warning.contains("source.url: could not ask whether") && warning.contains(unreachable), "{warning}");
}

#[test]
fn intake_bounds_have_defaults_and_are_the_specs_within_bounds() {
    let plan = parse(Path::new("bench.toml"), MINIMAL).unwrap();
    assert_eq!((plan.max_metrics, plan.source_max_bytes), (4096, 512_000_000));
    let spec = r#"
name = "bounds"
[source]
max_mb = 1.5
[report]
max_metrics = 10
[install]
command = "true"
[runtime]
max_results_per_script = 5
[[runtime.script]]
name = "s"
run = "true"
metrics = ["a"]
[[transport.script]]
name = "t"
run = "true"
metrics = ["b"]
[metrics.a]
title = "A"
unit = "ms"
[metrics.b]
title = "B"
unit = "ms"
"#;
    let plan = parse(Path::new("bench.toml"), spec).unwrap();
    assert_eq!((plan.max_metrics, plan.source_max_bytes), (10, 1_500_000));
    assert_eq!(plan.agent.runtime.scripts[0].max_results, 5);
    assert_eq!(plan.agent.transport.scripts[0].max_results, sandbench_proto::plan::DEFAULT_MAX_RESULTS);
    let shown = describe(&plan);
    assert!(shown.contains("at most 10 metrics a side"), "{shown}");
    assert!(shown.contains("(at most 5 RESULT lines a run)"), "{shown}");
    for (bad, line, field) in [
        ("max_mb = 0", 4, "source.max_mb"),
        ("max_mb = -4", 4, "source.max_mb"),
        ("max_metrics = 0", 6, "report.max_metrics"),
        ("max_metrics = 70000", 6, "report.max_metrics"),
        ("max_results_per_script = 0", 10, "runtime.max_results_per_script"),
        ("max_results_per_script = 100001", 10, "runtime.max_results_per_script"),
    ] {
        let key = bad.split(' ').next().unwrap();
        let text: String = spec
            .lines()
            .map(|l| if l.starts_with(key) { bad.to_string() } else { l.to_string() })
            .collect::<Vec<_>>()
            .join("\n");
        let found = errors(&text);
        let prefix = format!("bench.toml:{line}: {field}: expected ");
        assert!(found.len() == 1 && found[0].starts_with(&prefix), "{bad}: {found:?}");
    }
}

#[test]
fn network_registries_bridges_npm_pip_and_uv_for_the_builder_and_every_user() {
    let text = MINIMAL.replace(
        "[install]",
        "[sandbox]\nnetwork = \"registries\"\n[registries]\nnpm = \"https://registry.npmjs.org\"\nhosts = [\"Files.PythonHosted.org\"]\nport = 4999\n[env]\nnpm_config_fund = \"true\"\n[install]",
    );
    let plan = parse(Path::new("bench.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!plan.sandbox.network, "the sandbox itself has no network");
    let r = plan.sandbox.registries.as_ref().unwrap();
    assert_eq!((r.npm.as_deref(), r.pypi.as_deref(), r.port), (Some("https://registry.npmjs.org/"), None, 4999));
    assert_eq!(r.hosts, ["files.pythonhosted.org"]);
    let agent = plan.agent_plan("abc");
    let bridge = agent.registries.as_ref().unwrap();
    assert_eq!(bridge.port, 4999);
    for env in [&bridge.env, &agent.env] {
        assert_eq!(env["npm_config_registry"], "http://127.0.0.1:4999/");
        assert_eq!(env["PIP_INDEX_URL"], "http://127.0.0.1:4999/_/pypi/");
        assert_eq!(env["UV_INDEX_URL"], "http://127.0.0.1:4999/_/pypi/");
        assert_eq!(env["npm_config_replace_registry_host"], "registry.npmjs.org");
    }
    assert_eq!(agent.env["npm_config_fund"], "true", "the spec's env wins");
    // Off and on as before; the bridge is on neither.
    for (value, on) in [("false", false), ("true", true)] {
        let plan = parse(
            Path::new("bench.toml"),
            &MINIMAL.replace("[install]", &format!("[sandbox]\nnetwork = {value}\n[install]")),
        )
        .unwrap();
        assert_eq!(
            (plan.sandbox.network, plan.sandbox.registries.is_none(), plan.agent.registries.is_none()),
            (on, true, true)
        );
    }
}

#[test]
fn network_and_registries_errors_name_line_and_field() {
    let with = |sandbox: &str, registries: &str| {
        errors(&MINIMAL.replace("[install]", &format!("[sandbox]\n{sandbox}\n{registries}\n[install]")))
    };
    assert_eq!(
        with("network = \"internet\"", ""),
        ["bench.toml:4: sandbox.network: expected true, false or \"registries\", got \"internet\""]
    );
    assert_eq!(
        with("network = true", "[registries]\nnpm = \"https://r.example/\""),
        ["bench.toml:5: registries: the [registries] section needs sandbox.network = \"registries\""]
    );
    let errs = with(
        "network = \"registries\"",
        "[registries]\nnpm = \"http://r.example/\"\npypi = \"https://u:p@pypi.example/simple\"\nhosts = [\"a b\"]\nport = 0",
    );
    assert_eq!(errs.len(), 4, "{errs:?}");
    assert!(errs[0].starts_with("bench.toml:6: registries.npm: expected an https URL"), "{errs:?}");
    assert!(errs[1].contains("registries.pypi: expected an https URL with a host name and no credentials"), "{errs:?}");
    assert!(errs[2].contains("registries.hosts: expected a host name"), "{errs:?}");
    assert!(errs[3].contains("registries.port: expected a whole number from 1 to 65535"), "{errs:?}");
}

const COMPILED: &str = r#"name = "compiled"
[source]
repository = "."
[prepare]
commands = ["npm pack"]
artifacts = ["release/*.tgz"]
artifact_format = "npm-tarball"
origin_port = 18741
origin_path = "releases/v1.0.0/"
versions = { tsc = "npx tsc --version" }
[[prepare.optional]]
name = "compiled"
when = ["scripts/build-binary.js", "scripts/assemble-release.js"]
incomplete = "Compiled release build scripts are incomplete"
commands = ["node scripts/build-binary.js", "node scripts/assemble-release.js"]
timeout_s = 600
artifacts = ["release/*.tar.gz"]
artifact_format = "linux-x64-single-executable"
compiled = true
versions = { bun = "bun --version" }
[[prepare.optional]]
name = "docs"
when = "docs/build.sh"
commands = ["sh docs/build.sh"]
[install]
command = "sh install.sh"
entry_point = "~/.local/bin/demo"
inventory = "npm ls --global --all --json"
checks = [ { expect_format = "compiled" } ]
"#;

#[test]
fn optional_steps_formats_and_the_origin_path_are_read() {
    let plan = parse(Path::new("bench.toml"), COMPILED).unwrap_or_else(|e| panic!("{e}"));
    let p = &plan.agent.prepare;
    assert_eq!((p.origin_path.as_str(), p.artifact_format.as_deref()), ("releases/v1.0.0", Some("npm-tarball")));
    assert_eq!(p.versions["tsc"], "npx tsc --version");
    let [compiled, docs] = &p.optional[..] else { panic!("{:?}", p.optional) };
    assert_eq!(compiled.when, ["scripts/build-binary.js", "scripts/assemble-release.js"]);
    assert_eq!(compiled.incomplete, "Compiled release build scripts are incomplete");
    assert_eq!((compiled.commands[1].timeout_s, compiled.compiled), (600.0, true));
    assert_eq!(compiled.artifact_format.as_deref(), Some("linux-x64-single-executable"));
    assert_eq!(compiled.versions["bun"], "bun --version");
    // One path is a list of one; without `incomplete` the error names the files.
    assert_eq!(docs.when, ["docs/build.sh"]);
    assert_eq!(docs.incomplete, "the optional step \"docs\" needs all of docs/build.sh");
    assert_eq!((docs.commands[0].timeout_s, docs.compiled), (1800.0, false));
    // A phase's limit counts what may run: every optional step, the inventory.
    assert_eq!(plan.phase_limit_s(Phase::Prepare), 1800.0 + 2.0 * 600.0 + 1800.0);
    assert_eq!(plan.phase_limit_s(Phase::Install), 240.0 + 60.0 + 120.0);
    let i = &plan.agent.install;
    assert_eq!(i.entry_point.as_deref(), Some("~/.local/bin/demo"));
    assert_eq!(i.inventory.as_ref().map(|s| s.run.as_str()), Some("npm ls --global --all --json"));
    assert_eq!(i.checks, [Check::ExpectFormat { format: sandbench_proto::plan::InstallationFormat::Compiled }]);
    let described = describe::describe(&plan);
    for needle in [
        "optional step \"compiled\", when the source has scripts/build-binary.js and scripts/assemble-release.js:",
        "artifacts: release/*.tar.gz (a compiled installation)",
        "served on http://127.0.0.1:18741/releases/v1.0.0/",
        "check: ~/.local/bin/demo is compiled when a compiled optional step ran",
        "$ npm ls --global --all --json (kept, never a failure)",
    ] {
        assert!(described.contains(needle), "{needle} not in:\n{described}");
    }
}

#[test]
fn optional_steps_and_formats_are_refused_where_they_cannot_work() {
    let spec = r#"name = "bad"
[prepare]
origin_path = "../up"
versions = { machine = "uname -m", ok = "" }
[[prepare.optional]]
name = "compiled"
when = ["/etc/passwd"]
artifacts = ["release/x.tar.gz"]
compiled = true
[[prepare.optional]]
name = "compiled"
when = []
incomplete = " "
[install]
command = "sh install.sh"
checks = [ { expect_format = "native" }, { expect_format = "compiled" } ]
"#;
    assert_eq!(
        errors(spec),
        [
            "bench.toml:3: prepare.origin_path: expected a path such as \"releases/v1.0.0\": \"../up\" leaves its folder through `..`",
            "bench.toml:3: prepare.origin_path: the origin serves the release under it: it needs prepare.origin_port",
            "bench.toml:4: prepare.versions.machine: expected a fact name of letters, digits, '.', '_' or '-', not one sandbench records (kernel, cpu, cpus, memory_bytes, os, agent, machine, artifact_format, optional_steps, installation_format, dependency_inventory), got \"machine\"",
            "bench.toml:4: prepare.versions.ok: expected the command that prints it, e.g. \"bun --version\"",
            "bench.toml:5: prepare.optional[0]: an optional step looks for files in the source, but the spec has no [source]",
            "bench.toml:5: prepare.optional[0].commands: expected the commands the step runs",
            "bench.toml:7: prepare.optional[0].when: expected a file inside the source folder: expected a relative path, got the absolute path \"/etc/passwd\"",
            "bench.toml:8: prepare.optional.artifacts: an optional step's artifacts are released beside prepare.artifacts, which has none",
            "bench.toml:10: prepare.optional[1]: an optional step looks for files in the source, but the spec has no [source]",
            "bench.toml:10: prepare.optional[1].commands: expected the commands the step runs",
            "bench.toml:11: prepare.optional[1].name: another optional step is named \"compiled\"",
            "bench.toml:12: prepare.optional[1].when: expected the files the step needs, e.g. \"scripts/build.js\"",
            "bench.toml:13: prepare.optional[1].incomplete: expected the error to fail with",
            "bench.toml:16: install.checks[0].expect_format: expected \"compiled\" (it applies when the side built a compiled artifact), got \"native\"",
            "bench.toml:16: install.checks: an expect_format check looks at install.entry_point, which is not set",
        ]
    );
}

#[test]
fn the_bridge_bounds_default_to_what_no_real_install_meets_and_a_registry_keeps_its_port() {
    let with = |registries: &str| {
        MINIMAL.replace(
            "[install]",
            &format!("[sandbox]\nnetwork = \"registries\"\n[registries]\n{registries}\n[install]"),
        )
    };
    let plan = parse(Path::new("bench.toml"), &with("npm = \"https://registry.npmjs.org\"")).unwrap();
    let r = plan.sandbox.registries.as_ref().unwrap();
    assert_eq!((r.upstream_per_second, r.max_upstream_requests, r.max_not_found), (400, 20_000, 500));
    let plan = parse(
        Path::new("bench.toml"),
        &with(
            "npm = \"http://127.0.0.1:8080\"\nupstream_per_second = 50\nmax_upstream_requests = 300\nmax_not_found = 0",
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = plan.sandbox.registries.as_ref().unwrap();
    assert_eq!((r.upstream_per_second, r.max_upstream_requests, r.max_not_found), (50, 300, 0));
    // npm compares its replace-registry-host with a tarball URL's host and port.
    assert_eq!(plan.agent_plan("abc").env["npm_config_replace_registry_host"], "127.0.0.1:8080");
    let plan = parse(Path::new("bench.toml"), &with("npm = \"https://r.example:443/npm/\"")).unwrap();
    assert_eq!(plan.agent_plan("abc").env["npm_config_replace_registry_host"], "r.example");
    assert_eq!(
        errors(&with("max_upstream_requests = 0")),
        ["bench.toml:6: registries.max_upstream_requests: expected a whole number from 1 to 10000000, got 0"]
    );
}
