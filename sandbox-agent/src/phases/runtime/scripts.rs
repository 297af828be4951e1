//! Scripts whose `RESULT {json}` lines become metrics: one child per combination of the
//! script's `matrix` (its keys `<script>.<v1>.<v2>….<key>`, its companions
//! `script.<script>.<v1>.<v2>….cpu`, …), arrays of samples for the keys declared as
//! distributions (at most `max_samples` a key), the sizes of `sizes` read after each child
//! exits, and a fixture run before (once per sandbox when kept, [`super::keep`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;
use sandbench_proto::plan::{AgentPlan, Script, child_key, child_stem, combinations};
use sandbench_proto::v1::LogStream;

use super::replies::size_of;
use crate::context::PhaseContext;
use crate::phases::common;
use crate::probes::command::{self, ShellCommand};
use crate::probes::script::{self, Reported};
use crate::probes::usage::Usage;
use crate::users::User;

/// A matrix child: its parameters, in declared order.
type Combination = [(String, String)];

/// A script, as `user` in its folder (relative to `base`): its fixture, then each matrix child
/// in turn (a failed child does not stop the others).
pub(super) fn run_script(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    user: &User,
    base: &Path,
    trial: u32,
    script: &Script,
) -> anyhow::Result<()> {
    let kept = match super::keep::prepare(ctx, plan, user, base, &script.name, script.fixture.as_ref(), script.keep) {
        Ok(kept) => kept,
        Err(err) => {
            for key in script.keys() {
                ctx.error(&key, trial, &err, "");
            }
            return Err(err);
        }
    };
    let mut failures = Vec::new();
    for combination in combinations(&script.matrix) {
        if let Err(err) = run_child(ctx, plan, user, base, trial, script, &combination, kept.as_deref()) {
            failures.push(match combination.is_empty() {
                true => format!("{err:#}"),
                false => format!("{}: {err:#}", child_stem(&script.name, &combination)),
            });
        }
        if ctx.canceled() {
            break;
        }
    }
    match failures.is_empty() {
        true => Ok(()),
        false => Err(anyhow!("{}", failures.join("; "))),
    }
}

/// `run` with `{name}` replaced by each parameter's value.
fn command_line(run: &str, combination: &Combination) -> String {
    combination.iter().fold(run.to_string(), |run, (name, value)| run.replace(&format!("{{{name}}}"), value))
}

/// One child of a script: its RESULT lines, companions and sizes.
#[allow(clippy::too_many_arguments)]
fn run_child(
    ctx: &PhaseContext,
    plan: &AgentPlan,
    user: &User,
    base: &Path,
    trial: u32,
    script: &Script,
    combination: &Combination,
    kept: Option<&Path>,
) -> anyhow::Result<()> {
    let step = &script.step;
    let mut env = step.env.clone();
    for (name, value) in combination {
        env.insert(format!("SANDBENCH_PARAM_{}", name.to_ascii_uppercase()), value.clone());
    }
    if let Some(dir) = kept {
        env.insert(super::keep::ENV.to_string(), dir.display().to_string());
    }
    let cwd = step.cwd.as_deref().map(|c| common::expand(user, base, c)).unwrap_or_else(|| base.to_path_buf());
    let shell = ShellCommand {
        run: command_line(&step.run, combination),
        env: common::user_env(user, &plan.env, &env),
        cwd: cwd.clone(),
        user: Some((user.uid, user.gid)),
        timeout: Duration::from_secs_f64(step.timeout_s),
    };
    let mut results = ScriptResults::default();
    let result = command::run(&shell, &mut |stream, chunk| {
        ctx.log(stream, chunk);
        if stream == LogStream::Stdout {
            results.feed(script, chunk);
        }
    });
    let mut used = None;
    let failure = match result.and_then(|done| {
        used = Some(done.usage);
        // As the reference does, a failed bench's error carries its first line of output.
        let first = done.output_text().lines().find(|l| !l.trim().is_empty()).unwrap_or_default().to_string();
        done.success(&format!("script {}", script.name)).map_err(|err| match first.as_str() {
            "" => err,
            first => anyhow!("{err:#}; first output line: {first}"),
        })
    }) {
        Err(err) => Some(err),
        Ok(_) => results.invalid.take().map(|why| anyhow!("invalid RESULT line: {why}")),
    };
    warn_dropped(ctx, script, trial, results.dropped);
    let child = Child { script, combination, trial };
    let recorded = child.record(ctx, &results.reported, failure, used);
    let sized = child.sizes(ctx, user, &cwd, recorded.is_ok());
    recorded.and(sized)
}

/// A script's child while its figures are sent.
struct Child<'a> {
    script: &'a Script,
    combination: &'a Combination,
    trial: u32,
}

impl Child<'_> {
    fn key(&self, k: &str) -> String {
        child_key(&self.script.name, self.combination, k)
    }

    /// Sends the reported values (each array entry a sample, numbered per key) and the
    /// companions, or `failure` on each metric (and an error on each not reported); a metric
    /// the spec does not declare fails the child.
    fn record(
        &self,
        ctx: &PhaseContext,
        reported: &[(String, Reported)],
        failure: Option<anyhow::Error>,
        used: Option<Usage>,
    ) -> anyhow::Result<()> {
        let name = &self.script.name;
        if let Some((k, _)) = reported.iter().find(|(k, _)| !self.script.metrics.contains(k)) {
            let err = anyhow!("script {name} reported {k}, which the spec does not declare");
            for metric in &self.script.metrics {
                ctx.error(&self.key(metric), self.trial, &err, "");
            }
            return Err(err);
        }
        let mut samples: BTreeMap<&str, u32> = BTreeMap::new();
        if failure.is_none() {
            for (k, value) in reported {
                let key = self.key(k);
                match (value, self.script.distributions.contains_key(k)) {
                    (Reported::One(v), false) => {
                        ctx.value(&key, self.trial, *v, "");
                    }
                    (Reported::One(v), true) => {
                        send_samples(ctx, &key, self.trial, samples.entry(k).or_default(), &[*v])
                    }
                    (Reported::Many(vs), _) => send_samples(ctx, &key, self.trial, samples.entry(k).or_default(), vs),
                }
            }
        }
        // The script's own wall time is no metric: its companions are named after it.
        if let (None, Some(used)) = (&failure, used) {
            common::record_usage(ctx, &child_stem(name, self.combination), self.trial, &used);
        }
        for metric in &self.script.metrics {
            let key = self.key(metric);
            if let Some(err) = &failure {
                ctx.error(&key, self.trial, err, "");
            } else if !reported.iter().any(|(n, _)| n == metric) {
                ctx.error(&key, self.trial, &anyhow!("script {name} did not report it"), "");
            }
        }
        match failure {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// The sizes of `sizes`, read as the user once the child exited (an error on each when it
    /// failed).
    fn sizes(&self, ctx: &PhaseContext, user: &User, cwd: &Path, ran: bool) -> anyhow::Result<()> {
        let mut first = None;
        for size in &self.script.sizes {
            let key = self.key(&size.metric);
            if !ran {
                let why = anyhow!("not measured: script {} failed", self.script.name);
                ctx.error(&key, self.trial, &why, "bytes");
                continue;
            }
            match size_of(user, cwd, &command_line(&size.path, self.combination)) {
                Ok(bytes) => {
                    ctx.value(&key, self.trial, bytes as f64, "bytes");
                }
                Err(err) => {
                    ctx.error(&key, self.trial, &err, "bytes");
                    first.get_or_insert(err);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Sends `values` as samples of `key`, numbered on from `next`.
fn send_samples(ctx: &PhaseContext, key: &str, trial: u32, next: &mut u32, values: &[f64]) {
    for v in values {
        ctx.sample(key, trial, *next, *v, "");
        *next += 1;
    }
}

/// What a script's stdout reported so far: the metrics of its `RESULT` lines (at most
/// `max_results` lines of them; the rest are counted and dropped; at most `max_samples` samples
/// of a key), why the first invalid one is, and the start of a line not yet ended (at most
/// [`MAX_LINE_BYTES`] of it).
#[derive(Default)]
pub(super) struct ScriptResults {
    pub(super) partial: Vec<u8>,
    /// The line being read passed [`MAX_LINE_BYTES`]: the rest of it is skipped.
    skipping: bool,
    pub(super) reported: Vec<(String, Reported)>,
    pub(super) invalid: Option<String>,
    /// `RESULT` lines taken, and dropped past the script's bound.
    pub(super) taken: u32,
    pub(super) dropped: u64,
    /// Samples taken per distribution key.
    samples: BTreeMap<String, u64>,
}

/// The longest line of a script's stdout read for a `RESULT` (the rest of a longer one is not
/// held: a script printing gigabytes without a newline costs the agent nothing).
pub(super) const MAX_LINE_BYTES: usize = 1 << 20;

impl ScriptResults {
    /// Takes a chunk of the script's stdout and parses each line it ends.
    pub(super) fn feed(&mut self, script: &Script, chunk: &[u8]) {
        let mut rest = chunk;
        while !rest.is_empty() {
            let end = rest.iter().position(|&b| b == b'\n');
            let (piece, ended) = match end {
                Some(at) => (&rest[..=at], true),
                None => (rest, false),
            };
            rest = &rest[piece.len()..];
            if !self.skipping {
                self.partial.extend_from_slice(piece);
                if self.partial.len() > MAX_LINE_BYTES {
                    if self.partial.starts_with(b"RESULT ") {
                        self.invalid.get_or_insert(format!("a line longer than {MAX_LINE_BYTES} bytes"));
                    }
                    self.partial = Vec::new();
                    self.skipping = !ended;
                    continue;
                }
            }
            if ended {
                if !self.skipping {
                    let line = std::mem::take(&mut self.partial);
                    self.line(script, &String::from_utf8_lossy(&line));
                }
                self.skipping = false;
            }
        }
    }

    /// One line of stdout: a `RESULT` line adds its metrics, or says why it is invalid; past
    /// the script's bound it is only counted.
    fn line(&mut self, script: &Script, line: &str) {
        if script.value_field.is_none() && line.starts_with("RESULT ") {
            if self.taken >= script.max_results {
                self.dropped += 1;
                return;
            }
            self.taken += 1;
        }
        let parsed = match (&script.value_field, script.metrics.first()) {
            // The reference's benches: the first RESULT line's field is the one metric.
            (Some(field), Some(metric)) if self.reported.is_empty() && self.invalid.is_none() => {
                script::parse_value_line(line, field).map(|v| v.map(|v| vec![(metric.clone(), Reported::One(v))]))
            }
            (Some(_), _) => None,
            (None, _) => script::parse_line_with(line, &|k| script.distributions.contains_key(k)),
        };
        match parsed {
            None => {}
            Some(Ok(metrics)) => {
                for (k, reported) in metrics {
                    if script.distributions.contains_key(&k) && !self.within_samples(script, &k, &reported) {
                        return;
                    }
                    self.reported.push((k, reported));
                }
            }
            Some(Err(why)) => {
                self.invalid.get_or_insert(why);
            }
        }
    }

    /// Counts the samples of a distribution key; past `max_samples` the run is invalid.
    fn within_samples(&mut self, script: &Script, key: &str, reported: &Reported) -> bool {
        let n = match reported {
            Reported::One(_) => 1,
            Reported::Many(values) => values.len() as u64,
        };
        let taken = self.samples.entry(key.to_string()).or_default();
        *taken += n;
        if *taken > u64::from(script.max_samples) {
            self.invalid.get_or_insert(format!(
                "script {} reported more than {} samples of {key} (max_samples)",
                script.name, script.max_samples
            ));
            return false;
        }
        true
    }
}

/// Says that a script printed more `RESULT` lines than its bound, and how many were dropped:
/// in the log and as a warning of the trial, which the report shows.
pub(super) fn warn_dropped(ctx: &PhaseContext, script: &Script, trial: u32, dropped: u64) {
    if dropped == 0 {
        return;
    }
    let text = format!(
        "{}: script {} printed {dropped} RESULT lines past its bound of {} (max_results_per_script); they were dropped",
        ctx.command_id, script.name, script.max_results
    );
    ctx.note(&text);
    ctx.file(
        &format!("warnings/{}-results-{}-{trial}.txt", ctx.command_id, script.name),
        format!("{text}\n").as_bytes(),
    );
}

#[cfg(test)]
mod tests {
    use sandbench_proto::v1::event;

    use super::super::tests::context;
    use super::*;

    fn script(max_results: u32) -> Script {
        let step =
            sandbench_proto::plan::Step { run: String::new(), cwd: None, timeout_s: 10.0, env: Default::default() };
        Script {
            name: "flood".into(),
            step,
            metrics: vec!["a".into()],
            value_field: None,
            instructions: false,
            max_results,
            sizes: Vec::new(),
            matrix: Vec::new(),
            distributions: BTreeMap::new(),
            max_samples: 10,
            fixture: None,
            keep: false,
        }
    }

    #[test]
    fn result_lines_past_the_bound_are_dropped_and_said() {
        let flood = script(3);
        let mut results = ScriptResults::default();
        let text = "noise\nRESULT {\"a\": 1}\n".repeat(100_000);
        // In odd pieces, as a pipe delivers them.
        for piece in text.as_bytes().chunks(4093) {
            results.feed(&flood, piece);
        }
        assert_eq!(results.reported, vec![("a".to_string(), Reported::One(1.0)); 3]);
        assert_eq!((results.taken, results.dropped, results.invalid.as_deref()), (3, 99_997, None));
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        warn_dropped(&ctx, &flood, 2, results.dropped);
        warn_dropped(&ctx, &flood, 3, 0);
        let files: Vec<(String, String)> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|b| match b {
                event::Body::File(f) => Some((f.path, String::from_utf8_lossy(&f.data).to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(
            files,
            [(
                "warnings/c-results-flood-2.txt".to_string(),
                "c: script flood printed 99997 RESULT lines past its bound of 3 (max_results_per_script); they \
                 were dropped\n"
                    .to_string()
            )]
        );
    }

    #[test]
    fn a_line_without_end_is_not_held() {
        let flood = script(10);
        let mut results = ScriptResults::default();
        results.feed(&flood, b"RESULT {\"a\": ");
        for _ in 0..64 {
            results.feed(&flood, &[b'7'; 64 << 10]);
            assert!(results.partial.len() <= MAX_LINE_BYTES + (64 << 10));
        }
        results.feed(&flood, b"}\nRESULT {\"a\": 2}\n");
        assert_eq!(results.reported, [("a".to_string(), Reported::One(2.0))]);
        assert!(results.invalid.as_deref().is_some_and(|w| w.contains("longer than")), "{:?}", results.invalid);
    }

    fn observations(rx: &mut tokio::sync::mpsc::Receiver<event::Body>) -> Vec<(String, u32, Option<f64>)> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|b| match b {
                event::Body::Observation(o) => {
                    let value = match o.outcome {
                        Some(sandbench_proto::v1::observation::Outcome::Value(v)) => Some(v),
                        _ => None,
                    };
                    Some((o.metric, o.sample, value))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn arrays_of_a_distribution_are_samples_bounded_by_max_samples() {
        let mut store = script(100);
        store.metrics = vec!["commit_ms".into(), "ops".into()];
        store
            .distributions
            .insert("commit_ms".into(), sandbench_proto::plan::Distribution { percentiles: vec![50], max: true });
        let mut results = ScriptResults::default();
        results.feed(&store, b"RESULT {\"commit_ms\": [0.5, 0.25, 1], \"ops\": 7}\nRESULT {\"commit_ms\": 2}\n");
        assert_eq!(results.invalid, None);
        let combination = [("backend".to_string(), "sqlite".to_string()), ("rate".to_string(), "low".to_string())];
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        let child = Child { script: &store, combination: &combination, trial: 4 };
        child.record(&ctx, &results.reported, None, None).unwrap();
        let got = observations(&mut rx);
        assert_eq!(
            got,
            [
                ("flood.sqlite.low.commit_ms".to_string(), 0, Some(0.5)),
                ("flood.sqlite.low.commit_ms".to_string(), 1, Some(0.25)),
                ("flood.sqlite.low.commit_ms".to_string(), 2, Some(1.0)),
                ("flood.sqlite.low.ops".to_string(), 0, Some(7.0)),
                ("flood.sqlite.low.commit_ms".to_string(), 3, Some(2.0)),
            ]
        );
        // Past max_samples (10) the run is invalid, naming the script and the key.
        let mut results = ScriptResults::default();
        results.feed(&store, b"RESULT {\"commit_ms\": [1, 2, 3, 4, 5, 6]}\nRESULT {\"commit_ms\": [1, 2, 3, 4, 5]}\n");
        assert_eq!(
            results.invalid.as_deref(),
            Some("script flood reported more than 10 samples of commit_ms (max_samples)")
        );
        // An array for a key that is no distribution is invalid.
        let mut results = ScriptResults::default();
        results.feed(&store, b"RESULT {\"ops\": [1]}\n");
        assert!(results.invalid.as_deref().is_some_and(|w| w.contains("not declared in `distributions`")));
    }

    #[test]
    fn an_undeclared_key_fails_every_metric_of_the_child_by_its_matrix_key() {
        let store = script(100);
        let combination = [("backend".to_string(), "memory".to_string())];
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        let child = Child { script: &store, combination: &combination, trial: 0 };
        let err = child.record(&ctx, &[("b".into(), Reported::One(1.0))], None, None).unwrap_err();
        assert_eq!(err.to_string(), "script flood reported b, which the spec does not declare");
        assert_eq!(observations(&mut rx), [("flood.memory.a".to_string(), 0, None)]);
        assert_eq!(command_line("store --backend {backend} {rate}", &combination), "store --backend memory {rate}");
    }
}
