//! What the spec language has for interactive phases: the `ui` and `transport` sections (the same
//! scenarios, commands and scripts as `runtime`), harness files shipped with the spec, fixtures
//! generated before each trial, named keys, waits on fresh output or on counts read off the
//! screen, bounded retries, timed windows with a CPU companion, and daemons spoken to over a Unix
//! socket. Also the data-driven list of timed phases the run walks.

use std::collections::BTreeMap;

use sandbench_proto::plan::{Channel, CountRule, Runtime, ScenarioStep, SocketSpec, Step, keys, phase};
use toml::Spanned;

use super::raw::{RawScenario, RawStep};
use super::{Plan, Validator, json, json_map};

/// Largest total size of the harness files (they travel in every phase command's plan).
const MAX_HARNESS_BYTES: usize = 1024 * 1024;

impl Plan {
    /// The timed phases in the order a run walks them, with their trial counts; a phase with
    /// nothing to do has none.
    pub fn timed_phases(&self) -> Vec<(&'static str, u32)> {
        let t = &self.trials;
        vec![
            (phase::INSTALL, t.install),
            (phase::MEASURE, t.measure),
            (phase::RUNTIME, t.runtime),
            (phase::TRANSPORT, t.transport),
            (phase::UI, t.ui),
        ]
    }

    /// Whether a phase needs the sandbox's first installation (transport runs against the
    /// source build, so it does not).
    pub fn needs_install(phase_name: &str) -> bool {
        ![phase::PREPARE, phase::INSTALL, phase::TRANSPORT].contains(&phase_name)
    }

    /// The scenarios, commands and scripts of a phase that has them.
    pub fn section(&self, phase_name: &str) -> Option<&Runtime> {
        match phase_name {
            phase::RUNTIME => Some(&self.agent.runtime),
            phase::TRANSPORT => Some(&self.agent.transport),
            phase::UI => Some(&self.agent.ui),
            _ => None,
        }
    }
}

/// Whether a section has anything to run.
pub(super) fn is_empty(section: &Runtime) -> bool {
    section.scenarios.is_empty() && section.commands.is_empty() && section.scripts.is_empty()
}

/// The longest one trial of a section takes when every step runs to its timeout.
pub(super) fn section_limit_s(section: &Runtime) -> f64 {
    fn steps_limit(steps: &[ScenarioStep], timeout_s: f64) -> f64 {
        steps
            .iter()
            .map(|step| match step {
                ScenarioStep::Request { repeat, .. } => f64::from(*repeat) * timeout_s,
                ScenarioStep::Settle { seconds } => *seconds,
                ScenarioStep::Keys { keys, settle_s } => keys.len() as f64 * (settle_s + 0.1),
                ScenarioStep::Retry { attempts, steps } => f64::from(*attempts) * steps_limit(steps, timeout_s),
                ScenarioStep::WaitFor { timeout_s: Some(t), .. } => *t,
                ScenarioStep::Memory { .. }
                | ScenarioStep::Cpu { .. }
                | ScenarioStep::Type { .. }
                | ScenarioStep::StartTimer { .. }
                | ScenarioStep::StopTimer { .. }
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
        + section.commands.iter().map(|c| c.step.timeout_s * f64::from(c.repeat)).sum::<f64>()
        + section.scripts.iter().map(|s| s.step.timeout_s).sum::<f64>()
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
            let full = base.join(path.get_ref());
            match std::fs::read_to_string(&full) {
                Ok(text) => {
                    total += text.len();
                    files.insert(name.clone(), text);
                }
                Err(e) => self.error(path, &field, format!("cannot read {}: {e}", full.display())),
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
        Some(Step { run: run.get_ref().clone(), cwd: r.cwd.clone(), timeout_s, env: BTreeMap::new() })
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
            hello: json_map(s.hello.as_ref()),
            envelope,
            reply: json_map(s.reply.as_ref()),
            id_field: s.id_field.clone().unwrap_or_else(|| "id".into()),
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
            "start_timer" => {
                let Some(metric) = metric else {
                    self.error(
                        &r.kind,
                        &format!("{field}.metric"),
                        "a start_timer step records a metric: expected `metric`",
                    );
                    return Some(None);
                };
                let cpu_metric = r.cpu_metric.as_ref().map(|m| self.metric_key(m, &format!("{field}.cpu_metric")));
                let from_spawn = match r.from.as_ref().map(|f| f.get_ref().as_str()) {
                    None | Some("now") => false,
                    Some("spawn") => true,
                    Some(other) => {
                        if let Some(f) = &r.from {
                            self.error(
                                f,
                                &format!("{field}.from"),
                                format!("expected \"now\" or \"spawn\", got {other:?}"),
                            );
                        }
                        false
                    }
                };
                Some(ScenarioStep::StartTimer { metric, cpu_metric, from_spawn })
            }
            "stop_timer" => {
                let at_echo = match r.at.as_ref().map(|a| a.get_ref().as_str()) {
                    None | Some("now") => false,
                    Some("echo") => true,
                    Some(other) => {
                        if let Some(a) = &r.at {
                            self.error(
                                a,
                                &format!("{field}.at"),
                                format!("expected \"now\" or \"echo\", got {other:?}"),
                            );
                        }
                        false
                    }
                };
                Some(ScenarioStep::StopTimer { at_echo })
            }
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
                Some(ScenarioStep::Collect { tag: tag.get_ref().clone(), expect: json_map(r.expect.as_ref()) })
            }
            _ => return None,
        };
        Some(step)
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
            ScenarioStep::Interrupt { .. } => {
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
