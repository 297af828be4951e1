//! The plan as `sandbench check` prints it: what will run where, which metrics, at what rate.

use std::fmt::Write;

use sandbench_proto::Phase;
use sandbench_proto::metric;
use sandbench_proto::metric::{Facet, MetricKey};
use sandbench_proto::plan::{Channel, Check, Runtime, ScenarioStep};

use super::metrics::MetricDef;
use super::{Plan, SourceSettings};

pub fn describe(plan: &Plan) -> String {
    let mut out = String::new();
    setting(&mut out, plan);
    phases(&mut out, plan);
    runtime(&mut out, plan);
    metrics(&mut out, plan);
    cost(&mut out, plan);
    out
}

/// The spec, the sandbox, the source and the trials.
fn setting(out: &mut String, plan: &Plan) {
    let s = &plan.sandbox;
    let _ = writeln!(out, "spec {} ({})", plan.name, plan.spec_path.display());
    let _ = writeln!(
        out,
        "sandbox: {}, {} CPU{}, {:.1} GiB memory, {} GB disk (bounded where the engine can), {} pids, network {}, ttl {} min, \
         output kept per command {} KiB",
        s.image,
        s.cpus,
        s.cpuset.as_ref().map(|c| format!(" (cpuset {c})")).unwrap_or_default(),
        s.memory_bytes as f64 / (1u64 << 30) as f64,
        s.disk_gb,
        s.pids_limit,
        match (s.network, &s.registries) {
            (true, _) => "on".to_string(),
            (false, Some(r)) => format!("off, registries bridged on 127.0.0.1:{}", r.port),
            (false, None) => "off".to_string(),
        },
        s.ttl.as_secs() / 60,
        s.output_cap_bytes / 1024
    );
    let _ = match &plan.source {
        SourceSettings::Local { repository } => writeln!(
            out,
            "source: git archive of {} at each revision (at most {} MB)",
            repository.display(),
            plan.source_max_bytes / 1_000_000
        ),
        SourceSettings::Url { url } => writeln!(out, "source: {url}, cloned in the sandbox at each revision"),
        SourceSettings::None => writeln!(out, "source: none"),
    };
    let t = &plan.trials;
    let _ = writeln!(
        out,
        "trials: install {}, measure {}, runtime {}, transport {}, ui {} (stop a side after {} identical failures)",
        t.install, t.measure, t.runtime, t.transport, t.ui, t.failure_limit
    );
    let rule = match plan.rule {
        super::Rule::Paired => format!(
            "paired estimate and interval against each metric's floor (from A/A runs: at least {:.2}%)",
            plan.min_floor * 100.0
        ),
        super::Rule::Reference => "the reference rule (medians, floors and spreads)".to_string(),
    };
    let order = match t.order {
        super::Order::Abba => None,
        super::Order::Interleaved => Some("single runs alternate between the sides within each trial"),
        super::Order::Duet => Some("both sides take each run at once, each on CPUs of its own"),
        super::Order::Auto => Some(
            "a duet where this machine has twice sandbox.cpus and one pair runs, else single runs alternating \
             between the sides",
        ),
    };
    if let Some(order) = order {
        let _ = writeln!(out, "order: {} ({order})", t.order.as_str());
    }
    let _ = writeln!(out, "verdicts: {rule}; at most {} metrics a side", plan.max_metrics);
    if t.max_pairs > plan.gated_trials(&t.gate) {
        // With the default gate, the benchmarks of bench steps in the phases that grow join it.
        let benches = super::GROWN.into_iter().filter_map(|p| plan.section(p)).flat_map(|s| &s.benches);
        let named = benches.filter(|_| !t.gate_given).map(|b| format!("the benchmarks of bench step {}", b.name));
        let gate: Vec<String> = t.gate.iter().cloned().chain(named).collect();
        let _ = writeln!(out, "adaptive: up to {} pairs while any of {} is inconclusive", t.max_pairs, gate.join(", "));
    }
}

/// The phases before the runtime: what runs, as whom, and what is checked.
fn phases(out: &mut String, plan: &Plan) {
    let a = &plan.agent;
    let _ = writeln!(out, "\nprepare (untimed, as builder):");
    for step in &a.prepare.commands {
        let _ = writeln!(out, "  $ {}", step.run);
    }
    if !a.prepare.artifacts.is_empty() {
        let _ =
            writeln!(out, "  artifacts: {} → metric {}, SHA256SUMS", a.prepare.artifacts.join(", "), metric::BUNDLE);
    }
    for o in &a.prepare.optional {
        let _ = writeln!(out, "  optional step {:?}, when the source has {}:", o.name, o.when.join(" and "));
        for step in &o.commands {
            let _ = writeln!(out, "    $ {}", step.run);
        }
        if !o.artifacts.is_empty() {
            let compiled = if o.compiled { " (a compiled installation)" } else { "" };
            let _ = writeln!(out, "    artifacts: {}{compiled}", o.artifacts.join(", "));
        }
    }
    if let Some(port) = a.prepare.origin_port {
        let path = if a.prepare.origin_path.is_empty() { String::new() } else { format!("{}/", a.prepare.origin_path) };
        let _ = writeln!(out, "  served on http://127.0.0.1:{port}/{path}");
    }
    let _ = writeln!(out, "install (timed, a fresh user per trial):\n  $ {}", a.install.command.run);
    for check in &a.install.checks {
        let _ = match check {
            Check::Output { run, contains } => writeln!(out, "  check: `{run}` prints {contains:?}"),
            Check::FileExists { path } => writeln!(out, "  check: {path} exists"),
            Check::FileStartsWith { path, prefix } => {
                writeln!(out, "  check: {path} starts with {:?}", String::from_utf8_lossy(prefix))
            }
            Check::ExpectFormat { format } => writeln!(
                out,
                "  check: {} is {} when a compiled optional step ran",
                a.install.entry_point.as_deref().unwrap_or("the entry point"),
                format.as_str()
            ),
        };
    }
    if let Some(entry) = &a.install.entry_point {
        let _ = writeln!(out, "  installation format (compiled or script) of {entry}");
    }
    if let Some(inventory) = &a.install.inventory {
        let _ = writeln!(out, "  after the first installation, untimed: $ {} (kept, never a failure)", inventory.run);
    }
    if let Some(f) = &a.install.fixture {
        let _ = writeln!(
            out,
            "  fixture: ~/{} with {} file(s){}",
            f.dir,
            f.files.len(),
            if f.git { ", a git repository" } else { "" }
        );
    }
    if let Some(startup) = &a.measure.startup {
        let _ = writeln!(
            out,
            "measure: `{}` cold then warm, memory after {} s",
            startup.command.join(" "),
            a.measure.settle_s
        );
        if let Some(between) = &a.measure.between {
            let _ = writeln!(out, "  between: $ {}", between.run);
        }
        if a.measure.instructions {
            let _ = writeln!(out, "  {}", lens_words("the cold start", "cold"));
        }
    }
    if plan.uses_instruction_lens() {
        let _ = writeln!(
            out,
            "instruction lens: valgrind callgrind (cache simulation at a fixed geometry), node with --predictable --hash-seed={0} --random-seed={0}, each run up to {1} s; one pair decides a count (floor 0.5 % unless an A/A calibration gives its own)",
            a.lens.seed, a.lens.timeout_s
        );
        let runs = match plan.lens_runs {
            Some(n) => format!("in the first {n} trials of each side ([lens] runs)"),
            None => format!(
                "once a side where the A/A noise profile shows the step deterministic, else (and in an A/A run) in \
                 the first {} trials of each side; never in the pairs an adaptive run adds",
                super::LENS_EVIDENCE_TRIALS
            ),
        };
        let _ = writeln!(out, "  lens runs: {runs}");
    }
}

/// What the lens adds to a step, in `check`'s words.
fn lens_words(what: &str, stem: &str) -> String {
    let keys = Facet::LENS.map(|facet| MetricKey::new(stem, facet).to_string());
    format!("+ {what} once more under the instruction lens (see lens runs) → {}", keys.join(", "))
}

/// The sections with scenarios, commands and scripts: runtime, transport and ui.
fn runtime(out: &mut String, plan: &Plan) {
    let t = &plan.trials;
    for name in [Phase::Runtime, Phase::Transport, Phase::Ui] {
        let trials = t.of(name);
        let Some(section) = plan.section(name).filter(|_| trials > 0) else { continue };
        let who =
            if name.needs_install() { "as the first benchmark user" } else { "as builder, in the prepared source" };
        let _ = writeln!(out, "{name} ({trials} trials, {who}):");
        section_lines(out, section);
    }
}

fn metrics(out: &mut String, plan: &Plan) {
    let _ = writeln!(out, "\nmetrics ({}):", plan.metrics.len());
    let key_width = plan.metrics.iter().map(|m| m.key.chars().count()).max().unwrap_or(0).max(14);
    let title_width = plan.metrics.iter().map(|m| m.title.chars().count()).max().unwrap_or(0).max(36);
    let unit_width = plan.metrics.iter().map(|m| m.unit.chars().count()).max().unwrap_or(0).max(6);
    // Floors as the report shows values: in the metric's unit.
    let absolute = |m: &MetricDef| super::numbers::value(m.absolute, m);
    let abs_width = plan.metrics.iter().map(|m| absolute(m).chars().count()).max().unwrap_or(0).max(12);
    let _ = writeln!(
        out,
        "  {:<key_width$} {:<title_width$} {:>unit_width$} {:>abs_width$} {:>9}  group",
        "key", "title", "unit", "absolute", "relative"
    );
    for m in &plan.metrics {
        let absolute = absolute(m);
        let relative = format!("{}%", super::numbers::number(m.relative * 100.0, 1, false));
        let better = if m.better.is_lower() { "" } else { "  (higher is better)" };
        let _ = writeln!(
            out,
            "  {:<key_width$} {:<title_width$} {:>unit_width$} {absolute:>abs_width$} {relative:>9}  {}{better}",
            m.key, m.title, m.unit, m.group
        );
    }
    expansions(out, plan);
}

/// Each family with the keys it defines in this plan (or that it waits for the keys a run
/// names), and each distribution with the facets judged in its place.
fn expansions(out: &mut String, plan: &Plan) {
    // Families, and exact blocks that wait for a benchmark a bench step's run names.
    let waiting = |key: &str| plan.bench_step_of(key).is_some();
    let families: Vec<_> = plan.definitions.blocks.iter().filter(|b| b.is_pattern() || waiting(&b.key)).collect();
    if !families.is_empty() {
        let _ = writeln!(
            out,
            "
families ({}):",
            families.len()
        );
    }
    for family in families {
        let keys: Vec<&str> = plan
            .metrics
            .iter()
            .filter(|m| plan.definitions.block_of(&m.key).is_some_and(|(b, _)| b.key == family.key))
            .map(|m| m.key.as_str())
            .collect();
        // A family under a bench step's stem waits for the benchmarks its run names.
        let bench = sandbench_proto::Phase::ALL
            .into_iter()
            .filter_map(|p| plan.section(p))
            .flat_map(|s| &s.benches)
            .find(|b| family.key.starts_with(&format!("{}.", b.stem())) && family.key.len() > b.stem().len() + 1);
        let mut flags: Vec<&str> = Vec::new();
        if family.ignore {
            flags.push("ignored");
        }
        match family.gate {
            Some(true) => flags.push("gating"),
            Some(false) => flags.push("not gating"),
            None => {}
        }
        let flags = if flags.is_empty() { String::new() } else { format!(" ({})", flags.join(", ")) };
        let named = if let (true, Some(b)) = (keys.is_empty(), bench) {
            format!("the benchmarks bench step {}'s run names{flags}", b.name)
        } else if keys.is_empty() {
            "no key of the spec yet: defines the keys a run's scripts name".to_string()
        } else {
            keys.join(", ")
        };
        let _ = writeln!(out, "  {} → {named}", family.key);
    }
    if !plan.agent.distributions.is_empty() {
        let _ = writeln!(
            out,
            "
distributions (each trial's samples reduced, R type 7):"
        );
    }
    for (key, d) in &plan.agent.distributions {
        let facets: Vec<String> = d.facets().into_iter().map(|f| MetricKey::new(key.as_str(), f).to_string()).collect();
        let _ = writeln!(out, "  {key} → {}", facets.join(", "));
    }
}

/// The rate card, and what a pair costs at most.
fn cost(out: &mut String, plan: &Plan) {
    let c = &plan.cost;
    let hourly = plan.hourly_usd();
    let worst = plan.worst_case().as_secs_f64();
    let _ = writeln!(
        out,
        "\ncost: ${:.4} per sandbox-hour (${}/vCPU-h, ${}/GiB-h memory, ${}/GiB-h disk); a base-and-head pair ${:.4}/h",
        hourly,
        c.cpu_usd_per_hour,
        c.memory_usd_per_gb_hour,
        c.disk_usd_per_gb_hour,
        2.0 * hourly
    );
    let _ = writeln!(
        out,
        "estimate: at most ${:.4} for one pair if every step ran to its timeout ({:.0} min){}",
        2.0 * hourly * worst / 3600.0,
        worst / 60.0,
        c.budget_usd.map(|b| format!("; budget ${b}")).unwrap_or_default()
    );
}

/// A section's scenarios (with their fixtures and steps), commands and scripts.
fn section_lines(out: &mut String, section: &Runtime) {
    for scenario in &section.scenarios {
        let channel = match (&scenario.channel, &scenario.socket) {
            (Channel::Socket, Some(socket)) => format!("socket {}", socket.path),
            (Channel::Terminal, _) => "terminal".to_string(),
            _ => "JSON lines".to_string(),
        };
        let _ = writeln!(out, "  scenario {} ({channel}): `{}`", scenario.name, scenario.command.join(" "));
        if let Some(id) = &scenario.id_field {
            let ready =
                scenario.ready_event.as_deref().map_or("no ready event".to_string(), |e| format!("ready at {e:?}"));
            let _ = writeln!(out, "    replies matched by {id:?}, in any order; {ready}");
        }
        if let Some(fixture) = &scenario.fixture {
            let when = match scenario.keep {
                true => fixture_words(true),
                false => "synced to disk before the child starts",
            };
            let _ = writeln!(out, "    fixture: $ {} ({when})", fixture.run);
        }
        let steps: Vec<String> = scenario.steps.iter().map(step_label).collect();
        let _ = writeln!(out, "    steps: {}", steps.join(", "));
    }
    for c in &section.commands {
        let warmup = if c.warmup > 0 { format!(" after {} warmup", c.warmup) } else { String::new() };
        let prepare = c.prepare.as_ref().map(|p| format!(", each after `{}`", p.run)).unwrap_or_default();
        let _ = writeln!(out, "  command {}: `{}` × {}{warmup}{prepare}", c.metric, c.step.run, c.repeat);
        if c.instructions {
            let _ = writeln!(out, "    {}", lens_words("the command", &c.metric));
        }
    }
    for s in &section.scripts {
        let reads = s.value_field.as_ref().map(|f| format!(" (RESULT field {f:?})")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  script {}: `{}` reports {}{reads} (at most {} RESULT lines a run)",
            s.name,
            s.step.run,
            s.metrics.join(", "),
            s.max_results
        );
        script_extras(out, s);
        if s.instructions {
            let _ = writeln!(out, "    {}", lens_words("the script", &format!("script.{}", s.name)));
        }
    }
    for b in &section.benches {
        let read = b.results.as_ref().map_or_else(|| "its standard output".to_string(), |r| r.clone());
        let _ = writeln!(
            out,
            "  bench {}: `{}` read as {} from {read}, each benchmark a key {}.<benchmark> (at most {})",
            b.name,
            b.step.run,
            b.format,
            b.stem(),
            b.max_benchmarks
        );
        if b.instructions {
            let _ = writeln!(out, "    {} (the whole suite's counts)", lens_words("the suite", &b.stem()));
        }
    }
}

/// When a fixture runs.
fn fixture_words(keep: bool) -> &'static str {
    match keep {
        true => "once per sandbox into $SANDBENCH_KEEP, then read-only",
        false => "before each trial, synced to disk",
    }
}

/// A script's matrix (its children's keys), distributions, sizes and fixture.
fn script_extras(out: &mut String, s: &sandbench_proto::plan::Script) {
    if !s.matrix.is_empty() {
        let params: Vec<String> = s.matrix.iter().map(|p| format!("{} = {}", p.name, p.values.join("|"))).collect();
        let keys = s.keys();
        let _ = writeln!(out, "    matrix {}: {} keys: {}", params.join(", "), keys.len(), keys.join(", "));
    }
    for (key, d) in &s.distributions {
        let mut facets: Vec<String> = d.percentiles.iter().map(|p| format!("p{p}")).collect();
        if d.max {
            facets.push("max".into());
        }
        let _ = writeln!(out, "    {key}: samples (at most {} a trial) → {}", s.max_samples, facets.join(", "));
    }
    for size in &s.sizes {
        let _ = writeln!(out, "    size {} → {} (after the script exits)", size.path, size.metric);
    }
    if let Some(fixture) = &s.fixture {
        let _ = writeln!(out, "    fixture: $ {} ({})", fixture.run, fixture_words(s.keep));
    }
}

/// One step, short: its kind and what it waits for or records.
fn step_label(step: &ScenarioStep) -> String {
    match step {
        ScenarioStep::Request { metric: Some(m), .. } => format!("request → {m}"),
        ScenarioStep::Request { .. } => "request".into(),
        ScenarioStep::Interrupt { metric, .. } => format!("interrupt → {metric}"),
        ScenarioStep::Memory { metric } => format!("memory → {metric}"),
        ScenarioStep::Batch { metric, count, size, .. } => format!("batch {count} by {size} → {metric}"),
        ScenarioStep::Size { metric, path } => format!("size {path} → {metric}"),
        ScenarioStep::Cpu { metric } => format!("cpu → {metric}"),
        ScenarioStep::Restart { .. } => "restart".into(),
        ScenarioStep::Settle { seconds } => format!("settle {seconds} s"),
        ScenarioStep::Ready { .. } => "ready".into(),
        ScenarioStep::Type { text } => format!("type {text:?}"),
        ScenarioStep::Keys { keys, .. } => format!("keys {}", keys.join(" ")),
        ScenarioStep::WaitFor { text, regex: Some(re), count, .. } => match count {
            Some(c) => format!("wait_for /{re}/ group {} ≥ {} stable {} s", c.group, c.at_least, c.stable_s),
            None if text.is_empty() => format!("wait_for /{re}/"),
            None => format!("wait_for /{re}/ {text:?}"),
        },
        ScenarioStep::WaitFor { text, fresh, more, .. } => {
            format!("wait_for{}{} {text:?}", if *fresh { " fresh" } else { "" }, if *more { " more" } else { "" })
        }
        ScenarioStep::Retry { attempts, steps } => {
            let inner: Vec<String> = steps.iter().map(step_label).collect();
            format!("retry ×{attempts} [{}]", inner.join(", "))
        }
        ScenarioStep::StartTimer { metric, cpu_metric, from_spawn } => format!(
            "start_timer {}{}",
            [metric.as_deref(), cpu_metric.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" + "),
            if *from_spawn { " from spawn" } else { "" }
        ),
        ScenarioStep::StopTimer { at_echo } => format!("stop_timer{}", if *at_echo { " at echo" } else { "" }),
        ScenarioStep::Send { repeat, tag, .. } => format!("send ×{repeat} as {tag}"),
        ScenarioStep::Collect { tag, .. } => format!("collect {tag}"),
    }
}
