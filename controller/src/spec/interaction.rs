//! What the spec language has for interactive phases: the `ui` and `transport` sections (the same
//! scenarios, commands and scripts as `runtime`), harness files shipped with the spec, fixtures
//! generated before each trial, named keys, waits on fresh output or on counts read off the
//! screen, bounded retries, timed windows with a CPU companion, and daemons spoken to over a Unix
//! socket. Also the data-driven list of timed phases the run walks.

use std::collections::BTreeMap;

use sandbench_proto::Phase;
use sandbench_proto::plan::{Channel, CountRule, Runtime, ScenarioStep, SocketSpec, Step, keys};
use toml::Spanned;

use super::Plan;
use super::raw::{RawScenario, RawStep};
use super::validator::{Validator, json};

/// Largest total size of the harness files (they travel in every phase command's plan).
const MAX_HARNESS_BYTES: usize = 1024 * 1024;

impl Plan {
    /// The timed phases in the order a run walks them, with their trial counts; a phase with
    /// nothing to do has none.
    pub fn timed_phases(&self) -> Vec<(Phase, u32)> {
        Phase::TIMED.into_iter().map(|phase| (phase, self.trials.of(phase))).collect()
    }

    /// The scenarios, commands and scripts of a phase that has them.
    pub fn section(&self, phase: Phase) -> Option<&Runtime> {
        match phase {
            Phase::Runtime => Some(&self.agent.runtime),
            Phase::Transport => Some(&self.agent.transport),
            Phase::Ui => Some(&self.agent.ui),
            Phase::Prepare | Phase::Install | Phase::Measure | Phase::Synthetic => None,
        }
    }
}

/// Whether a section has anything to run.
pub(super) fn is_empty(section: &Runtime) -> bool {
    section.scenarios.is_empty()
        && section.commands.is_empty()
        && section.scripts.is_empty()
        && section.benches.is_empty()
}

/// The longest one trial of a section takes when every step runs to its timeout.
pub(super) fn section_limit_s(section: &Runtime) -> f64 {
    fn steps_limit(steps: &[ScenarioStep], timeout_s: f64) -> f64 {
        steps
            .iter()
            .map(|step| match step {
                ScenarioStep::Request { repeat, .. } => f64::from(*repeat) * timeout_s,
                ScenarioStep::Batch { count, size, .. } => f64::from(count.div_ceil(*size)) * timeout_s,
                ScenarioStep::Settle { seconds } => *seconds,
                ScenarioStep::Keys { keys, settle_s } => keys.len() as f64 * (settle_s + 0.1),
                ScenarioStep::Retry { attempts, steps } => f64::from(*attempts) * steps_limit(steps, timeout_s),
                ScenarioStep::WaitFor { timeout_s: Some(t), .. } => *t,
                ScenarioStep::Memory { .. }
                | ScenarioStep::Cpu { .. }
                | ScenarioStep::Type { .. }
                | ScenarioStep::StartTimer { .. }
                | ScenarioStep::StopTimer { .. }
                | ScenarioStep::Size { .. }
                | ScenarioStep::Send { .. } => 0.0,
                _ => timeout_s,
            })
            .sum()
    }
    let scenario = |s: &sandbench_proto::plan::Scenario| {
        // Fixtures, starting the child, and stopping it (up to 10 s before it is killed).
        s.fixture.as_ref().map_or(0.0, |f| f.timeout_s) + s.timeout_s + steps_limit(&s.steps, s.timeout_s) + 10.0
    };
    section.scenarios.iter().map(scenario).sum::<f64>()
        + section
            .commands
            .iter()
            .map(|c| {
                // Every warmup and timed run, each after its `prepare`.
                let runs = f64::from(c.warmup + c.repeat);
                runs * (c.step.timeout_s + c.prepare.as_ref().map_or(0.0, |p| p.timeout_s))
            })
            .sum::<f64>()
        + section
            .scripts
            .iter()
            .map(|s| {
                let children = sandbench_proto::plan::combinations(&s.matrix).len() as f64;
                children * s.step.timeout_s + s.fixture.as_ref().map_or(0.0, |f| f.timeout_s)
            })
            .sum::<f64>()
        + section.benches.iter().map(|b| b.step.timeout_s).sum::<f64>()
}

/// A harness file's text: a relative path that stays inside the spec's folder once links are
/// resolved (a link to `/etc/shadow` or out through `..` would ship a host file into every
/// sandbox), a regular file (a FIFO would stall `check`), read no further than the bound.
fn read_harness_file(base: &std::path::Path, path: &str) -> Result<String, String> {
    use std::io::Read;
    super::bounds::relative_path(path)?;
    let full = base.join(path);
    let folder = std::fs::canonicalize(if base.as_os_str().is_empty() { std::path::Path::new(".") } else { base })
        .map_err(|e| format!("cannot resolve the spec's folder {}: {e}", base.display()))?;
    let resolved = std::fs::canonicalize(&full).map_err(|e| format!("cannot read {}: {e}", full.display()))?;
    if !resolved.starts_with(&folder) {
        return Err(format!(
            "{path:?} resolves to {}, outside the spec's folder {}",
            resolved.display(),
            folder.display()
        ));
    }
    if !std::fs::metadata(&resolved).is_ok_and(|m| m.is_file()) {
        return Err(format!("{} is not a regular file", full.display()));
    }
    let mut text = String::new();
    std::fs::File::open(&resolved)
        .and_then(|file| file.take(MAX_HARNESS_BYTES as u64 + 1).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {}: {e}", full.display()))?;
    Ok(text)
}

impl Validator<'_> {
    /// Harness files: a plain name each, read from beside the spec.
    pub(super) fn harness(&mut self, raw: &BTreeMap<String, Spanned<String>>) -> BTreeMap<String, String> {
        let mut files = BTreeMap::new();
        let mut total = 0;
        for (name, path) in raw {
            let field = format!("harness.{name}");
            let plain = !name.is_empty()
                && !name.starts_with('.')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !plain {
                self.error(path, &field, "expected a file name of letters, digits, '.', '_' and '-'");
                continue;
            }
            let base = self.file.parent().unwrap_or(std::path::Path::new("."));
            match read_harness_file(base, path.get_ref()) {
                Ok(text) => {
                    total += text.len();
                    files.insert(name.clone(), text);
                }
                Err(why) => self.error(path, &field, why),
            }
        }
        if total > MAX_HARNESS_BYTES
            && let Some(first) = raw.values().next()
        {
            self.error(
                first,
                "harness",
                format!("the harness files total {total} bytes; at most 1 MiB travels with the plan"),
            );
        }
        files
    }

    /// The fixture command of a scenario, run as its user before each trial's child starts.
    pub(super) fn fixture(&mut self, r: &RawScenario, field: &str) -> Option<Step> {
        let run = r.fixture.as_ref()?;
        if run.get_ref().trim().is_empty() {
            self.error(run, &format!("{field}.fixture"), "expected the command that writes the fixtures");
        }
        let timeout_s = self.number(&r.fixture_timeout_s, &format!("{field}.fixture_timeout_s"), 0.0, 3600.0, 120.0);
        Some(Step {
            run: run.get_ref().clone(),
            cwd: r.cwd.as_ref().map(|c| c.get_ref().clone()),
            timeout_s,
            env: BTreeMap::new(),
        })
    }

    /// The socket table of a `socket` scenario (and none elsewhere).
    pub(super) fn socket(&mut self, r: &RawScenario, channel: Channel, field: &str) -> Option<SocketSpec> {
        let field = format!("{field}.socket");
        let Some(raw) = &r.socket else {
            if channel == Channel::Socket {
                self.error(&r.name, &field, "a socket scenario needs [socket] with at least `path`");
            }
            return None;
        };
        if channel != Channel::Socket {
            self.error(raw, &field, "only a scenario with channel = \"socket\" has a socket");
            return None;
        }
        let s = raw.get_ref();
        if !s.path.get_ref().starts_with('/') && !s.path.get_ref().starts_with("~/") {
            self.error(&s.path, &format!("{field}.path"), "expected an absolute path (or one under ~/)");
        }
        if s.unwrap_when.is_some() != s.unwrap_field.is_some() {
            self.error(raw, &format!("{field}.unwrap_field"), "`unwrap_when` and `unwrap_field` go together");
        }
        let envelope = s.envelope.as_ref().map(json);
        if let Some(env) = &envelope
            && !env.to_string().contains("\"$request\"")
        {
            self.error(raw, &format!("{field}.envelope"), "the envelope must hold \"$request\" where the request goes");
        }
        Some(SocketSpec {
            path: s.path.get_ref().clone(),
            connect_timeout_s: self.number(
                &s.connect_timeout_s,
                &format!("{field}.connect_timeout_s"),
                0.0,
                600.0,
                120.0,
            ),
            hello: self.expectations(s.hello.as_ref(), raw.span().start, &format!("{field}.hello")),
            envelope,
            reply: self.expectations(s.reply.as_ref(), raw.span().start, &format!("{field}.reply")),
            id_field: s.id_field.clone().unwrap_or_else(|| "id".into()),
            unwrap_when: self.expectations(s.unwrap_when.as_ref(), raw.span().start, &format!("{field}.unwrap_when")),
            unwrap_field: s.unwrap_field.clone(),
            max_line_bytes: self.count(&s.max_line_bytes, &format!("{field}.max_line_bytes"), 1024, 64 << 20, 2_000_000)
                as u64,
        })
    }

    /// Steps of the interactive kinds; None when `kind` is none of them.
    pub(super) fn interaction_step(
        &mut self,
        r: &RawStep,
        field: &str,
        metric: Option<String>,
    ) -> Option<Option<ScenarioStep>> {
        let kind = r.kind.get_ref().as_str();
        let step = match kind {
            "wait_for" => self.wait_for(r, field, metric),
            "keys" => {
                let Some(list) = r.keys.as_ref().filter(|k| !k.get_ref().is_empty()) else {
                    self.error(
                        &r.kind,
                        &format!("{field}.keys"),
                        "a keys step needs `keys`, e.g. [\"left\", \"backspace*24\"]",
                    );
                    return Some(None);
                };
                for key in list.get_ref() {
                    if let Err(why) = keys::parse(key) {
                        self.error(list, &format!("{field}.keys"), why);
                    }
                }
                let settle_s = self.non_negative(&r.settle_s, &format!("{field}.settle_s"), 60.0, 0.0);
                Some(ScenarioStep::Keys { keys: list.get_ref().clone(), settle_s })
            }
            "retry" => self.retry(r, field),
            "start_timer" | "stop_timer" => self.timer_step(r, field, metric),
            "send" => {
                let (Some(toml::Value::Table(send)), Some(tag)) = (&r.send, &r.tag) else {
                    self.error(&r.kind, field, "a send step needs `send` (a request object) and `tag`");
                    return Some(None);
                };
                let repeat = self.count(&r.repeat, &format!("{field}.repeat"), 1, 10_000, 1) as u32;
                Some(ScenarioStep::Send { send: json(send), repeat, tag: tag.get_ref().clone() })
            }
            "collect" => {
                let Some(tag) = &r.tag else {
                    self.error(
                        &r.kind,
                        &format!("{field}.tag"),
                        "a collect step needs the `tag` of the sends it waits for",
                    );
                    return Some(None);
                };
                Some(ScenarioStep::Collect { tag: tag.get_ref().clone(), expect: self.step_expect(r, field) })
            }
            _ => return None,
        };
        Some(step)
    }

    /// `start_timer` (a wall metric, a CPU metric or both; `from = "now" | "spawn"`) and
    /// `stop_timer` (`at = "now" | "echo"`).
    fn timer_step(&mut self, r: &RawStep, field: &str, metric: Option<String>) -> Option<ScenarioStep> {
        let (option, choices) = if r.kind.get_ref() == "start_timer" { (&r.from, "spawn") } else { (&r.at, "echo") };
        let name = if r.kind.get_ref() == "start_timer" { "from" } else { "at" };
        let other_end = match option.as_ref().map(|o| o.get_ref().as_str()) {
            None | Some("now") => false,
            Some(v) if v == choices => true,
            Some(v) => {
                if let Some(o) = option {
                    self.error(o, &format!("{field}.{name}"), format!("expected \"now\" or \"{choices}\", got {v:?}"));
                }
                false
            }
        };
        if r.kind.get_ref() == "stop_timer" {
            return Some(ScenarioStep::StopTimer { at_echo: other_end });
        }
        let cpu_metric = r.cpu_metric.as_ref().map(|m| self.metric_key(m, &format!("{field}.cpu_metric")));
        if metric.is_none() && cpu_metric.is_none() {
            self.error(
                &r.kind,
                &format!("{field}.metric"),
                "a start_timer step records `metric` (wall time), `cpu_metric` (CPU time) or both",
            );
            return None;
        }
        Some(ScenarioStep::StartTimer { metric, cpu_metric, from_spawn: other_end })
    }

    fn wait_for(&mut self, r: &RawStep, field: &str, metric: Option<String>) -> Option<ScenarioStep> {
        let text = r.text.clone().unwrap_or_default();
        let regex = r.regex.as_ref().map(|re| re.get_ref().clone());
        if text.is_empty() == regex.is_none() {
            self.error(&r.kind, field, "a wait_for step needs either `text` or `regex`");
            return None;
        }
        let mut captures = 0;
        if let Some(re) = &r.regex {
            match regex_lite::Regex::new(re.get_ref()) {
                Ok(compiled) => captures = compiled.captures_len() - 1,
                Err(e) => self.error(re, &format!("{field}.regex"), format!("not a valid regular expression: {e}")),
            }
        }
        let more = r.more.unwrap_or(false);
        if more && text.is_empty() {
            self.error(&r.kind, &format!("{field}.more"), "`more` counts occurrences of `text`");
        }
        let count = match (&r.at_least, &r.regex) {
            (Some(at_least), Some(re)) => {
                let group = self.count(&r.group, &format!("{field}.group"), 1, 99, 1);
                if group as usize > captures {
                    self.error(
                        re,
                        &format!("{field}.group"),
                        format!("the regex has {captures} capture group(s), not {group}"),
                    );
                }
                Some(CountRule {
                    group: group as u32,
                    at_least: self.count(&Some(at_least.clone()), &format!("{field}.at_least"), 0, i64::MAX, 0) as u64,
                    stable_s: self.non_negative(&r.stable_s, &format!("{field}.stable_s"), 600.0, 0.0),
                    poll_s: self.number(&r.poll_s, &format!("{field}.poll_s"), 0.0, 60.0, 0.4),
                })
            }
            (Some(at_least), None) => {
                self.error(at_least, &format!("{field}.at_least"), "a count is captured by a `regex`");
                None
            }
            (None, _) => {
                for (value, name) in [(&r.stable_s, "stable_s"), (&r.poll_s, "poll_s")] {
                    if let Some(v) = value {
                        self.error(v, &format!("{field}.{name}"), "only a counting wait (`at_least`) has this");
                    }
                }
                None
            }
        };
        let timeout_s =
            r.timeout_s.as_ref().map(|_| self.number(&r.timeout_s, &format!("{field}.timeout_s"), 0.0, 3600.0, 30.0));
        Some(ScenarioStep::WaitFor { text, metric, fresh: r.fresh.unwrap_or(false), more, regex, count, timeout_s })
    }

    fn retry(&mut self, r: &RawStep, field: &str) -> Option<ScenarioStep> {
        let attempts = self.count(&r.attempts, &format!("{field}.attempts"), 1, 100, 3) as u32;
        let Some(raw_steps) = r.steps.as_ref().filter(|s| !s.is_empty()) else {
            self.error(&r.kind, &format!("{field}.steps"), "a retry step needs the `steps` of one attempt");
            return None;
        };
        let mut steps = Vec::new();
        for (k, inner) in raw_steps.iter().enumerate() {
            let inner_field = format!("{field}.steps[{k}]");
            let Some(step) = self.scenario_step(inner.get_ref(), &inner_field) else { continue };
            let timer = matches!(step, ScenarioStep::StartTimer { .. } | ScenarioStep::StopTimer { .. });
            if timer || !step.metrics().is_empty() {
                self.error(
                    &inner.get_ref().kind,
                    &inner_field,
                    "a retried step records nothing: put timers and metrics around the retry",
                );
            }
            steps.push(step);
        }
        Some(ScenarioStep::Retry { attempts, steps })
    }

    /// A step may only run on the channels that have what it needs.
    pub(super) fn check_channel(&mut self, step: &ScenarioStep, channel: Channel, kind: &Spanned<String>, field: &str) {
        let needs = match step {
            ScenarioStep::Ready { .. }
            | ScenarioStep::Type { .. }
            | ScenarioStep::WaitFor { .. }
            | ScenarioStep::Keys { .. } => Some((vec![Channel::Terminal], "channel = \"terminal\"")),
            ScenarioStep::Interrupt { .. } | ScenarioStep::Batch { .. } => {
                Some((vec![Channel::JsonLines], "a JSON-lines scenario (channel = \"jsonl\")"))
            }
            ScenarioStep::Request { .. } => {
                Some((vec![Channel::JsonLines, Channel::Socket], "channel = \"jsonl\" or \"socket\""))
            }
            ScenarioStep::Send { .. } | ScenarioStep::Collect { .. } => {
                Some((vec![Channel::Socket], "channel = \"socket\""))
            }
            ScenarioStep::Retry { steps, .. } => {
                for inner in steps {
                    self.check_channel(inner, channel, kind, field);
                }
                None
            }
            _ => None,
        };
        if let Some((channels, what)) = needs
            && !channels.contains(&channel)
        {
            self.error(kind, &format!("{field}.kind"), format!("this step needs {what}"));
        }
    }

    /// Timers open and close in turn, and none is left open.
    pub(super) fn check_timers(&mut self, steps: &[(ScenarioStep, Spanned<String>)], field: &str) {
        let mut open: Option<&Spanned<String>> = None;
        for (k, (step, kind)) in steps.iter().enumerate() {
            match step {
                ScenarioStep::StartTimer { .. } if open.is_some() => {
                    self.error(kind, &format!("{field}.step[{k}]"), "a timer is already running: stop it first");
                }
                ScenarioStep::StartTimer { .. } => open = Some(kind),
                ScenarioStep::StopTimer { .. } if open.is_none() => {
                    self.error(kind, &format!("{field}.step[{k}]"), "no timer is running: start_timer first");
                }
                ScenarioStep::StopTimer { .. } => open = None,
                _ => {}
            }
        }
        if let Some(kind) = open {
            self.error(kind, field, "a timer is started but never stopped: add a stop_timer step");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use sandbench_proto::Phase;
    use sandbench_proto::plan::{Channel, ScenarioStep};

    use crate::spec::{SpecErrors, parse};

    const HEAD: &str = "name = \"ui\"\n[install]\ncommand = \"true\"\n";

    fn errors(body: &str) -> Vec<String> {
        match parse(Path::new("bench.toml"), &format!("{HEAD}{body}")) {
            Ok(_) => panic!("accepted:\n{body}"),
            Err(SpecErrors(errors)) => errors.iter().map(|e| e.to_string()).collect(),
        }
    }

    const UI: &str = r#"
[[ui.scenario]]
name = "browse"
channel = "terminal"
command = ["app"]
fixture = "make-fixtures"
  [[ui.scenario.step]]
  kind = "start_timer"
  metric = "open"
  cpu_metric = "open_cpu"
  from = "spawn"
  [[ui.scenario.step]]
  kind = "retry"
  attempts = 4
  steps = [{ kind = "keys", keys = ["alt-right", "backspace*3"], settle_s = 0.1 }, { kind = "wait_for", text = "▾", more = true, timeout_s = 2 }]
  [[ui.scenario.step]]
  kind = "wait_for"
  regex = 'agents\s+(\d+) running'
  group = 1
  at_least = 10
  stable_s = 3
  [[ui.scenario.step]]
  kind = "stop_timer"
  at = "echo"
[[ui.scenario]]
name = "catalog"
channel = "socket"
command = ["daemon", "--socket", "/tmp/d-{uid}.sock"]
  [ui.scenario.socket]
  path = "/tmp/d-{uid}.sock"
  hello = { type = "hello" }
  envelope = { type = "command", id = "$id", command = "$request" }
  reply = { type = "response" }
  [[ui.scenario.step]]
  kind = "send"
  send = { type = "scan" }
  repeat = 3
  tag = "scan"
  [[ui.scenario.step]]
  kind = "start_timer"
  cpu_metric = "cold_cpu"
  [[ui.scenario.step]]
  kind = "request"
  metric = "cold"
  send = { type = "open" }
  expect = { success = true, "/data/state" = "ready" }
  [[ui.scenario.step]]
  kind = "stop_timer"
  [[ui.scenario.step]]
  kind = "collect"
  tag = "scan"
[[transport.script]]
name = "frames"
run = "node bench.mjs"
metrics = ["frame_decode"]
value_field = "value"
[metrics.open]
title = "Open"
unit = "ms"
scale = 1000
[metrics.open_cpu]
title = "CPU, open"
unit = "ms"
scale = 1000
[metrics.cold_cpu]
title = "CPU, cold"
unit = "ms"
scale = 1000
"#;

    #[test]
    fn ui_and_transport_sections_become_plan_phases() {
        let plan = parse(Path::new("bench.toml"), &format!("{HEAD}{UI}")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.metrics_of_phase(Phase::Ui), ["open", "open_cpu", "cold_cpu", "cold"]);
        assert_eq!(plan.metrics_of_phase(Phase::Transport), ["frame_decode"]);
        assert_eq!((plan.trials.ui, plan.trials.transport), (3, 10));
        let browse = &plan.agent.ui.scenarios[0];
        assert_eq!(browse.fixture.as_ref().map(|f| f.run.as_str()), Some("make-fixtures"));
        assert!(matches!(&browse.steps[1], ScenarioStep::Retry { attempts: 4, steps } if steps.len() == 2));
        assert!(
            matches!(&browse.steps[2], ScenarioStep::WaitFor { count: Some(c), .. } if c.at_least == 10 && c.group == 1)
        );
        let catalog = &plan.agent.ui.scenarios[1];
        assert_eq!(catalog.channel, Channel::Socket);
        let socket = catalog.socket.as_ref().unwrap();
        assert_eq!(
            (socket.id_field.as_str(), socket.max_line_bytes, socket.connect_timeout_s),
            ("id", 2_000_000, 120.0)
        );
        assert_eq!(plan.agent.transport.scripts[0].value_field.as_deref(), Some("value"));
        // Ui metrics are expected per ui trial, transport ones per transport trial.
        let phases = plan.timed_phases();
        assert_eq!(
            phases.iter().map(|p| p.0).collect::<Vec<_>>(),
            ["install", "measure", "runtime", "transport", "ui"]
        );
        assert!(plan.phase_limit_s(Phase::Ui) > 0.0);
        assert!(!Phase::Transport.needs_install() && Phase::Ui.needs_install());
        // No section, no trials.
        let bare = parse(Path::new("bench.toml"), HEAD).unwrap();
        assert_eq!((bare.trials.ui, bare.trials.transport), (0, 0));
    }

    #[test]
    fn interactive_steps_are_checked_with_file_line_and_field() {
        let got = errors(
            r#"
[[ui.scenario]]
name = "t"
channel = "terminal"
command = ["app"]
  [[ui.scenario.step]]
  kind = "keys"
  keys = ["left", "hyper-x", "up*0"]
  [[ui.scenario.step]]
  kind = "retry"
  steps = [{ kind = "memory", metric = "m" }]
  [[ui.scenario.step]]
  kind = "wait_for"
  regex = "(unclosed"
  [[ui.scenario.step]]
  kind = "wait_for"
  text = "x"
  at_least = 3
  [[ui.scenario.step]]
  kind = "send"
  send = { a = 1 }
  tag = "s"
  [[ui.scenario.step]]
  kind = "start_timer"
  metric = "m2"
[[ui.scenario]]
name = "s"
channel = "socket"
command = ["d"]
[[transport.script]]
name = "b"
run = "b"
metrics = ["x", "y"]
value_field = "value"
"#,
        );
        let expected = [
            "bench.toml:11: ui.scenario[0].step[0].keys: unknown key \"hyper-x\"",
            "bench.toml:11: ui.scenario[0].step[0].keys: expected a repeat count from 1 to 1000 after '*' in \"up*0\"",
            "bench.toml:14: ui.scenario[0].step[1].steps[0]: a retried step records nothing",
            "bench.toml:17: ui.scenario[0].step[2].regex: not a valid regular expression",
            "bench.toml:21: ui.scenario[0].step[3].at_least: a count is captured by a `regex`",
            "bench.toml:23: ui.scenario[0].step[4].kind: this step needs channel = \"socket\"",
            "bench.toml:27: ui.scenario[0]: a timer is started but never stopped",
            "bench.toml:30: ui.scenario[1].socket: a socket scenario needs [socket]",
            "bench.toml:36: transport.script[0].metrics: a script read by `value_field` reports exactly one metric",
        ];
        for want in expected {
            assert!(got.iter().any(|e| e.starts_with(want)), "missing {want:?} in {got:#?}");
        }
    }

    #[test]
    fn reply_checks_are_checked_with_file_line_and_field() {
        let socket = r#"
[[ui.scenario]]
name = "s"
channel = "socket"
command = ["d"]
  [ui.scenario.socket]
  path = "/tmp/d.sock"
  hello = { type = "hello", name = { matches = "[" } }
  [[ui.scenario.step]]
  kind = "request"
  send = { type = "list" }
  expect = { success = true, "/data/items/*/id" = { set = ["a", "b", "a"] } }
  [[ui.scenario.step]]
  kind = "send"
  send = { type = "scan" }
  tag = "scan"
  [[ui.scenario.step]]
  kind = "collect"
  tag = "scan"
  [ui.scenario.step.expect]
  success = true
  "/data/items/*" = { set = [
    { id = "a", name = "x" },
    { id = "b", name = { not = { set = [1] } } },
  ] }
"#;
        let got = errors(socket);
        let expected = [
            "bench.toml:11: ui.scenario[0].socket.hello.name: not a valid regular expression \"[\"",
            "bench.toml:15: ui.scenario[0].step[0].expect./data/items/*/id: entries 1 and 3 of the set",
            "bench.toml:25: ui.scenario[0].step[2].expect./data/items/*: `set` is about all the values of a key",
        ];
        for want in expected {
            assert!(got.iter().any(|e| e.starts_with(want)), "missing {want:?} in {got:#?}");
        }
        assert_eq!(got.len(), 3, "{got:#?}");
        // Sets whose entries differ go into the plan as written.
        let fixed = socket
            .replace(r#""[""#, r#""^h""#)
            .replace(r#""b", "a"]"#, r#""b"]"#)
            .replace("{ not = { set = [1] } }", r#""y""#);
        let plan = parse(Path::new("bench.toml"), &format!("{HEAD}{fixed}")).unwrap_or_else(|e| panic!("{e}"));
        let ScenarioStep::Collect { expect, .. } = &plan.agent.ui.scenarios[0].steps[2] else {
            panic!("not a collect")
        };
        assert_eq!(
            expect["/data/items/*"],
            serde_json::json!({"set": [{"id": "a", "name": "x"}, {"id": "b", "name": "y"}]})
        );
    }

    #[test]
    fn timers_name_where_they_start_and_stop() {
        let got = errors(
            "[[ui.scenario]]\nname = \"t\"\nchannel = \"terminal\"\ncommand = [\"app\"]\n\
             step = [{ kind = \"start_timer\", from = \"later\", cpu_metric = \"c\" }, { kind = \"stop_timer\", at = \"never\" }, { kind = \"stop_timer\" }, { kind = \"start_timer\" }]\n",
        );
        for want in [
            "ui.scenario[0].step[0].from: expected \"now\" or \"spawn\", got \"later\"",
            "ui.scenario[0].step[1].at: expected \"now\" or \"echo\", got \"never\"",
            "ui.scenario[0].step[2]: no timer is running: start_timer first",
            "ui.scenario[0].step[3].metric: a start_timer step records `metric` (wall time), `cpu_metric` (CPU time) or both",
        ] {
            assert!(got.iter().any(|e| e.ends_with(want)), "missing {want:?} in {got:#?}");
        }
    }

    #[test]
    fn harness_files_are_read_beside_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("harness")).unwrap();
        std::fs::write(dir.path().join("harness/gen.py"), "#!/usr/bin/env python3\nprint(1)\n").unwrap();
        let spec = dir.path().join("bench.toml");
        let text = format!(
            "{HEAD}[harness]\n\"gen.py\" = \"harness/gen.py\"\n\"../x\" = \"harness/gen.py\"\n\"missing.js\" = \"nowhere.js\"\n"
        );
        let got = match parse(&spec, &text) {
            Ok(_) => panic!("accepted"),
            Err(SpecErrors(errors)) => errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>(),
        };
        assert!(got[0].starts_with("harness.../x: expected a file name"), "{got:?}");
        assert!(got[1].starts_with("harness.missing.js: cannot read"), "{got:?}");
        let ok = format!("{HEAD}[harness]\n\"gen.py\" = \"harness/gen.py\"\n");
        let plan = parse(&spec, &ok).unwrap();
        assert_eq!(plan.agent.harness["gen.py"], "#!/usr/bin/env python3\nprint(1)\n");
    }
}
