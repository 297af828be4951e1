//! The engine's JSON-lines requests: built from templates (`{{prev.x}}`, `{{i}}`, `{{trial}}`,
//! [`crate::probes::template`]), their replies matched by the `done` event of their id or —
//! with the scenario's `id_field` — by that field of any reply, in any order; `batch` steps that
//! pipeline `size` requests at a time, each request's latency a sample; and a path's size at a
//! point of the scenario, read as its user.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sandbench_proto::plan::{Aggregate, jsonl};
use serde_json::{Map, Value};

use super::{Engine, check_expect, object};
use crate::phases::common;
use crate::probes::size;
use crate::probes::template::{self, Bindings};

/// How a request step's latencies are recorded.
#[derive(Clone, Copy)]
pub(super) enum Record {
    /// Each request a sample of the metric, numbered from 0.
    Samples,
    /// One value per trial: their mean or total.
    Aggregate(Aggregate),
}

/// Requests waiting for their reply: the id's JSON text → (index in the step, when sent).
type Outstanding = HashMap<String, (u64, Instant)>;

impl Engine<'_> {
    /// The field replies carry the request id in.
    fn id_field(&self) -> &str {
        self.scenario.id_field.as_deref().unwrap_or(jsonl::ID)
    }

    /// Request `i` of a step: `template` rendered, with a unique id added when it names none.
    fn build(&mut self, template: &Value, i: u64) -> anyhow::Result<(Value, Value)> {
        let (prev, prev_id) = match &self.prev_reply {
            Some((reply, id)) => (Some(reply), id.as_str()),
            None => (None, ""),
        };
        let bindings = Bindings { prev, prev_id, i, trial: self.trial };
        let mut request = object(&template::render(template, &bindings).map_err(|why| anyhow!("request {i}: {why}"))?)?;
        let field = self.id_field().to_string();
        let id = match request.get(&field) {
            Some(id) if self.scenario.id_field.is_some() => id.clone(),
            _ => {
                self.next_id += 1;
                let id = Value::String(self.next_id.to_string());
                request.insert(field, id.clone());
                id
            }
        };
        Ok((Value::Object(request), id))
    }

    /// JSON lines: `repeat` requests (cycling through `send` when it is a list), each output
    /// checked against `output_bytes`; the metric gets each latency as a sample, or their mean
    /// or total.
    pub(super) fn requests(
        &mut self,
        metric: Option<&str>,
        send: &Value,
        repeat: u32,
        record: Record,
        expect: &Map<String, Value>,
        output_bytes: Option<u64>,
    ) -> anyhow::Result<()> {
        let mut total = Duration::ZERO;
        for i in 0..repeat {
            let template = match send {
                Value::Array(items) if !items.is_empty() => &items[i as usize % items.len()],
                single => single,
            };
            let took = match self.one_request(template, u64::from(i), expect, output_bytes) {
                Ok(took) => took,
                Err(err) => return Err(self.failed_sample(metric, record, i, err)),
            };
            match (metric, record) {
                (Some(metric), Record::Samples) => {
                    self.recorded.insert(metric.to_string());
                    self.ctx.sample(metric, self.trial, i, took.as_secs_f64(), "s");
                }
                _ => total += took,
            }
        }
        if let (Some(metric), Record::Aggregate(aggregate)) = (metric, record) {
            let value = match aggregate {
                // A request step's runs are not samples of their own (the spec refuses it).
                Aggregate::Mean | Aggregate::Samples => total.as_secs_f64() / f64::from(repeat.max(1)),
                Aggregate::Total => total.as_secs_f64(),
            };
            self.record(metric, value, "s");
        }
        Ok(())
    }

    /// The error of request `i`: at its sample when the step records samples.
    fn failed_sample(&mut self, metric: Option<&str>, record: Record, i: u32, err: anyhow::Error) -> anyhow::Error {
        if let (Some(metric), Record::Samples) = (metric, record) {
            self.recorded.insert(metric.to_string());
            self.ctx.sample_error(metric, self.trial, i, &err, "s");
        }
        err
    }

    /// One request and its reply (or done event): its latency.
    fn one_request(
        &mut self,
        template: &Value,
        i: u64,
        expect: &Map<String, Value>,
        output_bytes: Option<u64>,
    ) -> anyhow::Result<Duration> {
        let (request, id) = self.build(template, i)?;
        if self.scenario.id_field.is_some() {
            let started = Instant::now();
            self.child()?.send(&request)?;
            let mut outstanding = Outstanding::from([(id.to_string(), (i, started))]);
            let (_, took, reply) = self.collect(&mut outstanding)?.pop().context("no reply")?;
            reply_expect(&reply, expect).with_context(|| format!("the reply to request {i} (id {id})"))?;
            self.prev_reply = Some((reply, id.to_string()));
            return Ok(took);
        }
        let id = id.as_str().unwrap_or_default().to_string();
        let started = Instant::now();
        self.child()?.send(&request)?;
        let (done, output) = self.wait_done(&id, started + self.timeout())?;
        let took = started.elapsed();
        check_expect(&done, expect).context("request failed")?;
        if let Some(bytes) = output_bytes
            && output.len() as u64 != bytes
        {
            bail!("output was truncated or missing: {} bytes instead of {bytes}", output.len());
        }
        self.prev_reply = Some((done, id));
        Ok(took)
    }

    /// Waits for the reply of every outstanding request, in any order, each within the
    /// scenario's timeout of the last reply: (index, latency, reply) in the order of the indices.
    fn collect(&mut self, outstanding: &mut Outstanding) -> anyhow::Result<Vec<(u64, Duration, Value)>> {
        let field = self.id_field().to_string();
        let mut got = Vec::with_capacity(outstanding.len());
        let mut deadline = Instant::now() + self.timeout();
        while !outstanding.is_empty() {
            let waiting = || outstanding.values().map(|v| v.0).min().unwrap_or_default();
            let reply = self
                .child()?
                .next_event(deadline)
                .with_context(|| format!("waiting for the reply to request {} (by {field})", waiting()))?;
            let arrived = Instant::now();
            let Some((i, sent)) = reply.get(&field).and_then(|id| outstanding.remove(&id.to_string())) else {
                continue;
            };
            got.push((i, arrived.saturating_duration_since(sent), reply));
            deadline = arrived + self.timeout();
        }
        got.sort_by_key(|r| r.0);
        Ok(got)
    }

    /// `count` requests, `size` at a time sent without waiting; each latency is a sample.
    pub(super) fn batch(
        &mut self,
        metric: &str,
        send: &Value,
        count: u32,
        size: u32,
        expect: &Map<String, Value>,
    ) -> anyhow::Result<()> {
        self.recorded.insert(metric.to_string());
        let mut next = 0u32;
        while next < count {
            let end = count.min(next.saturating_add(size.max(1)));
            let done = self.one_batch(metric, send, next, end, expect);
            if let Err((at, err)) = done {
                self.ctx.sample_error(metric, self.trial, at, &err, "s");
                return Err(err);
            }
            next = end;
        }
        Ok(())
    }

    /// Requests `first..end` of a batch step: all sent, then all replies awaited.
    fn one_batch(
        &mut self,
        metric: &str,
        send: &Value,
        first: u32,
        end: u32,
        expect: &Map<String, Value>,
    ) -> Result<(), (u32, anyhow::Error)> {
        let mut outstanding = Outstanding::new();
        for i in first..end {
            let sent = (|| {
                let (request, id) = self.build(send, u64::from(i))?;
                if outstanding.contains_key(&id.to_string()) {
                    bail!("request {i} has the id {id} of a request still waiting for its reply");
                }
                let at = Instant::now();
                self.child()?.send(&request)?;
                outstanding.insert(id.to_string(), (u64::from(i), at));
                anyhow::Ok(())
            })();
            sent.map_err(|err| (i, err))?;
        }
        let replies = self.collect(&mut outstanding).map_err(|err| (first, err))?;
        for (i, took, reply) in &replies {
            let i = *i as u32;
            let id = reply.get(self.id_field()).cloned().unwrap_or_default();
            reply_expect(reply, expect)
                .with_context(|| format!("the reply to request {i} (id {id})"))
                .map_err(|e| (i, e))?;
            self.ctx.sample(metric, self.trial, i, took.as_secs_f64(), "s");
        }
        if let Some((_, _, reply)) = replies.into_iter().last() {
            let id = reply.get(self.id_field()).map(Value::to_string).unwrap_or_default();
            self.prev_reply = Some((reply, id));
        }
        Ok(())
    }

    /// The apparent size of `path` (`~/` the user's home, relative to the scenario's base).
    pub(super) fn size(&mut self, metric: &str, path: &str) -> anyhow::Result<()> {
        let bytes = size_of(self.user, self.base, path)?;
        self.record(metric, bytes as f64, "bytes");
        Ok(())
    }
}

/// A reply matched by id holds `expect` (fields or JSON pointers, as a socket's replies:
/// [`crate::probes::expect`]).
fn reply_expect(reply: &Value, expect: &Map<String, Value>) -> anyhow::Result<()> {
    crate::probes::expect::check(reply, expect).map_err(|why| {
        let shown: String = reply.to_string().chars().take(400).collect();
        anyhow!("{why}: {shown}")
    })
}

/// The apparent size of `path` for `user` (see [`size::apparent_size`]).
pub(super) fn size_of(user: &crate::users::User, base: &Path, path: &str) -> anyhow::Result<u64> {
    let full = common::expand(user, base, path);
    size::apparent_size_as(&full, user.uid, user.gid).with_context(|| format!("cannot read the size of {path}"))
}

#[cfg(test)]
mod tests {
    use sandbench_proto::plan::{AgentPlan, Scenario};
    use sandbench_proto::v1::{event, observation};
    use serde_json::json;

    use super::super::tests::context;
    use super::*;
    use crate::probes::jsonl::{JsonlChild, JsonlLaunch};

    /// Reads three requests, then replies in reverse order (a log line first), each reply
    /// carrying the request's id and a generation; then the same again, forever.
    const REVERSING: &str = r#"
import json, sys
generation = 0
while True:
    batch = [json.loads(sys.stdin.readline()) for _ in range(3)]
    print("a log line, not JSON", flush=True)
    for request in reversed(batch):
        generation += 1
        print(json.dumps({"requestId": request["requestId"], "gen": generation, "echo": request}), flush=True)
"#;

    fn plan() -> AgentPlan {
        serde_json::from_value(json!({
            "source": {"kind": "none"},
            "prepare": {"commands": []},
            "install": {"command": {"run": "true", "timeout_s": 1.0}},
            "measure": {"settle_s": 0.0},
            "runtime": {},
        }))
        .unwrap()
    }

    fn scenario() -> Scenario {
        serde_json::from_value(json!({
            "name": "reversing", "command": ["python3"], "timeout_s": 5.0, "id_field": "requestId", "steps": [],
        }))
        .unwrap()
    }

    fn samples(rx: &mut tokio::sync::mpsc::Receiver<event::Body>) -> Vec<(u32, bool)> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|b| match b {
                event::Body::Observation(o) if o.metric == "lat" => {
                    Some((o.sample, matches!(o.outcome, Some(observation::Outcome::Value(v)) if v > 0.0)))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn replies_in_any_order_are_matched_by_id_and_the_next_batch_uses_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, mut rx) = context(dir.path());
        let (plan, scenario) = (plan(), scenario());
        let user = crate::users::User {
            name: "root".into(),
            uid: 0,
            gid: 0,
            home: dir.path().to_path_buf(),
            shell: "/bin/sh".into(),
        };
        let mut engine = Engine::new(&ctx, &plan, &user, dir.path(), 7, &scenario);
        let launch = JsonlLaunch {
            command: vec!["python3".into(), "-c".into(), REVERSING.into()],
            env: [("PATH".to_string(), "/usr/bin:/bin".to_string())].into(),
            cwd: dir.path().to_path_buf(),
            user: None,
            stderr_path: None,
            replies: true,
        };
        engine.child = Some(JsonlChild::spawn(&launch).unwrap());
        let send = json!({"requestId": "r-{{trial}}-{{i}}", "after": "{{prev.gen}}", "n": "{{i}}"});
        let expect: Map<String, Value> = serde_json::from_value(json!({"/echo/n": {"not": -1}})).unwrap();
        // The first request names the previous reply, and none came yet: the step fails at
        // request 0, naming why.
        let err = engine.batch("lat", &send, 6, 3, &expect).unwrap_err();
        assert!(format!("{err:#}").contains("no reply came before this request"), "{err:#}");
        assert_eq!(samples(&mut rx), [(0, false)]);
        // With a reply before: all six matched, the second batch built from the reply to the
        // last request of the first (whatever order they came in).
        engine.prev_reply = Some((json!({"gen": 0}), "start".into()));
        engine.batch("lat", &send, 6, 3, &expect).unwrap();
        assert_eq!(samples(&mut rx), (0..6).map(|i| (i, true)).collect::<Vec<_>>());
        let (last, id) = engine.prev_reply.clone().unwrap();
        assert_eq!(id, "\"r-7-5\"");
        // Request 3 was built from request 2's reply: generation 1 (it was answered first).
        assert_eq!(last["echo"]["after"], 1);
        assert_eq!(last["echo"]["n"], 5);
        // A reply that fails `expect` fails the step at its request, naming it.
        let strict: Map<String, Value> = serde_json::from_value(json!({"/echo/n": 0})).unwrap();
        let err = engine.batch("lat", &send, 3, 3, &strict).unwrap_err();
        assert!(format!("{err:#}").starts_with("the reply to request 1 (id \"r-7-1\")"), "{err:#}");
        if let Some(child) = engine.child.take() {
            child.close(None);
        }
    }
}
