//! The GitHub REST API as a [`Forge`]: pull request, issue comments, label events and commit
//! statuses, with a token from `GITHUB_TOKEN`, any API base (`GITHUB_API_URL`: github.com or
//! GitHub Enterprise), bounded retries with backoff on 5xx and rate limits, and a dry run that prints the requests
//! instead of sending them.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use reqwest::header::{ACCEPT, HeaderMap, USER_AGENT};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::forge::{Comment, CommitStatus, Forge, ForgeError, PullState};

pub const DEFAULT_API: &str = "https://api.github.com";
const PER_PAGE: usize = 100;
/// At most this many pages of comments (10 000 comments).
const MAX_PAGES: usize = 100;

/// How often and how long to try again.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Tries per request, the first included.
    pub attempts: u32,
    /// The wait after the first failure; it doubles after each further one.
    pub first_delay: Duration,
    /// No single wait is longer; a rate limit asking for longer fails the request.
    pub max_delay: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { attempts: 5, first_delay: Duration::from_secs(1), max_delay: Duration::from_secs(90) }
    }
}

/// A GitHub repository's API.
pub struct GitHub {
    http: reqwest::Client,
    api: String,
    repo: String,
    token: Option<String>,
    dry_run: bool,
    retry: Retry,
    planned: Mutex<Vec<String>>,
}

/// Whether a failed request may simply be sent again.
#[derive(Clone, Copy, PartialEq)]
enum Repeat {
    /// Reads, updates in place, statuses: sending twice does no harm.
    Safe,
    /// Creating a comment: after a 5xx or a lost answer the caller must look first.
    Unsafe,
}

impl GitHub {
    /// `api` is the REST base (`https://api.github.com`, or `https://HOST/api/v3` for GitHub
    /// Enterprise), `repo` is `owner/name`. Without a token only a dry run is possible.
    pub fn new(api: &str, repo: &str, token: Option<String>, dry_run: bool) -> anyhow::Result<GitHub> {
        let api = api.trim_end_matches('/').to_string();
        if !(api.starts_with("https://") || api.starts_with("http://")) {
            anyhow::bail!("the GitHub API base must be an http(s) URL, got {api:?} (GITHUB_API_URL)");
        }
        check_repo(repo)?;
        let token = token.filter(|t| !t.trim().is_empty());
        if token.is_none() && !dry_run {
            anyhow::bail!(
                "GITHUB_TOKEN is not set: publishing needs a token allowed to write pull-request comments and \
                 commit statuses (or use --dry-run)"
            );
        }
        install_crypto();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot set up the HTTP client: {e}"))?;
        Ok(GitHub {
            http,
            api,
            repo: repo.to_string(),
            token,
            dry_run,
            retry: Retry::default(),
            planned: Mutex::default(),
        })
    }

    /// The API base and token from the environment (`GITHUB_API_URL`, `GITHUB_TOKEN`).
    pub fn from_env(repo: &str, dry_run: bool) -> anyhow::Result<GitHub> {
        let api = std::env::var("GITHUB_API_URL").ok().filter(|a| !a.is_empty());
        GitHub::new(api.as_deref().unwrap_or(DEFAULT_API), repo, std::env::var("GITHUB_TOKEN").ok(), dry_run)
    }

    pub fn with_retry(mut self, retry: Retry) -> GitHub {
        self.retry = retry;
        self
    }

    /// In a dry run: the requests it would have made (and the reads it made) since last asked,
    /// in order.
    pub fn take_planned(&self) -> Vec<String> {
        self.planned.lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default()
    }

    /// Whether reads go to the API (a dry run with a token reads; without one it sends nothing).
    pub fn reads(&self) -> bool {
        self.token.is_some()
    }

    /// Sends one request, trying again as [`Retry`] allows. `Ok(None)`: not sent (dry run).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        repeat: Repeat,
    ) -> Result<Option<Value>, ForgeError> {
        let url = format!("{}{path}", self.api);
        let write = method != Method::GET;
        if self.dry_run {
            let mut line = format!("{method} {url}");
            if let Some(body) = &body {
                line.push('\n');
                line.push_str(&serde_json::to_string_pretty(body).unwrap_or_default());
            }
            if let Ok(mut planned) = self.planned.lock() {
                planned.push(line);
            }
            if write || self.token.is_none() {
                return Ok(None);
            }
        }
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts.max(1) {
            let mut request = self
                .http
                .request(method.clone(), &url)
                .header(ACCEPT, "application/vnd.github+json")
                .header("X-GitHub-Api-Version", "2022-11-28")
                .header(USER_AGENT, concat!("sandbench/", env!("CARGO_PKG_VERSION")));
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = &body {
                request = request.json(body);
            }
            let wait = match request.send().await {
                Err(e) => {
                    last = format!("{method} {url}: {}", chain(&e));
                    if repeat == Repeat::Unsafe && !e.is_connect() {
                        return Err(ForgeError::Unknown(last));
                    }
                    self.backoff(attempt)
                }
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    let text = response.text().await.unwrap_or_default();
                    if status.is_success() {
                        return Ok(Some(serde_json::from_str(&text).unwrap_or(Value::Null)));
                    }
                    last = describe(&method, &url, status, &text);
                    if let Some(wait) = rate_limit_wait(status, &headers, &text, SystemTime::now()) {
                        if wait > self.retry.max_delay {
                            return Err(ForgeError::Failed(format!(
                                "{last}; the rate limit asks to wait {} s, more than the {} s allowed",
                                wait.as_secs(),
                                self.retry.max_delay.as_secs()
                            )));
                        }
                        wait
                    } else if status.is_server_error() {
                        if repeat == Repeat::Unsafe {
                            return Err(ForgeError::Unknown(last));
                        }
                        self.backoff(attempt)
                    } else {
                        return Err(ForgeError::Failed(last));
                    }
                }
            };
            if attempt < self.retry.attempts {
                tracing::warn!(%last, attempt, wait_ms = wait.as_millis() as u64, "GitHub request failed; trying again");
                tokio::time::sleep(wait).await;
            }
        }
        Err(ForgeError::Failed(format!("{last} (gave up after {} tries)", self.retry.attempts.max(1))))
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
        self.retry.first_delay.saturating_mul(factor).min(self.retry.max_delay)
    }

    fn repo_path(&self, rest: &str) -> String {
        format!("/repos/{}/{rest}", self.repo)
    }
}

impl Forge for GitHub {
    async fn pull_request(&self, number: u64) -> Result<Option<PullState>, ForgeError> {
        let path = self.repo_path(&format!("pulls/{number}"));
        let Some(pull) = self.call(Method::GET, &path, None, Repeat::Safe).await? else { return Ok(None) };
        let head = pull["head"]["sha"].as_str();
        let state = pull["state"].as_str();
        match (head, state) {
            (Some(head), Some(state)) => Ok(Some(PullState { open: state == "open", head: head.to_string() })),
            _ => Err(ForgeError::Failed(format!("GET {path}: the answer has no head.sha or state"))),
        }
    }

    async fn comments(&self, number: u64) -> Result<Option<Vec<Comment>>, ForgeError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = self.repo_path(&format!("issues/{number}/comments?per_page={PER_PAGE}&page={page}"));
            let Some(answer) = self.call(Method::GET, &path, None, Repeat::Safe).await? else { return Ok(None) };
            let items = answer
                .as_array()
                .ok_or_else(|| ForgeError::Failed(format!("GET {path}: expected a list of comments")))?;
            for item in items {
                let id = item["id"]
                    .as_u64()
                    .ok_or_else(|| ForgeError::Failed(format!("GET {path}: a comment without an id")))?;
                all.push(Comment {
                    id,
                    author: item["user"]["login"].as_str().unwrap_or_default().to_string(),
                    body: item["body"].as_str().unwrap_or_default().to_string(),
                });
            }
            if items.len() < PER_PAGE {
                break;
            }
        }
        Ok(Some(all))
    }

    async fn create_comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let path = self.repo_path(&format!("issues/{number}/comments"));
        self.call(Method::POST, &path, Some(json!({ "body": body })), Repeat::Unsafe).await.map(drop)
    }

    async fn update_comment(&self, id: u64, body: &str) -> Result<(), ForgeError> {
        let path = self.repo_path(&format!("issues/comments/{id}"));
        self.call(Method::PATCH, &path, Some(json!({ "body": body })), Repeat::Safe).await.map(drop)
    }

    async fn labeled_at(&self, number: u64, label: &str) -> Result<Option<Option<jiff::Timestamp>>, ForgeError> {
        let mut latest: Option<jiff::Timestamp> = None;
        for page in 1..=MAX_PAGES {
            let path = self.repo_path(&format!("issues/{number}/events?per_page={PER_PAGE}&page={page}"));
            let Some(answer) = self.call(Method::GET, &path, None, Repeat::Safe).await? else { return Ok(None) };
            let items = answer
                .as_array()
                .ok_or_else(|| ForgeError::Failed(format!("GET {path}: expected a list of events")))?;
            for item in items.iter().filter(|i| i["event"] == "labeled" && i["label"]["name"] == label) {
                let at =
                    item["created_at"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()).ok_or_else(|| {
                        ForgeError::Failed(format!("GET {path}: a labeled event without a readable created_at"))
                    })?;
                latest = latest.max(Some(at));
            }
            if items.len() < PER_PAGE {
                break;
            }
        }
        Ok(Some(latest))
    }

    async fn set_status(&self, commit: &str, status: &CommitStatus) -> Result<(), ForgeError> {
        if !commit.chars().all(|c| c.is_ascii_hexdigit()) || commit.is_empty() {
            return Err(ForgeError::Failed(format!("not a commit id: {commit:?}")));
        }
        let mut body = json!({
            "state": status.state.as_str(),
            "context": status.context,
            "description": status.description,
        });
        if let Some(url) = &status.target_url {
            body["target_url"] = json!(url);
        }
        let path = self.repo_path(&format!("statuses/{commit}"));
        self.call(Method::POST, &path, Some(body), Repeat::Safe).await.map(drop)
    }
}

/// An error with its causes (reqwest's own message names none).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

/// `owner/name`, each part made of letters, digits, `-`, `_` and `.`.
fn check_repo(repo: &str) -> anyhow::Result<()> {
    let ok_part = |p: &str| {
        !p.is_empty() && p != "." && p != ".." && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    match repo.split_once('/') {
        Some((owner, name)) if ok_part(owner) && ok_part(name) => Ok(()),
        _ => anyhow::bail!("expected a repository as owner/name, got {repo:?}"),
    }
}

/// The rustls crypto provider (ring), installed once per process.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// How long a 403 or 429 asks to wait, when it is a rate limit: `retry-after`, else the reset
/// time of an exhausted limit, else a minute for a secondary limit named only in the message.
fn rate_limit_wait(status: StatusCode, headers: &HeaderMap, body: &str, now: SystemTime) -> Option<Duration> {
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs));
    }
    if header("x-ratelimit-remaining") == Some("0") {
        let reset = header("x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let now = now.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        return Some(Duration::from_secs(reset.saturating_sub(now).max(1)));
    }
    if status == StatusCode::TOO_MANY_REQUESTS || body.to_ascii_lowercase().contains("rate limit") {
        return Some(Duration::from_secs(60));
    }
    None
}

/// An error answer in words: the status, GitHub's message, and what usually causes it.
fn describe(method: &Method, url: &str, status: StatusCode, body: &str) -> String {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.chars().take(200).collect());
    let hint = match status.as_u16() {
        401 => " (the token was refused: is GITHUB_TOKEN valid?)",
        403 => " (forbidden: the token needs pull-requests: write and statuses: write)",
        404 => " (not found: check the repository, the pull request number, and that the token can see them)",
        422 => " (GitHub refused the content)",
        _ => "",
    };
    format!("{method} {url}: {status}: {message}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn rate_limits_are_told_apart_from_refusals() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let wait = |status: u16, h: &[(&'static str, &str)], body: &str| {
            rate_limit_wait(StatusCode::from_u16(status).unwrap(), &headers(h), body, now)
        };
        assert_eq!(wait(403, &[("retry-after", "7")], ""), Some(Duration::from_secs(7)));
        assert_eq!(wait(429, &[("retry-after", "0")], ""), Some(Duration::ZERO));
        assert_eq!(
            wait(403, &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1030")], ""),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            wait(403, &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "10")], ""),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            wait(403, &[], r#"{"message":"You have exceeded a secondary rate limit"}"#),
            Some(Duration::from_secs(60))
        );
        assert_eq!(wait(403, &[("x-ratelimit-remaining", "12")], r#"{"message":"Resource not accessible"}"#), None);
        assert_eq!(wait(502, &[("retry-after", "1")], ""), None);
        assert_eq!(wait(404, &[], ""), None);
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let gh = GitHub::new("http://127.0.0.1:9", "o/r", None, true).unwrap().with_retry(Retry {
            attempts: 9,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        });
        let waits: Vec<u128> = (1..=5).map(|a| gh.backoff(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        assert_eq!(gh.backoff(u32::MAX), Duration::from_millis(500));
    }

    #[test]
    fn bad_settings_are_named() {
        let err = |api: &str, repo: &str, token: Option<&str>| {
            GitHub::new(api, repo, token.map(str::to_string), false).err().map(|e| e.to_string()).unwrap_or_default()
        };
        assert!(err(DEFAULT_API, "o/r", None).contains("GITHUB_TOKEN is not set"));
        assert!(err(DEFAULT_API, "o/r", Some("  ")).contains("GITHUB_TOKEN is not set"));
        assert!(err("ftp://x", "o/r", Some("t")).contains("GITHUB_API_URL"));
        for repo in ["o", "o/", "/r", "o/r/x", "o/..", "o/r?x=1"] {
            assert!(err(DEFAULT_API, repo, Some("t")).contains("owner/name"), "{repo}");
        }
        assert!(err("https://ghe.example/api/v3/", "my-org/my.repo_1", Some("t")).is_empty());
    }

    /// TLS is set up (rustls with ring, platform roots): an https request fails on the handshake
    /// with a peer that speaks no TLS, not for want of a crypto provider.
    #[tokio::test]
    async fn https_is_available() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
            }
        });
        let gh = GitHub::new(&format!("https://{addr}"), "o/r", Some("t".into()), false)
            .unwrap()
            .with_retry(Retry { attempts: 1, ..Retry::default() });
        let err = gh.pull_request(1).await.unwrap_err().to_string();
        server.abort();
        assert!(err.starts_with(&format!("GET https://{addr}/repos/o/r/pulls/1: ")), "{err}");
        assert!(err.contains("received corrupt message"), "a TLS handshake was tried: {err}");
    }

    #[test]
    fn errors_say_what_usually_causes_them() {
        let d = describe(
            &Method::PATCH,
            "u",
            StatusCode::FORBIDDEN,
            r#"{"message":"Resource not accessible by integration"}"#,
        );
        assert_eq!(
            d,
            "PATCH u: 403 Forbidden: Resource not accessible by integration (forbidden: the token needs \
             pull-requests: write and statuses: write)"
        );
        assert!(describe(&Method::GET, "u", StatusCode::BAD_GATEWAY, "<html>bad gateway</html>").contains("<html>"));
    }
}
