//! The registry bridge (`sandbox.network = "registries"`): the controller's end. A sandbox has
//! no network; its agent serves plain HTTP on the sandbox's loopback and carries each request
//! here (`Fetch`, on its session's connection). The bridge forwards GET and HEAD only, only to
//! the allowed registries ([`upstream`]) and only at their registry paths ([`route`]), without
//! credentials, with bounded answers; it answers from a content cache on the host ([`cache`])
//! when it can, keeping each side's answers for its timed trials (pinned, each side within half
//! of the cache's bound); it bounds what a sandbox may ask and what reaches the registries
//! ([`bounds`]), logs every request in the run directory within a cap ([`log`]), and refuses
//! anything else with a 403 (429 past a bound) whose body says why.

pub mod bounds;
pub mod cache;
pub mod log;
pub mod route;
pub mod upstream;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use sandbench_proto::v1::{FetchHead, FetchReply, fetch_reply};
use sandbench_proto::{Phase, Side};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::spec::RegistrySettings;
use bounds::Bounds;
use cache::Cache;
use log::RequestLog;
use route::{Kind, Route};
pub use upstream::Upstreams;

/// The request log in the run directory, one JSON object a line.
pub const LOG_FILE: &str = "registries.jsonl";
/// Body chunks sent to the agent, at most.
const CHUNK_BYTES: usize = 256 * 1024;
/// The body of an upstream's error answer passed on, at most.
const MAX_ERROR_BODY: usize = 64 * 1024;
const MAX_ACCEPT: usize = 512;

/// One request, as the agent carried it, and whom it is for.
#[derive(Debug, Clone)]
pub struct Ask {
    pub sandbox: String,
    /// The side the sandbox was registered with, when it has one (a compared sandbox).
    pub side: Option<Side>,
    /// What the sandbox was running, for the per-trial counts.
    pub command: Running,
    pub method: String,
    pub target: String,
    pub accept: String,
}

/// What a sandbox was running when it made a request: a trial of a phase (`install#2` in the
/// log and the report), or nothing (`between phases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Running {
    Phase { phase: Phase, trial: u32 },
    Between,
}

impl std::fmt::Display for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Running::Phase { phase, trial } => write!(f, "{phase}#{trial}"),
            Running::Between => f.write_str("between phases"),
        }
    }
}

impl Serialize for Running {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Requests per command, and how many the cache answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Count {
    pub requests: u64,
    pub hits: u64,
    pub refused: u64,
}

#[derive(Default)]
struct Tally {
    /// By sandbox and what it was running as the report names it (and orders it).
    by_command: BTreeMap<(String, String), (Running, Count)>,
    reasons: Vec<String>,
}

/// What a share of the cache keeps pinned for its side's timed trials.
#[derive(Default)]
struct Pinned {
    bytes: u64,
    bodies: HashSet<String>,
    /// Answers not pinned: the share was full.
    refused: u64,
}

struct Inner {
    upstreams: Upstreams,
    settings: RegistrySettings,
    client: reqwest::Client,
    cache: Cache,
    log: Mutex<RequestLog>,
    bounds: Bounds,
    tally: Mutex<Tally>,
    /// Per share of the cache (a side, else a sandbox), what is pinned.
    pins: Mutex<BTreeMap<String, Pinned>>,
}

/// The bridge of one run. Cheap to clone.
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

enum Body {
    Bytes(Vec<u8>),
    File(PathBuf, u64),
}

/// How an answer was served, as the log's `cache` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Served {
    /// From the cache.
    Hit,
    /// Fetched from the upstream and kept in the cache.
    Miss,
    /// Refused by the bridge.
    Refused,
    /// An upstream's error answer, passed on.
    Upstream,
}

/// What a request gets.
struct Answer {
    status: u16,
    content_type: String,
    body: Body,
    cache: Served,
    reason: String,
    url: String,
}

impl Answer {
    fn refused(status: u16, reason: impl Into<String>) -> Answer {
        let reason = reason.into();
        Answer {
            status,
            content_type: "text/plain; charset=utf-8".into(),
            body: Body::Bytes(format!("sandbench registry bridge: {reason}\n").into_bytes()),
            cache: Served::Refused,
            reason,
            url: String::new(),
        }
    }

    fn len(&self) -> u64 {
        match &self.body {
            Body::Bytes(b) => b.len() as u64,
            Body::File(_, len) => *len,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Bridge {
    /// The bridge of the run in `run_dir`: its upstreams resolved, its cache opened, its log
    /// appended to.
    pub fn open(run_dir: &Path, settings: &RegistrySettings) -> anyhow::Result<Bridge> {
        let upstreams = Upstreams::resolve(settings)?;
        for note in &upstreams.notes {
            tracing::info!("registry bridge: {note}");
        }
        let cache_dir = settings.cache_dir.clone().unwrap_or_else(Cache::default_dir);
        let cache = Cache::open(&cache_dir, settings.cache_bytes)?;
        let log_path = run_dir.join(LOG_FILE);
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let written = log.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = rustls::crypto::ring::default_provider().install_default();
        let allowed = upstreams.clone();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(600))
            .user_agent(concat!("sandbench-registry-bridge/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                let ok = attempt.previous().len() < 5 && allowed_url(&allowed, attempt.url());
                if ok { attempt.follow() } else { attempt.stop() }
            }))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot set up the registry bridge's HTTP client: {e}"))?;
        Ok(Bridge {
            inner: Arc::new(Inner {
                upstreams,
                settings: settings.clone(),
                client,
                cache,
                log: Mutex::new(RequestLog::new(log, written)),
                bounds: Bounds::new(settings),
                tally: Mutex::default(),
                pins: Mutex::default(),
            }),
        })
    }

    pub fn upstreams(&self) -> &Upstreams {
        &self.inner.upstreams
    }

    /// Answers `ask` on a stream: a head, then the body in chunks.
    pub fn serve(&self, ask: Ask) -> ReceiverStream<Result<FetchReply, Status>> {
        let (tx, rx) = mpsc::channel(4);
        let bridge = self.clone();
        tokio::spawn(async move {
            let answer = bridge.handle(&ask).await;
            send(&tx, &ask.method, answer).await;
        });
        ReceiverStream::new(rx)
    }

    /// The answer to `ask`, logged and counted.
    async fn handle(&self, ask: &Ask) -> Answer {
        let started = Instant::now();
        let answer = self.answer(ask).await;
        self.record(ask, &answer, started.elapsed());
        answer
    }

    async fn answer(&self, ask: &Ask) -> Answer {
        if let Err(why) = self.inner.bounds.admit(&ask.sandbox) {
            return Answer::refused(429, why);
        }
        if ask.method != "GET" && ask.method != "HEAD" {
            let method: String = ask.method.chars().take(16).collect();
            return Answer::refused(403, format!("only GET and HEAD reach the registries, not {method:?}"));
        }
        let route = match route::route(&self.inner.upstreams, &ask.target) {
            Ok(route) => route,
            Err(reason) => return Answer::refused(403, reason),
        };
        let accept: String = ask.accept.chars().take(MAX_ACCEPT).collect();
        let key = self.cache_key(&route, &accept);
        let max_age = (!route.immutable()).then_some(self.inner.settings.metadata_ttl);
        let remembered = format!("{}\n{key}", route.url);
        let cached = if self.inner.bounds.remembered_missing(&remembered) {
            None
        } else {
            self.inner.cache.get(&route.url, &key, max_age)
        };
        let mut answer = match cached {
            Some(entry) => {
                self.pin(ask, &entry.sha256, entry.size);
                Answer {
                    status: 200,
                    content_type: entry.content_type.clone(),
                    body: Body::File(self.inner.cache.blob(&entry), entry.size),
                    cache: Served::Hit,
                    reason: String::new(),
                    url: String::new(),
                }
            }
            None => self.upstream(ask, &route, &accept, &key, &remembered).await,
        };
        answer.url = route.url.clone();
        answer
    }

    /// The answer of the upstream, within the bounds of what reaches it: a negative answer
    /// remembered lately is given again without asking.
    async fn upstream(&self, ask: &Ask, route: &Route, accept: &str, key: &str, remembered: &str) -> Answer {
        let bounds = &self.inner.bounds;
        if bounds.remembered_missing(remembered) {
            let reason = format!(
                "the registry answered 404 for this within the last {} s (remembered)",
                bounds::NEGATIVE_TTL.as_secs()
            );
            return Answer {
                status: 404,
                content_type: "text/plain; charset=utf-8".into(),
                body: Body::Bytes(format!("sandbench registry bridge: {reason}\n").into_bytes()),
                cache: Served::Hit,
                reason,
                url: String::new(),
            };
        }
        if let Err(why) = bounds.send_upstream(&ask.sandbox) {
            return Answer::refused(429, why);
        }
        let answer = self.fetch(route, accept, key).await.unwrap_or_else(|refused| refused);
        bounds.answered(&ask.sandbox, remembered, answer.status);
        if let Body::File(path, size) = &answer.body
            && let Some(sha256) = path.file_name().and_then(|n| n.to_str())
        {
            self.pin(ask, sha256, *size);
        }
        answer
    }

    /// What the cache files an answer under besides its URL: the Accept asked with, and for an
    /// index page, that its links were rewritten for these hosts.
    fn cache_key(&self, route: &Route, accept: &str) -> String {
        match route.kind {
            Kind::Pypi => format!("{accept}\nlinks to {} made bridge paths", self.inner.upstreams.hosts.join(",")),
            Kind::Npm | Kind::Host => accept.to_string(),
        }
    }

    /// The body of a successful answer in a new file of the cache (an index page's links made
    /// bridge paths on the way in, a chunk at a time), its SHA-256 and size; refused past
    /// `max_response_mb` or when the upstream broke off.
    async fn take_body(
        &self,
        response: &mut reqwest::Response,
        route: &Route,
        host: &str,
        textual: bool,
    ) -> Result<(tempfile::NamedTempFile, String, u64), Answer> {
        let temp = self.inner.cache.temp().map_err(|e| Answer::refused(502, format!("{e:#}")))?;
        let mut body = Intake { temp, hasher: Sha256::new(), size: 0 };
        let mut rewriter =
            (route.kind == Kind::Pypi && textual).then(|| route::IndexRewriter::new(&self.inner.upstreams));
        let max = self.inner.settings.max_response_bytes;
        let mut received = 0u64;
        let cannot = |e: std::io::Error| Answer::refused(502, format!("cannot write the cache: {e}"));
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => return Err(Answer::refused(502, format!("{host} broke off: {}", error_chain(&e)))),
            };
            received += chunk.len() as u64;
            if received > max {
                return Err(too_large(received, max));
            }
            match rewriter.as_mut() {
                Some(rewriter) => body.write(&rewriter.push(&chunk)).map_err(cannot)?,
                None => body.write(&chunk).map_err(cannot)?,
            }
        }
        if let Some(rewriter) = rewriter {
            body.write(&rewriter.finish()).map_err(cannot)?;
        }
        Ok((body.temp, cache::hex(&body.hasher.finalize()), body.size))
    }

    /// Pins the body `sha256` (`size` bytes) for the side of the sandbox asking (else the
    /// sandbox itself) while the run lasts, within half of the cache's bound a side: the other
    /// side's answers cannot evict it, so its timed trials get what its preparation fetched.
    fn pin(&self, ask: &Ask, sha256: &str, size: u64) {
        let group = ask.side.map_or_else(|| ask.sandbox.clone(), |side| side.as_str().to_string());
        let share = self.inner.cache.bound() / 2;
        let mut pins = lock(&self.inner.pins);
        let pinned = pins.entry(group).or_default();
        if pinned.bodies.contains(sha256) {
            return;
        }
        if pinned.bytes + size > share {
            pinned.refused += 1;
            return;
        }
        pinned.bytes += size;
        pinned.bodies.insert(sha256.to_string());
        self.inner.cache.pin(sha256);
    }

    /// The upstream's answer, kept in the cache when it is a success; refusals as `Err`.
    async fn fetch(&self, route: &Route, accept: &str, key: &str) -> Result<Answer, Answer> {
        let host = route.url.split('/').nth(2).unwrap_or_default().to_string();
        let mut request = self.inner.client.get(&route.url);
        if !accept.is_empty() {
            request = request.header(reqwest::header::ACCEPT, accept);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| Answer::refused(502, format!("cannot reach {host}: {}", error_chain(&e))))?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_string();
        let max = self.inner.settings.max_response_bytes;
        if let Some(len) = response.content_length()
            && len > max
        {
            return Err(too_large(len, max));
        }
        if !response.status().is_success() {
            let mut body = Vec::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                body.extend_from_slice(&chunk[..chunk.len().min(MAX_ERROR_BODY - body.len())]);
                if body.len() >= MAX_ERROR_BODY {
                    break;
                }
            }
            let reason = format!("{host} answered {status}");
            return Ok(Answer {
                status,
                content_type,
                body: Body::Bytes(body),
                cache: Served::Upstream,
                reason,
                url: String::new(),
            });
        }
        let textual = content_type.contains("html") || content_type.contains("json");
        let (temp, sha, size) = self.take_body(&mut response, route, &host, textual).await?;
        let entry = self
            .inner
            .cache
            .put(&route.url, key, &content_type, temp, &sha, size)
            .map_err(|e| Answer::refused(502, format!("{e:#}")))?;
        Ok(Answer {
            status,
            content_type,
            body: Body::File(self.inner.cache.blob(&entry), size),
            cache: Served::Miss,
            reason: String::new(),
            url: String::new(),
        })
    }

    /// The request's line in the log, and its count.
    fn record(&self, ask: &Ask, answer: &Answer, took: Duration) {
        let line = || {
            serde_json::json!({
                "unix_ms": jiff::Timestamp::now().as_millisecond(),
                "sandbox": ask.sandbox,
                "command": ask.command,
                "method": crate::sanitize::bounded(&ask.method, 16),
                "target": crate::sanitize::bounded(&ask.target, 2048),
                "url": crate::sanitize::bounded(&answer.url, 2048),
                "status": answer.status,
                "bytes": answer.len(),
                "cache": answer.cache,
                "ms": (took.as_secs_f64() * 1000.0 * 10.0).round() / 10.0,
                "reason": answer.reason,
            })
        };
        lock(&self.inner.log).record(&ask.sandbox, answer.cache == Served::Refused, line);
        let mut tally = lock(&self.inner.tally);
        let key = (ask.sandbox.clone(), ask.command.to_string());
        let (_, count) = tally.by_command.entry(key).or_insert((ask.command, Count::default()));
        count.requests += 1;
        count.hits += u64::from(answer.cache == Served::Hit);
        if answer.cache == Served::Refused {
            count.refused += 1;
            // A few examples, one a reason.
            if tally.reasons.len() < 3 && !tally.reasons.iter().any(|r| r.ends_with(&format!(": {}", answer.reason))) {
                let reason =
                    format!("{} {}: {}", ask.method, crate::sanitize::bounded(&ask.target, 120), answer.reason);
                tally.reasons.push(reason);
            }
        }
    }

    /// Requests per (sandbox, command) so far, the command as the report names it.
    pub fn counts(&self) -> BTreeMap<(String, String), Count> {
        lock(&self.inner.tally).by_command.iter().map(|(key, (_, count))| (key.clone(), count.clone())).collect()
    }

    /// What the report says of the bridge: its totals, each timed trial's requests and cache
    /// hits, and the refusals with a few of their reasons.
    pub fn summary(&self) -> Vec<String> {
        let tally = lock(&self.inner.tally);
        let total = tally.by_command.values().map(|(_, c)| c).fold(Count::default(), |a, c| Count {
            requests: a.requests + c.requests,
            hits: a.hits + c.hits,
            refused: a.refused + c.refused,
        });
        if total.requests == 0 {
            return Vec::new();
        }
        let mut out = vec![format!(
            "registries: {} requests through the bridge, {} from the cache, {} refused (each in {LOG_FILE})",
            total.requests, total.hits, total.refused
        )];
        for ((sandbox, command), (running, c)) in &tally.by_command {
            // Prepare's requests fill the cache; the timed trials' are the ones that tell.
            if !matches!(running, Running::Phase { phase: Phase::Prepare, .. }) {
                out.push(format!(
                    "registries: {sandbox} {command}: {} requests, {} from the cache{}",
                    c.requests,
                    c.hits,
                    if c.hits < c.requests { " (the rest timed with the network)" } else { "" }
                ));
            }
        }
        if total.refused > 0 {
            out.push(format!("registries: {} requests refused, e.g. {}", total.refused, tally.reasons.join("; ")));
        }
        drop(tally);
        let (upstream, past_bounds) = self.inner.bounds.totals();
        if past_bounds > 0 {
            out.push(format!(
                "registries: {past_bounds} requests refused by the bounds of what reaches the registries \
                 (registries.upstream_per_second, max_upstream_requests, max_not_found); {} were sent, {} answered \
                 \"not found\"",
                upstream.sent, upstream.not_found
            ));
        }
        let unlogged = lock(&self.inner.log).unlogged();
        if unlogged > 0 {
            out.push(format!(
                "registries: {unlogged} requests counted but not logged in {LOG_FILE} (past its cap of {} MiB, or {} \
                 refusals a sandbox)",
                log::LOG_CAP_BYTES >> 20,
                log::REFUSALS_LOGGED
            ));
        }
        for (group, pinned) in lock(&self.inner.pins).iter().filter(|(_, p)| p.refused > 0) {
            out.push(format!(
                "registries: {group}'s answers passed its half of registries.cache_mb ({:.0} MB): {} were not kept for \
                 its timed trials, which may have asked the registries again; raise cache_mb",
                self.inner.cache.bound() as f64 / 2e6,
                pinned.refused
            ));
        }
        out
    }
}

/// A body on its way into the cache: its file, hash and size so far.
struct Intake {
    temp: tempfile::NamedTempFile,
    hasher: Sha256,
    size: u64,
}

impl Intake {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.size += bytes.len() as u64;
        self.hasher.update(bytes);
        self.temp.write_all(bytes)
    }
}

fn too_large(len: u64, max: u64) -> Answer {
    Answer::refused(
        403,
        format!("the answer is larger than the bridge's bound: {len} > {max} bytes (registries.max_response_mb)"),
    )
}

/// Whether a redirect stays on an allowed registry.
fn allowed_url(upstreams: &Upstreams, url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else { return false };
    let base_host = |base: &Option<String>| {
        base.as_deref()
            .and_then(|b| reqwest::Url::parse(b).ok())
            .is_some_and(|b| b.host_str() == Some(host) && b.scheme() == url.scheme())
    };
    (url.scheme() == "https" && upstreams.hosts.iter().any(|h| h == host))
        || base_host(&upstreams.npm)
        || base_host(&upstreams.pypi)
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    crate::sanitize::bounded(&out, 400).into_owned()
}

/// The answer on the stream: its head, then (for GET) its body in chunks.
async fn send(tx: &mpsc::Sender<Result<FetchReply, Status>>, method: &str, answer: Answer) {
    let head = FetchHead {
        status: u32::from(answer.status),
        content_type: answer.content_type.clone(),
        content_length: answer.len(),
        location: String::new(),
    };
    if tx.send(Ok(FetchReply { body: Some(fetch_reply::Body::Head(head)) })).await.is_err() || method == "HEAD" {
        return;
    }
    let chunk = |data: Vec<u8>| Ok(FetchReply { body: Some(fetch_reply::Body::Chunk(data)) });
    match answer.body {
        Body::Bytes(bytes) => {
            for part in bytes.chunks(CHUNK_BYTES) {
                if tx.send(chunk(part.to_vec())).await.is_err() {
                    return;
                }
            }
        }
        Body::File(path, _) => {
            let Ok(mut file) = tokio::fs::File::open(&path).await else {
                let _ = tx.send(Err(Status::unavailable("the cached body vanished"))).await;
                return;
            };
            let mut buf = vec![0u8; CHUNK_BYTES];
            loop {
                match file.read(&mut buf).await {
                    Ok(0) => return,
                    Ok(n) => {
                        if tx.send(chunk(buf[..n].to_vec())).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(Status::unavailable(format!("cannot read the cache: {e}")))).await;
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
