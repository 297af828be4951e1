//! `examples/prime-agent/bench.toml`, the reference harness as a spec, short of the network it
//! needs: every mechanism it uses is one the demo's spec uses too, and the demo's spec is run end
//! to end offline — every phase by `tests/phases.rs` (and `tests/run.rs`), its optional compiled
//! build, the formats and the inventory by `tests/compiled.rs`. Its `between` step (the
//! reference's stop_agents) is run here against a stand-in `prime-agent`: it fails on a failing
//! stop, tolerating only the race the reference tolerates.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sandbench::spec::{Plan, SourceSettings, load};
use sandbench_proto::plan::{Aggregate, Channel, Check, Runtime, ScenarioStep};

fn example(name: &str) -> Plan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name).join("bench.toml");
    load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// What a spec makes sandbench do, by name: each section's features, each check kind, each
/// scenario channel and step kind (with the options that change what it does).
fn mechanisms(plan: &Plan) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut add = |name: &str, used: bool| {
        if used {
            out.insert(name.to_string());
        }
    };
    let a = &plan.agent;
    add("sandbox.network", plan.sandbox.network);
    add("sandbox.registries", plan.sandbox.registries.is_some());
    add("source.git", matches!(plan.source, SourceSettings::Url { .. }));
    add("source.local", matches!(plan.source, SourceSettings::Local { .. }));
    add("harness", !a.harness.is_empty());
    add("env", !a.env.is_empty());
    let p = &a.prepare;
    add("prepare.commands", !p.commands.is_empty());
    add("prepare.artifacts", !p.artifacts.is_empty());
    add("prepare.origin", p.origin_port.is_some());
    add("prepare.origin_path", !p.origin_path.is_empty());
    add("prepare.artifact_format", p.artifact_format.is_some());
    add("prepare.versions", !p.versions.is_empty());
    add("prepare.optional", !p.optional.is_empty());
    for o in &p.optional {
        add("prepare.optional.artifacts", !o.artifacts.is_empty());
        add("prepare.optional.artifact_format", o.artifact_format.is_some());
        add("prepare.optional.compiled", o.compiled);
        add("prepare.optional.versions", !o.versions.is_empty());
        add("prepare.optional.when.several", o.when.len() > 1);
    }
    let i = &a.install;
    add("install.env", !i.command.env.is_empty());
    add("install.entry_point", i.entry_point.is_some());
    add("install.inventory", i.inventory.is_some());
    for check in &i.checks {
        let kind = match check {
            Check::Output { .. } => "output",
            Check::FileExists { .. } => "file_exists",
            Check::FileStartsWith { .. } => "file_starts_with",
            Check::ExpectFormat { .. } => "expect_format",
        };
        add(&format!("install.check.{kind}"), true);
    }
    if let Some(f) = &i.fixture {
        add("install.fixture", true);
        add("install.fixture.git", f.git);
        add("install.fixture.home_files", !f.home_files.is_empty());
    }
    let m = &a.measure;
    add("measure.startup", m.startup.is_some());
    add("measure.startup.cwd", m.startup.as_ref().is_some_and(|s| s.cwd.is_some()));
    add("measure.between", m.between.is_some());
    add("measure.footprint", m.footprint);
    add("measure.instructions", m.instructions);
    for (phase, runtime) in [("runtime", &a.runtime), ("transport", &a.transport), ("ui", &a.ui)] {
        phase_mechanisms(phase, runtime, &mut add);
    }
    out
}

fn phase_mechanisms(phase: &str, runtime: &Runtime, add: &mut impl FnMut(&str, bool)) {
    for s in &runtime.scenarios {
        let channel = match s.channel {
            Channel::JsonLines => "jsonl",
            Channel::Terminal => "terminal",
            Channel::Socket => "socket",
        };
        add(&format!("{phase}.scenario.{channel}"), true);
        add(&format!("{phase}.scenario.start_metric"), s.start_metric.is_some());
        add(&format!("{phase}.scenario.shutdown"), s.shutdown.is_some());
        add(&format!("{phase}.scenario.fixture"), s.fixture.is_some());
        add(&format!("{phase}.scenario.cwd"), s.cwd.is_some());
        for step in &s.steps {
            step_mechanisms(step, add);
        }
    }
    for c in &runtime.commands {
        add(&format!("{phase}.command"), true);
        add(&format!("{phase}.command.warmup"), c.warmup > 0);
        add(&format!("{phase}.command.prepare"), c.prepare.is_some());
        add(&format!("{phase}.command.{:?}", c.aggregate).to_lowercase(), true);
    }
    for s in &runtime.scripts {
        add(&format!("{phase}.script"), true);
        add(&format!("{phase}.script.value_field"), s.value_field.is_some());
    }
}

fn step_mechanisms(step: &ScenarioStep, add: &mut impl FnMut(&str, bool)) {
    match step {
        ScenarioStep::Request { send, repeat, aggregate, expect, output_bytes, .. } => {
            add("step.request", true);
            add("step.request.send_list", send.is_array());
            add("step.request.repeat", *repeat > 1);
            add("step.request.total", *aggregate == Aggregate::Total);
            add("step.request.expect", !expect.is_empty());
            add("step.request.output_bytes", output_bytes.is_some());
        }
        ScenarioStep::Interrupt { .. } => add("step.interrupt", true),
        ScenarioStep::Memory { .. } => add("step.memory", true),
        ScenarioStep::Cpu { .. } => add("step.cpu", true),
        ScenarioStep::Ready { .. } => add("step.ready", true),
        ScenarioStep::Type { .. } => add("step.type", true),
        ScenarioStep::WaitFor { fresh, more, regex, count, timeout_s, .. } => {
            add("step.wait_for", true);
            add("step.wait_for.fresh", *fresh);
            add("step.wait_for.more", *more);
            add("step.wait_for.regex", regex.is_some());
            add("step.wait_for.count", count.is_some());
            add("step.wait_for.timeout", timeout_s.is_some());
        }
        ScenarioStep::Keys { keys, settle_s } => {
            add("step.keys", true);
            add("step.keys.repeated", keys.iter().any(|k| k.contains('*')));
            add("step.keys.settle", *settle_s > 0.0);
        }
        ScenarioStep::Retry { steps, .. } => {
            add("step.retry", true);
            add("step.retry.nested", steps.iter().any(|s| matches!(s, ScenarioStep::Retry { .. })));
            for inner in steps {
                step_mechanisms(inner, add);
            }
        }
        ScenarioStep::StartTimer { metric, cpu_metric, from_spawn } => {
            add("step.start_timer", true);
            add("step.start_timer.wall", metric.is_some());
            add("step.start_timer.cpu", cpu_metric.is_some());
            add("step.start_timer.from_spawn", *from_spawn);
        }
        ScenarioStep::StopTimer { at_echo } => {
            add("step.stop_timer", true);
            add("step.stop_timer.at_echo", *at_echo);
        }
        ScenarioStep::Send { .. } => add("step.send", true),
        ScenarioStep::Collect { .. } => add("step.collect", true),
        ScenarioStep::Restart { .. } => add("step.restart", true),
        ScenarioStep::Settle { .. } => add("step.settle", true),
        ScenarioStep::Batch { .. } => add("step.batch", true),
        ScenarioStep::Size { .. } => add("step.size", true),
    }
}

/// What only the network gives the reference's spec: its sources cloned from GitHub (the demo's
/// are uploaded), its npm and Python dependencies downloaded.
const NETWORK_ONLY: [&str; 2] = ["sandbox.network", "source.git"];

#[test]
fn every_mechanism_of_the_reference_spec_is_one_the_demo_runs_end_to_end() {
    let prime = mechanisms(&example("prime-agent"));
    let demo = mechanisms(&example("demo"));
    let missing: Vec<&String> =
        prime.iter().filter(|m| !demo.contains(*m) && !NETWORK_ONLY.contains(&m.as_str())).collect();
    assert!(missing.is_empty(), "the reference's spec uses what no end-to-end test of the demo runs: {missing:?}");
    // The comparison sees what it should: the reference's compiled build, format guard, origin
    // layout, inventory and stop step are among them.
    for used in [
        "prepare.optional.compiled",
        "prepare.optional.when.several",
        "install.check.expect_format",
        "install.entry_point",
        "install.inventory",
        "prepare.origin_path",
        "measure.between",
        "transport.script.value_field",
        "ui.scenario.terminal",
        "step.wait_for.count",
        "step.retry.nested",
    ] {
        assert!(prime.contains(used), "{used} not seen in the reference's spec: {prime:?}");
    }
    for network in NETWORK_ONLY {
        assert!(prime.contains(network) && !demo.contains(network), "{network}");
    }
    // The end-to-end tests run the demo's own spec (phases.rs loads it; compiled.rs and run.rs
    // run a copy of its folder, which support::demo_repo makes).
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests");
    let source = |name: &str| std::fs::read_to_string(tests.join(name)).unwrap();
    assert!(source("phases.rs").contains("examples/demo/bench.toml"));
    assert!(source("compiled.rs").contains("support::demo_repo(lean_spec)"));
    assert!(source("support/mod.rs").contains("../examples/demo"));
}

/// A stand-in `prime-agent` in a folder of its own: `list --json` prints `list.N` (the Nth call,
/// else the last file) and exits with `list.code` when there is one; `stop ID --json` prints
/// `stop.ID.err` on stderr and exits with `stop.ID.code` (0 when absent), noting each stop.
fn stand_in() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"#!/bin/sh
here=$(dirname "$0")
case "$1" in
list)
  n=$(($(cat "$here/list.calls" 2>/dev/null || echo 0) + 1)); echo "$n" > "$here/list.calls"
  file="$here/list.$n"; [ -f "$file" ] || file=$(ls "$here"/list.[0-9]* | sort -t. -k2 -n | tail -1)
  cat "$file"
  exit "$(cat "$here/list.code" 2>/dev/null || echo 0)"
  ;;
stop)
  echo "$2" >> "$here/stopped"
  [ -f "$here/stop.$2.err" ] && printf '%s\n' "$(cat "$here/stop.$2.err")" >&2
  exit "$(cat "$here/stop.$2.code" 2>/dev/null || echo 0)"
  ;;
esac
exit 64
"#;
    let path = dir.path().join("prime-agent");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    dir
}

fn sessions(ids: &[&str]) -> String {
    let items: Vec<String> =
        ids.iter().map(|id| format!("{{\"name\":\"n-{id}\",\"activeSessionId\":\"{id}\"}}")).collect();
    format!("{{\n  \"sessions\": [\n    {},\n    {{\"name\":\"idle\"}}\n  ]\n}}\n", items.join(",\n    "))
}

/// Runs the spec's `between` with the stand-in first on PATH: its exit status, what it said,
/// and the sessions it stopped.
fn between(dir: &Path) -> (bool, String, String) {
    let plan = example("prime-agent");
    let step = plan.agent.measure.between.as_ref().expect("the reference's spec stops the sessions between starts");
    let path: PathBuf = dir.to_path_buf();
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&step.run)
        .env("PATH", format!("{}:{}", path.display(), std::env::var("PATH").unwrap_or_default()))
        .output()
        .unwrap();
    let stopped = std::fs::read_to_string(dir.join("stopped")).unwrap_or_default();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned(), stopped)
}

#[test]
fn the_stop_step_fails_on_a_failing_stop_and_tolerates_only_the_reference_race() {
    let write = |dir: &Path, name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    // Every active session stopped.
    let ok = stand_in();
    write(ok.path(), "list.1", &sessions(&["a1", "b2"]));
    assert_eq!(between(ok.path()), (true, String::new(), "a1\nb2\n".to_string()));
    // The race: the session ended between list and stop, and a fresh list agrees.
    let race = stand_in();
    write(race.path(), "list.1", &sessions(&["a1", "b2"]));
    write(race.path(), "list.2", &sessions(&["b2"]));
    write(race.path(), "stop.a1.err", "Error: Unknown active session: a1");
    write(race.path(), "stop.a1.code", "1");
    let (passed, said, stopped) = between(race.path());
    assert!(passed, "{said}");
    assert_eq!(stopped, "a1\nb2\n");
    // The same answer while a fresh list still shows it active: a failure.
    let still = stand_in();
    write(still.path(), "list.1", &sessions(&["a1"]));
    write(still.path(), "stop.a1.err", "Error: Unknown active session: a1");
    write(still.path(), "stop.a1.code", "1");
    let (passed, said, _) = between(still.path());
    assert!(!passed && said.contains("prime-agent stop a1 failed (exit 1)"), "{said}");
    // Any other failure of a stop fails, the first one too when a later one succeeds.
    for (err, code) in [("Error: daemon unreachable", "1"), ("Error: Unknown active session: a1", "2")] {
        let failing = stand_in();
        write(failing.path(), "list.1", &sessions(&["a1", "b2"]));
        write(failing.path(), "list.2", &sessions(&["b2"]));
        write(failing.path(), "stop.a1.err", err);
        write(failing.path(), "stop.a1.code", code);
        let (passed, said, _) = between(failing.path());
        assert!(!passed && said.contains(&format!("prime-agent stop a1 failed (exit {code}): {err}")), "{err}: {said}");
    }
    // A failing list fails (nothing is stopped), whatever it printed.
    let unlisted = stand_in();
    write(unlisted.path(), "list.1", &sessions(&["a1"]));
    write(unlisted.path(), "list.code", "3");
    let (passed, _, stopped) = between(unlisted.path());
    assert!(!passed && stopped.is_empty(), "{stopped}");
    // As does a fresh list that fails while confirming the race.
    let unconfirmed = stand_in();
    write(unconfirmed.path(), "list.1", &sessions(&["a1"]));
    write(unconfirmed.path(), "list.2", "not json");
    write(unconfirmed.path(), "stop.a1.err", "Error: Unknown active session: a1");
    write(unconfirmed.path(), "stop.a1.code", "1");
    assert!(!between(unconfirmed.path()).0);
}
