//! `sandbench publish` and `sandbench ci` against a stand-in for the GitHub REST API: a small
//! HTTP server on 127.0.0.1 in the test process that keeps a pull request, its comments and its
//! commit statuses, can fail on cue, and records every request so the tests assert exactly what
//! was sent (method, path, body, authorization).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbench::publish::github::{GitHub, Retry};
use sandbench::publish::{Action, Publication, Target, publish};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HEAD: &str = "2222222222222222222222222222222222222222";
const NEWER: &str = "3333333333333333333333333333333333333333";
const BASE: &str = "1111111111111111111111111111111111111111";
const BOT: &str = "github-actions[bot]";
const TOKEN: &str = "t0k-secret";

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: String,
    path: String,
    auth: Option<String>,
    body: Option<Value>,
}

fn seen(method: &str, path: &str, body: Option<Value>) -> Seen {
    Seen { method: method.into(), path: path.into(), auth: Some(format!("Bearer {TOKEN}")), body }
}

/// A failure to answer with instead of the normal one.
struct Fault {
    method: &'static str,
    path: &'static str,
    status: u16,
    headers: Vec<(&'static str, String)>,
    /// Carry the request out anyway (the answer is what got lost).
    apply: bool,
}

#[derive(Default)]
struct Hub {
    open: bool,
    head: String,
    comments: Vec<(u64, String, String)>,
    next_id: u64,
    statuses: Vec<Value>,
    /// The pull request's issue events (`labeled` ones, for the trust gate).
    events: Vec<Value>,
    faults: VecDeque<Fault>,
    seen: Vec<Seen>,
    /// Other headers every request must carry, checked as they come.
    header_errors: Vec<String>,
}

struct StandIn {
    url: String,
    hub: Arc<Mutex<Hub>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    async fn start(head: &str, comments: &[(&str, &str)]) -> StandIn {
        let hub = Arc::new(Mutex::new(Hub {
            open: true,
            head: head.into(),
            comments: comments
                .iter()
                .enumerate()
                .map(|(i, (a, b))| (100 + i as u64, a.to_string(), b.to_string()))
                .collect(),
            next_id: 500,
            ..Hub::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shared = hub.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let hub = shared.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, hub).await;
                });
            }
        });
        StandIn { url, hub, task }
    }

    fn fault(
        &self,
        method: &'static str,
        path: &'static str,
        status: u16,
        headers: &[(&'static str, &str)],
        apply: bool,
    ) {
        let headers = headers.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.hub.lock().unwrap().faults.push_back(Fault { method, path, status, headers, apply });
    }

    fn seen(&self) -> Vec<Seen> {
        let hub = self.hub.lock().unwrap();
        assert!(hub.header_errors.is_empty(), "{:?}", hub.header_errors);
        hub.seen.clone()
    }

    fn comments(&self) -> Vec<(u64, String, String)> {
        self.hub.lock().unwrap().comments.clone()
    }

    fn github(&self) -> GitHub {
        GitHub::new(&self.url, "o/r", Some(TOKEN.into()), false).unwrap().with_retry(Retry {
            attempts: 3,
            first_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(2),
        })
    }
}

/// Reads one HTTP/1.1 request, answers it, closes the connection.
async fn serve(mut stream: tokio::net::TcpStream, hub: Arc<Mutex<Hub>>) -> std::io::Result<()> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (method, path) = (first.next().unwrap_or_default().to_string(), first.next().unwrap_or_default().to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())))
        .collect();
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let length: usize = header("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    while data.len() < head_end + length {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let body = (length > 0).then(|| serde_json::from_slice::<Value>(&data[head_end..head_end + length]).unwrap());
    let (status, extra, answer) = {
        let mut hub = hub.lock().unwrap();
        if header("accept").as_deref() != Some("application/vnd.github+json")
            || header("x-github-api-version").as_deref() != Some("2022-11-28")
            || !header("user-agent").unwrap_or_default().starts_with("sandbench/")
        {
            hub.header_errors.push(format!("{method} {path}: {headers:?}"));
        }
        hub.seen.push(Seen {
            method: method.clone(),
            path: path.clone(),
            auth: header("authorization"),
            body: body.clone(),
        });
        answer(&mut hub, &method, &path, body)
    };
    let text = answer.to_string();
    let mut response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        text.len()
    );
    for (k, v) in extra {
        response.push_str(&format!("{k}: {v}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(&text);
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// What GitHub would answer (or the fault queued for this request).
fn answer(hub: &mut Hub, method: &str, path: &str, body: Option<Value>) -> (u16, Vec<(&'static str, String)>, Value) {
    let fault = hub.faults.front().is_some_and(|f| f.method == method && path.starts_with(f.path));
    let fault = if fault { hub.faults.pop_front() } else { None };
    if let Some(f) = &fault
        && !f.apply
    {
        return (f.status, f.headers.clone(), json!({"message": "stand-in fault"}));
    }
    let (status, value) = route(hub, method, path, body);
    match fault {
        Some(f) => (f.status, f.headers, json!({"message": "stand-in fault after the change"})),
        None => (status, Vec::new(), value),
    }
}

fn route(hub: &mut Hub, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let body_text = || body.as_ref().and_then(|b| b["body"].as_str()).unwrap_or_default().to_string();
    match (method, path) {
        ("GET", "/repos/o/r/pulls/7") => {
            (200, json!({"number": 7, "state": if hub.open {"open"} else {"closed"}, "head": {"sha": hub.head}}))
        }
        ("GET", p) if p.starts_with("/repos/o/r/issues/7/comments?per_page=100&page=") => {
            let page: usize = p.rsplit('=').next().unwrap().parse().unwrap();
            let items: Vec<Value> = hub
                .comments
                .iter()
                .skip((page - 1) * 100)
                .take(100)
                .map(|(id, login, body)| json!({"id": id, "user": {"login": login}, "body": body}))
                .collect();
            (200, Value::Array(items))
        }
        ("GET", p) if p.starts_with("/repos/o/r/issues/7/events?per_page=100&page=") => {
            let page: usize = p.rsplit('=').next().unwrap().parse().unwrap();
            (200, Value::Array(hub.events.iter().skip((page - 1) * 100).take(100).cloned().collect()))
        }
        ("POST", "/repos/o/r/issues/7/comments") => {
            hub.next_id += 1;
            let id = hub.next_id;
            hub.comments.push((id, BOT.into(), body_text()));
            (201, json!({"id": id}))
        }
        ("PATCH", p) if p.starts_with("/repos/o/r/issues/comments/") => {
            let id: u64 = p.rsplit('/').next().unwrap().parse().unwrap();
            let text = body_text();
            match hub.comments.iter_mut().find(|c| c.0 == id) {
                Some(c) => {
                    c.2 = text;
                    (200, json!({"id": id}))
                }
                None => (404, json!({"message": "Not Found"})),
            }
        }
        ("POST", p) if p.starts_with("/repos/o/r/statuses/") => {
            hub.statuses.push(body.unwrap_or_default());
            (201, json!({}))
        }
        _ => (404, json!({"message": "Not Found"})),
    }
}

/// A run directory as `sandbench run` leaves it (report.json and report.md), for `head`.
fn run_dir(root: &Path, run_id: &str, head: &str) -> std::path::PathBuf {
    let dir = root.join(run_id);
    std::fs::create_dir_all(&dir).unwrap();
    let report: sandbench::report::Report = serde_json::from_value(json!({
        "schema_version": 1, "run_id": run_id, "spec_name": "demo", "status": "completed",
        "base": {"rev": "main", "commit": BASE}, "head": {"rev": "pr", "commit": head},
        "image": "node:24-bookworm", "resources": {"cpus": 2.0, "memory_bytes": 2_000_000_000u64, "disk_gb": 10.0},
        "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:20:00Z", "failure_limit": 2,
        "budget_usd": null, "metrics": [], "expected": {},
        "base_side": {"metrics": {}, "facts": {}}, "head_side": {"metrics": {}, "facts": {}},
        "sandboxes": [], "errors": [], "warnings": []
    }))
    .unwrap();
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    std::fs::write(dir.join("report.md"), sandbench::report::markdown::render(&report)).unwrap();
    dir
}

fn target(attempt: u32) -> Target {
    Target {
        forge: "github".into(),
        repository: "o/r".into(),
        pull_request: 7,
        attempt,
        run_url: Some("https://github.com/o/r/actions/runs/42".into()),
        head: Some(HEAD.into()),
        base: Some(BASE.into()),
    }
}

fn publication(root: &Path, run_id: &str, attempt: u32) -> Publication {
    Publication::from_run_dir(&run_dir(root, run_id, HEAD), &target(attempt)).unwrap()
}

fn status_body(description: &str) -> Value {
    json!({
        "state": "success",
        "context": "sandbench/demo",
        "description": description,
        "target_url": "https://github.com/o/r/actions/runs/42",
    })
}

const PULL: &str = "/repos/o/r/pulls/7";
const COMMENTS: &str = "/repos/o/r/issues/7/comments?per_page=100&page=1";
const POST_COMMENT: &str = "/repos/o/r/issues/7/comments";

#[tokio::test]
async fn the_first_comment_is_created_with_a_status() {
    let tmp = tempfile::tempdir().unwrap();
    let gh = StandIn::start(HEAD, &[("alice", "Looks good")]).await;
    let p = publication(tmp.path(), "20260101-100000-aaaaaa", 1);
    let outcome = publish(&gh.github(), 7, &p, BOT, true).await.unwrap();
    assert_eq!(outcome.action, Action::Create);
    assert!(outcome.status_set);
    let status_path = format!("/repos/o/r/statuses/{HEAD}");
    assert_eq!(
        gh.seen(),
        [
            seen("GET", PULL, None),
            seen("GET", COMMENTS, None),
            seen("POST", POST_COMMENT, Some(json!({"body": p.body}))),
            seen("POST", &status_path, Some(status_body("completed: 0 regressed · 0 improved · 0 no clear change"))),
        ]
    );
    assert!(p.body.starts_with("<!-- sandbench:v1 -->\n<!-- run:20260101-100000-aaaaaa:1 head:"));
    assert!(p.body.contains("(https://github.com/o/r/actions/runs/42)"));
    assert_eq!(gh.comments().last().unwrap().2, p.body);
}

#[tokio::test]
async fn our_sticky_comment_is_updated_and_no_one_elses() {
    let tmp = tempfile::tempdir().unwrap();
    let older = publication(tmp.path(), "20260101-090000-aaaaaa", 1);
    // A forged marker from a newer run, by someone else: it must not stop or receive the update.
    let forged = publication(tmp.path(), "20990101-000000-ffffff", 9).body;
    let other_spec = older.body.replace("### demo performance", "### other performance");
    let gh = StandIn::start(HEAD, &[(BOT, &older.body), ("mallory", &forged), (BOT, &other_spec)]).await;
    let p = publication(tmp.path(), "20260101-100000-bbbbbb", 1);
    let outcome = publish(&gh.github(), 7, &p, BOT, true).await.unwrap();
    assert_eq!(outcome.action, Action::Update(100));
    let seen = gh.seen();
    assert_eq!(seen[2], seen_patch(100, &p.body));
    assert_eq!(seen.len(), 4, "{seen:?}");
    let comments = gh.comments();
    assert_eq!(comments[0].2, p.body);
    assert_eq!((comments[1].2.as_str(), comments[2].2.as_str()), (forged.as_str(), other_spec.as_str()));
    // Publishing the same again changes nothing but the status.
    let again = publish(&gh.github(), 7, &p, BOT, true).await.unwrap();
    assert_eq!(again.action, Action::Unchanged(100));
    let seen = gh.seen();
    let methods: Vec<&str> = seen[4..].iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["GET", "GET", "POST"]);
    assert!(seen[6].path.starts_with("/repos/o/r/statuses/"));
}

fn seen_patch(id: u64, body: &str) -> Seen {
    seen("PATCH", &format!("/repos/o/r/issues/comments/{id}"), Some(json!({"body": body})))
}

#[tokio::test]
async fn a_stale_run_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // The pull request moved on to a newer head, whose run has already published.
    let newer = Publication::from_run_dir(
        &run_dir(tmp.path(), "20260101-080000-cccccc", NEWER),
        &Target { head: Some(NEWER.into()), ..target(1) },
    )
    .unwrap();
    let gh = StandIn::start(NEWER, &[(BOT, &newer.body)]).await;
    let p = publication(tmp.path(), "20260101-100000-aaaaaa", 1);
    let outcome = publish(&gh.github(), 7, &p, BOT, true).await.unwrap();
    assert!(
        matches!(&outcome.action, Action::Refuse(why) if why.starts_with("stale: the pull request's head is now 3333"))
    );
    let requests = gh.seen();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[0], seen("GET", PULL, None));
    assert_eq!(requests[1].path, format!("/repos/o/r/statuses/{HEAD}"), "the status is about the run's own commit");
    assert_eq!(gh.comments()[0].2, newer.body);

    // Same head, but a later attempt already published: nothing is written, not even the status.
    let later = publication(tmp.path(), "20260101-110000-dddddd", 2);
    let gh = StandIn::start(HEAD, &[(BOT, &later.body)]).await;
    let outcome = publish(&gh.github(), 7, &p, BOT, true).await.unwrap();
    assert!(matches!(&outcome.action, Action::Refuse(why) if why.contains("a newer run of this head")), "{outcome}");
    assert!(!outcome.status_set);
    assert_eq!(gh.seen(), [seen("GET", PULL, None), seen("GET", COMMENTS, None)]);
    assert_eq!(gh.comments()[0].2, later.body);
}

#[tokio::test]
async fn a_newer_attempt_replaces_the_comment() {
    let tmp = tempfile::tempdir().unwrap();
    let first = publication(tmp.path(), "20260101-100000-aaaaaa", 1);
    let gh = StandIn::start(HEAD, &[(BOT, &first.body)]).await;
    let rerun = publication(tmp.path(), "20260101-103000-bbbbbb", 2);
    assert!(rerun.body.contains("<!-- run:20260101-103000-bbbbbb:2 head:"));
    let outcome = publish(&gh.github(), 7, &rerun, BOT, true).await.unwrap();
    assert_eq!(outcome.action, Action::Update(100));
    assert_eq!(gh.seen()[2], seen_patch(100, &rerun.body));
    // And the first attempt, finishing late, cannot put itself back.
    let late = publish(&gh.github(), 7, &first, BOT, true).await.unwrap();
    assert!(matches!(late.action, Action::Refuse(_)), "{late}");
    assert_eq!(gh.comments()[0].2, rerun.body);
}

#[tokio::test]
async fn a_502_is_retried_and_a_lost_create_is_not_posted_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let gh = StandIn::start(HEAD, &[]).await;
    gh.fault("GET", PULL, 502, &[], false);
    gh.fault("POST", POST_COMMENT, 502, &[], true); // created, but the answer was a 502
    gh.fault("POST", "/repos/o/r/statuses/", 429, &[("retry-after", "0")], false);
    let p = publication(tmp.path(), "20260101-100000-aaaaaa", 1);
    let outcome = publish(&gh.github(), 7, &p, BOT, true).await.unwrap();
    assert_eq!(outcome.action, Action::Create);
    let status_path = format!("/repos/o/r/statuses/{HEAD}");
    let status = Some(status_body("completed: 0 regressed · 0 improved · 0 no clear change"));
    assert_eq!(
        gh.seen(),
        [
            seen("GET", PULL, None),
            seen("GET", PULL, None),
            seen("GET", COMMENTS, None),
            seen("POST", POST_COMMENT, Some(json!({"body": p.body}))),
            seen("GET", COMMENTS, None),
            seen("POST", &status_path, status.clone()),
            seen("POST", &status_path, status),
        ]
    );
    assert_eq!(gh.comments().len(), 1);

    // A create that failed before taking effect is sent again after a look.
    let gh = StandIn::start(HEAD, &[]).await;
    gh.fault("POST", POST_COMMENT, 502, &[], false);
    publish(&gh.github(), 7, &p, BOT, false).await.unwrap();
    let methods: Vec<String> = gh.seen().iter().map(|s| format!("{} {}", s.method, s.path)).collect();
    assert_eq!(
        methods,
        [
            format!("GET {PULL}"),
            format!("GET {COMMENTS}"),
            format!("POST {POST_COMMENT}"),
            format!("GET {COMMENTS}"),
            format!("POST {POST_COMMENT}")
        ]
    );
    assert_eq!(gh.comments().len(), 1);
}

#[tokio::test]
async fn retries_are_bounded_and_refusals_are_not_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let p = publication(tmp.path(), "20260101-100000-aaaaaa", 1);
    let gh = StandIn::start(HEAD, &[]).await;
    for _ in 0..5 {
        gh.fault("GET", PULL, 503, &[], false);
    }
    let err = publish(&gh.github(), 7, &p, BOT, true).await.unwrap_err().to_string();
    assert!(err.contains("503") && err.contains("gave up after 3 tries"), "{err}");
    assert_eq!(gh.seen().len(), 3);

    let gh = StandIn::start(HEAD, &[]).await;
    gh.fault("GET", PULL, 403, &[("x-ratelimit-remaining", "12")], false);
    let err = publish(&gh.github(), 7, &p, BOT, true).await.unwrap_err().to_string();
    assert!(err.contains("403") && err.contains("pull-requests: write"), "{err}");
    assert_eq!(gh.seen().len(), 1);

    // A rate limit asking for longer than allowed fails at once, saying so.
    let gh = StandIn::start(HEAD, &[]).await;
    gh.fault("GET", PULL, 429, &[("retry-after", "3600")], false);
    let err = publish(&gh.github(), 7, &p, BOT, true).await.unwrap_err().to_string();
    assert!(err.contains("asks to wait 3600 s"), "{err}");
}

#[tokio::test]
async fn a_refused_comment_still_sets_the_status_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let p = publication(tmp.path(), "20260101-100000-aaaaaa", 1);
    // GitHub refuses the comment (422, e.g. a body over its limit): the status is set anyway.
    let gh = StandIn::start(HEAD, &[]).await;
    gh.fault("POST", POST_COMMENT, 422, &[], false);
    let err = publish(&gh.github(), 7, &p, BOT, true).await.unwrap_err();
    let text = format!("{err:#}");
    assert!(text.starts_with("the comment was not posted; the commit status was set (success: completed"), "{text}");
    assert!(text.contains("422") && text.contains("GitHub refused the content"), "{text}");
    assert!(gh.comments().is_empty());
    let statuses = gh.hub.lock().unwrap().statuses.clone();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(statuses[0]["state"], "success");
    let last = gh.seen().pop().unwrap();
    assert_eq!((last.method.as_str(), last.path), ("POST", format!("/repos/o/r/statuses/{HEAD}")));

    // An update refused the same way, and a status refused too: both said.
    let ours = format!("{}older text\n", p.body);
    let gh = StandIn::start(HEAD, &[(BOT, &ours)]).await;
    gh.fault("PATCH", "/repos/o/r/issues/comments/", 422, &[], false);
    gh.fault("POST", "/repos/o/r/statuses/", 422, &[], false);
    let text = format!("{:#}", publish(&gh.github(), 7, &p, BOT, true).await.unwrap_err());
    assert!(text.contains("the comment was not posted, and the commit status was not set either: POST"), "{text}");
    assert!(text.contains("PATCH ") && text.contains("422"), "{text}");
}

/// The `sandbench` binary with a clean GitHub environment.
fn sandbench(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench"));
    cmd.args(args);
    for var in [
        "GITHUB_ACTIONS",
        "GITHUB_TOKEN",
        "GITHUB_API_URL",
        "GITHUB_REPOSITORY",
        "GITHUB_RUN_ATTEMPT",
        "GITHUB_RUN_ID",
        "GITHUB_SERVER_URL",
        "GITHUB_OUTPUT",
        "GITHUB_EVENT_PATH",
        "GITHUB_EVENT_NAME",
        "SANDBENCH_BOT_LOGIN",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().unwrap()
}

#[tokio::test]
async fn a_dry_run_prints_the_requests_and_sends_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = run_dir(tmp.path(), "20260101-100000-aaaaaa", HEAD);
    // A comment that would drive a terminal (a title, an OSC 52 clipboard write, a bell): what
    // the dry run prints of it cannot.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    std::fs::write(dir.join("report.md"), format!("{md}\n\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\n")).unwrap();
    // Nothing listens on this address: a request sent would fail the command.
    let out = sandbench(
        &["publish", dir.to_str().unwrap(), "--repo", "o/r", "--pr", "7", "--dry-run"],
        &[("GITHUB_API_URL", "http://127.0.0.1:9"), ("GITHUB_RUN_ATTEMPT", "2")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for byte in [0x1b, 0x07, b'\r'] {
        assert!(
            !out.stdout.contains(&byte) && !out.stderr.contains(&byte),
            "byte {byte:#04x} reached the terminal: {stdout:?}"
        );
    }
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase())).collect();
    assert_eq!(
        lines,
        [
            "GET http://127.0.0.1:9/repos/o/r/pulls/7",
            "GET http://127.0.0.1:9/repos/o/r/issues/7/comments?per_page=100&page=1",
            "POST http://127.0.0.1:9/repos/o/r/issues/7/comments",
            &format!("POST http://127.0.0.1:9/repos/o/r/statuses/{HEAD}"),
        ]
    );
    assert!(stdout.starts_with("dry run: nothing was sent"), "{stdout}");
    assert!(stdout.contains(r#""body": "<!-- sandbench:v1 -->\n<!-- run:20260101-100000-aaaaaa:2 head:"#), "{stdout}");
    assert!(stdout.contains(r#""state": "success""#), "{stdout}");
    assert!(stdout.trim_end().ends_with("pull request #7 of o/r: comment created; commit status set"), "{stdout}");

    // With a token the reads are sent (and answered), the writes are not.
    let gh = StandIn::start(HEAD, &[]).await;
    let url = gh.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        sandbench(
            &["publish", dir.to_str().unwrap(), "--repo", "o/r", "--pr", "7", "--dry-run"],
            &[("GITHUB_API_URL", &url), ("GITHUB_TOKEN", TOKEN)],
        )
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(gh.seen(), [seen("GET", PULL, None), seen("GET", COMMENTS, None)]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("dry run: the reads below were sent"));
    assert!(gh.comments().is_empty());
}

#[tokio::test]
async fn publish_without_a_token_or_a_target_says_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = run_dir(tmp.path(), "20260101-100000-aaaaaa", HEAD);
    let d = dir.to_str().unwrap();
    let err = |out: std::process::Output| (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string());
    let (code, text) = err(sandbench(&["publish", d, "--repo", "o/r", "--pr", "7"], &[]));
    assert_eq!(code, Some(1));
    assert!(text.contains("GITHUB_TOKEN is not set"), "{text}");
    let (_, text) = err(sandbench(&["publish", d, "--pr", "7", "--dry-run"], &[]));
    assert!(text.contains("no repository: pass --repo"), "{text}");
    let (_, text) = err(sandbench(&["publish", d, "--repo", "o/r", "--dry-run"], &[]));
    assert!(text.contains("no pull request: pass --pr"), "{text}");
    // forge.json names the pull request; a different --pr is refused.
    std::fs::write(dir.join("forge.json"), serde_json::to_string(&target(1)).unwrap()).unwrap();
    let (_, text) = err(sandbench(&["publish", d, "--pr", "8", "--dry-run"], &[]));
    assert!(text.contains("--pr 8 differs from 7"), "{text}");
}

/// A pull request event as GitHub writes it (the fields sandbench reads, and a few more).
fn event(association: &str, head_repo: &str) -> Value {
    event_at(association, head_repo, HEAD, BASE)
}

fn event_at(association: &str, head_repo: &str, head: &str, base: &str) -> Value {
    json!({
        "action": "opened",
        "number": 7,
        "pull_request": {
            "number": 7, "state": "open", "author_association": association,
            "user": {"login": "mallory"},
            "head": {"sha": head, "ref": "patch-1", "repo": {"full_name": head_repo}},
            "base": {"sha": base, "ref": "main", "repo": {"full_name": "o/r"}},
            "labels": []
        },
        "repository": {"full_name": "o/r"},
        "sender": {"login": "mallory"}
    })
}

#[tokio::test]
async fn fork_code_is_refused_by_the_gate_and_the_comment_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let event_path = tmp.path().join("event.json");
    std::fs::write(&event_path, event("CONTRIBUTOR", "mallory/r").to_string()).unwrap();
    let output = tmp.path().join("output");
    let runs = tmp.path().join("runs");
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/bench.toml");
    let gh = StandIn::start(HEAD, &[]).await;
    let out = ci(&gh, &event_path, &output, &[spec.to_str().unwrap(), "--out", runs.to_str().unwrap()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let reason = "the code comes from the fork mallory/r and @mallory (contributor) is not trusted; a maintainer \
                  can allow this head by applying the sandbench:trusted label";
    assert!(stderr.contains(reason), "{stderr}");
    assert!(!runs.exists(), "nothing ran");
    let seen = gh.seen();
    assert!(seen.iter().all(|s| s.auth.as_deref() == Some("Bearer t0k-secret")), "{seen:?}");
    let writes: Vec<&Seen> = seen.iter().filter(|s| s.method != "GET").collect();
    assert_eq!(writes.len(), 2, "{seen:?}");
    assert_eq!(writes[0].path, POST_COMMENT);
    let body = writes[0].body.as_ref().unwrap()["body"].as_str().unwrap();
    assert!(body.contains("### demo performance — pending-trust"), "{body}");
    assert!(body.contains(&format!("head:{HEAD}")), "{body}");
    assert!(body.contains("This pull request's code was not run: the code comes from the fork mallory/r"), "{body}");
    assert!(body.contains("(https://github.com/o/r/actions/runs/42)"), "{body}");
    assert_eq!(writes[1].path, format!("/repos/o/r/statuses/{HEAD}"));
    assert_eq!(writes[1].body.as_ref().unwrap()["state"], "pending");
    let outputs = std::fs::read_to_string(&output).unwrap();
    assert!(outputs.contains("allowed=false\n") && outputs.contains(&format!("head={HEAD}\n")), "{outputs}");
}

/// The trust label applied to a fork's head at 12:00:05, the fork last pushed to at `pushed_at`.
fn labeled_event(head: &str, pushed_at: &str) -> Value {
    let mut e = event_at("CONTRIBUTOR", "mallory/r", head, BASE);
    e["action"] = "labeled".into();
    e["label"] = json!({"name": "sandbench:trusted"});
    e["sender"] = json!({"login": "maint"});
    e["pull_request"]["head"]["repo"]["pushed_at"] = pushed_at.into();
    e
}

#[tokio::test]
async fn a_label_on_an_older_head_is_refused_and_one_on_the_current_head_runs_it() {
    let tmp = tempfile::tempdir().unwrap();
    let event_path = tmp.path().join("event.json");
    let output = tmp.path().join("output");
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/bench.toml");
    let label =
        json!({"event": "labeled", "label": {"name": "sandbench:trusted"}, "created_at": "2026-03-02T12:00:05Z"});
    let other = json!({"event": "labeled", "label": {"name": "bug"}, "created_at": "2026-03-02T13:00:00Z"});
    // The label was applied to HEAD; the pull request has moved on to NEWER since.
    std::fs::write(&event_path, labeled_event(HEAD, "2026-03-02T11:00:00Z").to_string()).unwrap();
    let gh = StandIn::start(NEWER, &[]).await;
    gh.hub.lock().unwrap().events = vec![other.clone(), label.clone()];
    let out = ci(&gh, &event_path, &output, &[spec.to_str().unwrap(), "--gate-only"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "the sandbench:trusted label was applied to 222222222222, but the pull request's head is now 333333333333"
        ),
        "{stderr}"
    );
    let seen: Vec<String> = gh.seen().iter().map(|s| format!("{} {}", s.method, s.path)).collect();
    assert!(seen.contains(&"GET /repos/o/r/issues/7/events?per_page=100&page=1".to_string()), "{seen:?}");
    assert!(std::fs::read_to_string(&output).unwrap().contains("allowed=false\n"));

    // The current head, labeled an hour after the fork's last push: allowed.
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "the fork's change"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let mut event = labeled_event(&head, "2026-03-02T11:00:00Z");
    event["pull_request"]["base"]["sha"] = base.clone().into();
    std::fs::write(&event_path, event.to_string()).unwrap();
    let gh = StandIn::start(&head, &[]).await;
    gh.hub.lock().unwrap().events = vec![label, other];
    let checkout = repo.to_str().unwrap();
    let out = ci(&gh, &event_path, &output, &[spec.to_str().unwrap(), "--checkout", checkout, "--gate-only"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("@maint applied the sandbench:trusted label to this head"), "{stderr}");
    assert!(stderr.contains("3605 s after it was pushed"), "{stderr}");
}

/// `sandbench ci ARGS` as GitHub Actions runs it, against the stand-in.
async fn ci(gh: &StandIn, event: &Path, output: &Path, args: &[&str]) -> std::process::Output {
    let env: Vec<(String, String)> = [
        ("GITHUB_API_URL", gh.url.as_str()),
        ("GITHUB_TOKEN", TOKEN),
        ("GITHUB_EVENT_NAME", "pull_request_target"),
        ("GITHUB_EVENT_PATH", event.to_str().unwrap()),
        ("GITHUB_OUTPUT", output.to_str().unwrap()),
        ("GITHUB_REPOSITORY", "o/r"),
        ("GITHUB_SERVER_URL", "https://github.com"),
        ("GITHUB_RUN_ID", "42"),
        ("GITHUB_RUN_ATTEMPT", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let args: Vec<String> = std::iter::once("ci").chain(args.iter().copied()).map(str::to_string).collect();
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        sandbench(&args, &env)
    })
    .await
    .unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn a_trusted_head_gets_the_merge_base_the_outputs_and_a_running_notice() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "fork point"]);
    let fork_point = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "the change"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "main moved on"]);
    let tip = git(&repo, &["rev-parse", "HEAD"]);
    let event_path = tmp.path().join("event.json");
    std::fs::write(&event_path, event_at("MEMBER", "o/r", &head, &tip).to_string()).unwrap();
    let output = tmp.path().join("output");
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/bench.toml");
    let gh = StandIn::start(&head, &[]).await;
    let checkout = repo.to_str().unwrap();
    let out = ci(&gh, &event_path, &output, &[spec.to_str().unwrap(), "--checkout", checkout, "--gate-only"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("is allowed (@mallory (member) is trusted in o/r)"), "{stderr}");
    let outputs = std::fs::read_to_string(&output).unwrap();
    assert_eq!(
        outputs,
        format!("allowed=true\nhead={head}\nbase={fork_point}\npr=7\nreason=@mallory (member) is trusted in o/r\n")
    );
    let seen = gh.seen();
    let comment = seen.iter().find(|s| s.path == POST_COMMENT).expect("a notice");
    let body = comment.body.as_ref().unwrap()["body"].as_str().unwrap();
    assert!(body.contains("### demo performance — running"), "{body}");
    assert!(body.contains(&format!("compared with base `{}`", &fork_point[..8])), "{body}");
    let status = seen.iter().find(|s| s.path.starts_with("/repos/o/r/statuses/")).unwrap();
    assert_eq!(status.path, format!("/repos/o/r/statuses/{head}"));
    assert_eq!(status.body.as_ref().unwrap()["state"], "pending");

    // A head the checkout does not have: a clear error naming what to fetch.
    let missing = "4444444444444444444444444444444444444444";
    std::fs::write(&event_path, event_at("MEMBER", "o/r", missing, &tip).to_string()).unwrap();
    let out = ci(&gh, &event_path, &output, &[spec.to_str().unwrap(), "--checkout", checkout, "--gate-only"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("the pull request's head {missing} is not in")), "{stderr}");
    assert!(stderr.contains("git fetch origin"), "{stderr}");
}

/// In GitHub Actions, `publish` takes the repository, attempt and run link from the workflow's
/// environment and the pull request and head from its command line: a `forge.json` forged in a
/// shard (another repository, a link elsewhere, a higher attempt) changes nothing, and a report of
/// another head is refused.
#[tokio::test]
async fn publish_in_actions_takes_the_target_from_the_workflow_not_from_shard_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = run_dir(tmp.path(), "20260101-100000-aaaaaa", HEAD);
    let forged = Target {
        forge: "github".into(),
        repository: "mallory/r".into(),
        pull_request: 7,
        attempt: 99,
        run_url: Some("https://evil.example/looks-green".into()),
        head: Some(HEAD.into()),
        base: Some(BASE.into()),
    };
    std::fs::write(dir.join("forge.json"), serde_json::to_string(&forged).unwrap()).unwrap();
    let gh = StandIn::start(HEAD, &[]).await;
    let run = |args: Vec<String>| {
        let url = gh.url.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            sandbench(
                &args,
                &[
                    ("GITHUB_ACTIONS", "true"),
                    ("GITHUB_API_URL", &url),
                    ("GITHUB_TOKEN", TOKEN),
                    ("GITHUB_REPOSITORY", "o/r"),
                    ("GITHUB_SERVER_URL", "https://github.com"),
                    ("GITHUB_RUN_ID", "42"),
                    ("GITHUB_RUN_ATTEMPT", "1"),
                ],
            )
        })
    };
    let d = dir.to_str().unwrap().to_string();
    let args = |extra: &[&str]| -> Vec<String> {
        ["publish", d.as_str()].iter().chain(extra).map(|a| a.to_string()).collect()
    };
    // Without the head from the workflow: refused, nothing sent.
    let out = run(args(&["--pr", "7"])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("pass --head SHA"), "{stderr}");
    // Another head than the report's: refused, nothing sent.
    let out = run(args(&["--pr", "7", "--head", NEWER])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refusing to publish another run"), "{stderr}");
    assert!(gh.seen().is_empty(), "{:?}", gh.seen());
    // The workflow's head: published to the workflow's repository, with its link and attempt.
    let out = run(args(&["--pr", "7", "--head", HEAD, "--base", BASE])).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = gh.seen();
    assert!(seen.iter().all(|s| s.path.starts_with("/repos/o/r/")), "{seen:?}");
    let comment = seen.iter().find(|s| s.path == POST_COMMENT).expect("the comment");
    let body = comment.body.as_ref().unwrap()["body"].as_str().unwrap();
    assert!(body.contains("(https://github.com/o/r/actions/runs/42)") && !body.contains("evil.example"), "{body}");
    assert!(body.contains("<!-- run:20260101-100000-aaaaaa:1 head:"), "{body}");
    let status = seen.iter().find(|s| s.path.starts_with("/repos/o/r/statuses/")).expect("the status");
    assert_eq!(status.body.as_ref().unwrap()["target_url"], "https://github.com/o/r/actions/runs/42");
}

/// A run that ends without publishing (a lost runner, a shard that failed or timed out, a full
/// disk) is concluded by `ci --failed`: the "running" notice becomes a failed one with the
/// reason and the commit status fails; results already published for the head stay.
#[tokio::test]
async fn a_run_that_did_not_finish_ends_with_a_failed_status_and_comment() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "the change"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let event_path = tmp.path().join("event.json");
    std::fs::write(&event_path, event_at("MEMBER", "o/r", &head, &base).to_string()).unwrap();
    let output = tmp.path().join("output");
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/bench.toml");
    let spec = spec.to_str().unwrap();
    let gh = StandIn::start(&head, &[]).await;
    let checkout = repo.to_str().unwrap();
    let out = ci(&gh, &event_path, &output, &[spec, "--checkout", checkout, "--gate-only"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(gh.comments()[0].2.contains("performance — running"));
    // The bench job timed out: the conclusion replaces the running notice and fails the status.
    let why = "bench failure, merge skipped, publish skipped";
    let out = ci(&gh, &event_path, &output, &[spec, "--failed", why]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let comments = gh.comments();
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(comments[0].2.contains("### demo performance — failed"), "{}", comments[0].2);
    assert!(comments[0].2.contains(&format!("The benchmark of this head did not finish: {why}.")), "{}", comments[0].2);
    let statuses = gh.hub.lock().unwrap().statuses.clone();
    assert_eq!(statuses.last().unwrap()["state"], "error", "{statuses:?}");
    assert!(statuses.last().unwrap()["description"].as_str().unwrap().starts_with("failed: "), "{statuses:?}");

    // Results published for the head: a conclusion changes neither comment nor status.
    let results = run_dir(tmp.path(), "20200101-100000-bbbbbb", &head);
    let mut target = target(1);
    target.head = Some(head.clone());
    let publication = Publication::from_run_dir(&results, &target).unwrap();
    let gh = StandIn::start(&head, &[(BOT, &publication.body)]).await;
    let out = ci(&gh, &event_path, &output, &[spec, "--failed", why]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("results for this head are already published"), "{stdout}");
    assert_eq!(gh.comments(), [(100, BOT.to_string(), publication.body.clone())]);
    assert!(gh.hub.lock().unwrap().statuses.is_empty());
}

/// The example workflow concludes a run that did not publish: a job that runs whatever happened
/// to the shards, the merge and publishing (`always()`), and only when publishing did not
/// succeed, posts the failure with `ci --failed`.
#[test]
fn the_example_workflow_concludes_a_run_that_did_not_publish() {
    let workflow = example_workflow();
    let job = job_of(&workflow, "conclude");
    let needs = job.lines().find(|l| l.trim_start().starts_with("needs:")).expect("needs");
    for other in ["gate", "bench", "merge", "publish"] {
        assert!(needs.contains(other), "{needs}");
    }
    let condition = job.lines().find(|l| l.trim_start().starts_with("if:")).expect("if");
    assert!(condition.contains("always()") && condition.contains("needs.publish.result != 'success'"), "{condition}");
    assert!(job.contains("ci \"$SPEC\" --failed"), "{job}");
    assert!(job.contains("statuses: write") && job.contains("pull-requests: write"), "{job}");
}

/// The example workflow's text.
fn example_workflow() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/github/bench.yml")).unwrap()
}

/// The job `name` of a workflow, to the next job (a line of two spaces and a name).
fn job_of<'a>(workflow: &'a str, name: &str) -> &'a str {
    let start = workflow.find(&format!("\n  {name}:\n")).unwrap_or_else(|| panic!("a {name} job"));
    let body = &workflow[start + 1..];
    let end = body
        .match_indices("\n  ")
        .map(|(i, _)| i)
        .find(|&i| body[i + 3..].starts_with(|c: char| c.is_ascii_alphabetic()))
        .unwrap_or(body.len());
    &body[..end]
}

/// Main's history in the example workflow: on a push only (no pull request's code), the pushed
/// commits recorded one sandbox each (`record`, a backfill from the head before the push),
/// one recording at a time, with no token that writes.
#[test]
fn the_example_workflow_records_the_pushed_commits_of_main_one_recording_at_a_time() {
    let workflow = example_workflow();
    let job = job_of(&workflow, "history");
    let condition = job.lines().find(|l| l.trim_start().starts_with("if:")).expect("if");
    assert!(condition.contains("github.event_name == 'push'"), "{condition}");
    assert!(job.contains("record \"$SPEC\" --backfill \"$BEFORE..HEAD\""), "{job}");
    assert!(job.contains("record \"$SPEC\" --rev HEAD") && !job.contains(" run \"$SPEC\""), "{job}");
    assert!(job.contains("group: sandbench-history") && job.contains("cancel-in-progress: false"), "{job}");
    assert!(!job.contains(": write"), "{job}");
}
