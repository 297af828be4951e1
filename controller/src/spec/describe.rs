//! The plan as `sandbench check` prints it: what will run where, which metrics, at what rate.

use std::fmt::Write;

use sandbench_proto::metric;
use sandbench_proto::plan::{Check, ScenarioStep};

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
        "sandbox: {}, {} CPU{}, {:.1} GiB memory, {} GB disk, {} pids, network {}, ttl {} min",
        s.image,
        s.cpus,
        s.cpuset.as_ref().map(|c| format!(" (cpuset {c})")).unwrap_or_default(),
        s.memory_bytes as f64 / (1u64 << 30) as f64,
        s.disk_gb,
        s.pids_limit,
        if s.network { "on" } else { "off" },
        s.ttl.as_secs() / 60
    );
    let _ = match &plan.source {
        SourceSettings::Local { repository } => {
            writeln!(out, "source: git archive of {} at each revision", repository.display())
        }
        SourceSettings::Url { url } => writeln!(out, "source: {url}, cloned in the sandbox at each revision"),
        SourceSettings::None => writeln!(out, "source: none"),
    };
    let t = &plan.trials;
    let _ = writeln!(
        out,
        "trials: install {}, measure {}, runtime {} (stop a side after {} identical failures)",
        t.install, t.measure, t.runtime, t.failure_limit
    );
    let rule = match plan.rule {
        crate::report::Rule::Paired => "paired estimate and interval against each metric's floor",
        crate::report::Rule::Reference => "the reference rule (medians, floors and spreads)",
    };
    let _ = writeln!(out, "verdicts: {rule}");
    if t.max_pairs > t.measure.max(t.runtime) {
        let _ =
            writeln!(out, "adaptive: up to {} pairs while any of {} is inconclusive", t.max_pairs, t.gate.join(", "));
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
    if let Some(port) = a.prepare.origin_port {
        let _ = writeln!(out, "  served on http://127.0.0.1:{port}/");
    }
    let _ = writeln!(out, "install (timed, a fresh user per trial):\n  $ {}", a.install.command.run);
    for check in &a.install.checks {
        let _ = match check {
            Check::Output { run, contains } => writeln!(out, "  check: `{run}` prints {contains:?}"),
            Check::FileExists { path } => writeln!(out, "  check: {path} exists"),
            Check::FileStartsWith { path, prefix } => {
                writeln!(out, "  check: {path} starts with {:?}", String::from_utf8_lossy(prefix))
            }
        };
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
    }
}

fn runtime(out: &mut String, plan: &Plan) {
    let a = &plan.agent;
    for scenario in &a.runtime.scenarios {
        let steps: Vec<&str> = scenario
            .steps
            .iter()
            .map(|s| match s {
                ScenarioStep::Request { .. } => "request",
                ScenarioStep::Interrupt { .. } => "interrupt",
                ScenarioStep::Memory { .. } => "memory",
                ScenarioStep::Restart { .. } => "restart",
                ScenarioStep::Settle { .. } => "settle",
                ScenarioStep::Cpu { .. } => "cpu",
                ScenarioStep::Ready { .. } => "ready",
                ScenarioStep::Type { .. } => "type",
                ScenarioStep::WaitFor { .. } => "wait_for",
            })
            .collect();
        let _ = writeln!(
            out,
            "runtime scenario {}: `{}`; steps: {}",
            scenario.name,
            scenario.command.join(" "),
            steps.join(", ")
        );
    }
    for c in &a.runtime.commands {
        let _ = writeln!(out, "runtime command {}: `{}` × {}", c.metric, c.step.run, c.repeat);
    }
    for s in &a.runtime.scripts {
        let _ = writeln!(out, "runtime script {}: `{}` reports {}", s.name, s.step.run, s.metrics.join(", "));
    }
}

fn metrics(out: &mut String, plan: &Plan) {
    let _ = writeln!(out, "\nmetrics ({}):", plan.metrics.len());
    let _ = writeln!(out, "  {:<14} {:<36} {:>6} {:>12} {:>9}  group", "key", "title", "unit", "absolute", "relative");
    for m in &plan.metrics {
        let _ = writeln!(
            out,
            "  {:<14} {:<36} {:>6} {:>12} {:>9}  {}",
            m.key, m.title, m.unit, m.absolute, m.relative, m.group
        );
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
