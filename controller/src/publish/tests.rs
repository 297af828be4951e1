//! The publishing decisions (pure) and the run directory's reading.

use super::*;

const HEAD: &str = "2222222222222222222222222222222222222222";
const BASE: &str = "1111111111111111111111111111111111111111";

fn marker(head: &str, time: &str, attempt: u32, status: &str) -> Marker {
    Marker {
        run_id: format!("{}-{}-ab", &time[..8], &time[8..]),
        attempt,
        head: head.into(),
        time: Some(time.into()),
        spec: Some("demo".into()),
        status: Some(status.into()),
    }
}

fn comment(id: u64, author: &str, body: &str) -> Comment {
    Comment { id, author: author.into(), body: body.into() }
}

fn open_at(head: &str) -> PullState {
    PullState { open: true, head: head.into() }
}

#[test]
fn first_publication_creates() {
    let ours = marker(HEAD, "20260101100000", 1, "completed");
    assert_eq!(decide(&ours, "b", Some(&open_at(HEAD)), None), (Action::Create, true));
    // Unknown pull request state (a dry run without a token): as if current.
    assert_eq!(decide(&ours, "b", None, None), (Action::Create, true));
}

#[test]
fn a_stale_head_or_a_closed_pull_request_is_not_published() {
    let ours = marker(HEAD, "20260101100000", 1, "completed");
    let (action, status) = decide(&ours, "b", Some(&open_at(BASE)), None);
    assert_eq!(
        action,
        Action::Refuse(format!("stale: the pull request's head is now {BASE}, this run measured {HEAD}"))
    );
    assert!(status, "the status describes the run's own commit");
    let closed = PullState { open: false, head: HEAD.into() };
    assert_eq!(decide(&ours, "b", Some(&closed), None).0, Action::Refuse("the pull request is closed".into()));
}

#[test]
fn a_newer_generation_of_the_head_is_never_overwritten() {
    let ours = marker(HEAD, "20260101100000", 1, "completed");
    let c = comment(5, "bot", "old");
    let later = marker(HEAD, "20260101110000", 1, "completed");
    let (action, status) = decide(&ours, "b", Some(&open_at(HEAD)), Some((&c, &later)));
    assert!(matches!(action, Action::Refuse(ref why) if why.starts_with("a newer run of this head")), "{action:?}");
    assert!(!status);
    let same_time_higher_attempt = marker(HEAD, "20260101100000", 2, "completed");
    assert!(matches!(decide(&ours, "b", None, Some((&c, &same_time_higher_attempt))).0, Action::Refuse(_)));
    // Older generations and other heads are replaced; the same body is left alone.
    let earlier = marker(HEAD, "20260101090000", 3, "completed");
    assert_eq!(decide(&ours, "b", Some(&open_at(HEAD)), Some((&c, &earlier))), (Action::Update(5), true));
    let other_head = marker(BASE, "20270101000000", 9, "completed");
    assert_eq!(decide(&ours, "b", Some(&open_at(HEAD)), Some((&c, &other_head))), (Action::Update(5), true));
    assert_eq!(decide(&ours, "old", None, Some((&c, &earlier))), (Action::Unchanged(5), true));
}

#[test]
fn a_refusal_notice_does_not_hide_results_of_the_same_head() {
    let notice = marker(HEAD, "20260101120000", 1, "pending-trust");
    let c = comment(5, "bot", "results");
    let results = marker(HEAD, "20260101100000", 1, "completed");
    assert!(matches!(decide(&notice, "b", None, Some((&c, &results))).0, Action::Refuse(_)));
    let earlier_notice = marker(HEAD, "20260101100000", 1, "pending-trust");
    assert_eq!(decide(&notice, "b", None, Some((&c, &earlier_notice))).0, Action::Update(5));
    let old_head = marker(BASE, "20260101100000", 1, "completed");
    assert_eq!(decide(&notice, "b", None, Some((&c, &old_head))).0, Action::Update(5));
}

#[test]
fn the_sticky_comment_is_the_bots_last_for_the_spec() {
    let body = |spec: &str, run: &str| {
        format!("<!-- sandbench:v1 -->\n<!-- run:{run}:1 head:{HEAD} -->\n### {spec} performance — completed\n")
    };
    let comments = vec![
        comment(1, "github-actions[bot]", &body("demo", "20260101-000000-a")),
        comment(2, "github-actions[bot]", &body("other", "20260101-000000-b")),
        comment(3, "mallory", &body("demo", "20990101-000000-c")),
        comment(4, "github-actions[bot]", "thanks!"),
        comment(5, "GitHub-Actions[bot]", &body("demo", "20260102-000000-d")),
        comment(6, "github-actions[bot]", &format!("quoting:\n{}", body("demo", "20990101-000000-e"))),
    ];
    let (c, m) = sticky(&comments, "github-actions[bot]", Some("demo")).unwrap();
    assert_eq!((c.id, m.run_id.as_str()), (5, "20260102-000000-d"));
    assert_eq!(sticky(&comments, "github-actions[bot]", Some("other")).unwrap().0.id, 2);
    assert!(sticky(&comments, "github-actions[bot]", Some("nope")).is_none());
    assert!(sticky(&comments, "someone", Some("demo")).is_none());
}

#[test]
fn bodies_get_the_attempt_the_link_and_a_summary() {
    let body = format!(
        "<!-- sandbench:v1 -->\n<!-- run:20260101-100000-ab:1 head:{HEAD} -->\n### demo performance — completed\n\n\
         **Overall: 1 regressed · 0 improved · 2 no clear change.**\n\n{LOCAL_LINK}\n"
    );
    let target = target(3, Some("https://github.com/o/r/actions/runs/9"));
    let p = Publication::new(body, &report(Status::Completed), &target).unwrap();
    assert_eq!(p.marker.attempt, 3);
    assert!(p.body.contains("<!-- run:20260101-100000-ab:3 head:"));
    assert!(p.body.contains("[Run, logs, and downloadable raw results](https://github.com/o/r/actions/runs/9)"));
    assert!(!p.body.contains(LOCAL_LINK));
    assert_eq!(p.status.state, State::Success);
    assert_eq!(p.status.context, "sandbench/demo");
    assert_eq!(p.status.description, "completed: 1 regressed · 0 improved · 2 no clear change");
    assert_eq!(p.status.target_url.as_deref(), Some("https://github.com/o/r/actions/runs/9"));
    // No marker for this head: nothing to publish.
    let err = Publication::new("plain\n".into(), &report(Status::Completed), &target).unwrap_err();
    assert!(err.to_string().contains("no sandbench marker"), "{err}");
    assert_eq!(truncate(&"é".repeat(200), 140).chars().count(), 140);
}

#[test]
fn a_run_directory_publishes_only_the_run_its_target_names() {
    let dir = tempfile::tempdir().unwrap();
    let report = report(Status::Partial);
    std::fs::write(dir.path().join("report.json"), serde_json::to_string(&report).unwrap()).unwrap();
    let mut t = target(1, None);
    t.head = Some(HEAD.into());
    t.base = Some(BASE.into());
    let p = Publication::from_run_dir(dir.path(), &t).unwrap();
    assert_eq!(p.body, crate::report::markdown::render(&report), "rendered when report.md is missing");
    assert_eq!(p.status.state, State::Failure);
    t.head = Some(BASE.into());
    let err = Publication::from_run_dir(dir.path(), &t).unwrap_err().to_string();
    assert!(err.contains(&format!("the report's head is {HEAD} but forge.json names {BASE}")), "{err}");
    t.save(dir.path()).unwrap();
    assert_eq!(Target::load(dir.path()).unwrap(), Some(t));
    let err = Publication::from_run_dir(&dir.path().join("absent"), &target(1, None)).unwrap_err();
    assert!(format!("{err:#}").contains("absent/report.json"), "{err:#}");
}

#[test]
fn a_notice_carries_the_markers_and_the_reason() {
    let t = target(2, Some("https://github.com/o/r/actions/runs/9"));
    let p = Publication::notice("demo", "pending-trust", &t, HEAD, BASE, "not run: fork <x>");
    assert_eq!((p.marker.head.as_str(), p.marker.attempt), (HEAD, 2));
    assert_eq!(p.marker.status.as_deref(), Some("pending-trust"));
    assert!(p.body.contains("not run: fork &lt;x&gt;"), "{}", p.body);
    assert!(p.body.ends_with("[Run, logs, and downloadable raw results](https://github.com/o/r/actions/runs/9)\n"));
    assert_eq!(p.status.state, State::Pending, "waiting for a maintainer");
    assert_eq!(Publication::notice("demo", "running", &t, HEAD, BASE, "x").status.state, State::Pending);
    assert_eq!(Publication::notice("demo", "failed", &t, HEAD, BASE, "x").status.state, State::Error);
}

#[test]
fn links_are_plain() {
    assert!(check_url("https://github.com/o/r/actions/runs/1").is_ok());
    for bad in ["javascript:x", "https://x/a)b", "https://x/a b", "https://x/\n", "ftp://x"] {
        assert!(check_url(bad).is_err(), "{bad}");
    }
}

fn target(attempt: u32, run_url: Option<&str>) -> Target {
    Target {
        forge: "github".into(),
        repository: "o/r".into(),
        pull_request: 7,
        attempt,
        run_url: run_url.map(str::to_string),
        head: None,
        base: None,
    }
}

/// A report with no metrics: identity and status are what publishing reads.
pub(crate) fn report(status: Status) -> Report {
    serde_json::from_value(serde_json::json!({
        "schema_version": 1,
        "run_id": "20260101-100000-abcdef",
        "spec_name": "demo",
        "status": status,
        "base": {"rev": "main", "commit": BASE},
        "head": {"rev": "pr", "commit": HEAD},
        "image": "node:24-bookworm",
        "resources": {"cpus": 2.0, "memory_bytes": 2_000_000_000u64, "disk_gb": 10.0},
        "started_at": "2026-01-01T10:00:00Z",
        "finished_at": null,
        "failure_limit": 2,
        "budget_usd": null,
        "metrics": [],
        "expected": {},
        "base_side": {"metrics": {}, "facts": {}},
        "head_side": {"metrics": {}, "facts": {}},
        "sandboxes": [],
        "errors": [],
        "warnings": []
    }))
    .unwrap()
}

#[test]
fn what_publish_posts_fits_github_whatever_the_run_produced() {
    use crate::report::comment::{MAX_BYTES, MAX_URL_BYTES};
    // 500 warnings of 500 characters, each `|` escaped: report.md rendered at the bound, then
    // stamped with a high attempt and the longest link allowed.
    let dir = tempfile::tempdir().unwrap();
    let mut report = report(Status::Completed);
    report.warnings = (0..500).map(|i| format!("warning {i} {}", "|`@x #1 ".repeat(62))).collect();
    std::fs::write(dir.path().join("report.json"), serde_json::to_string(&report).unwrap()).unwrap();
    let url = format!("https://github.com/o/r/actions/runs/{}", "9".repeat(MAX_URL_BYTES - 36));
    assert!(check_url(&url).is_ok() && check_url(&format!("{url}9")).is_err(), "the link's room is bounded");
    let p = Publication::from_run_dir(dir.path(), &target(4_000_000_000, Some(&url))).unwrap();
    assert!(p.body.len() <= MAX_BYTES, "{}", p.body.len());
    assert!(p.body.contains(&format!("[Run, logs, and downloadable raw results]({url})")), "the run's link is live");
    assert!(p.body.contains(" of 500 warnings left out"), "{}", &p.body[..2000]);
    assert_eq!(p.marker.attempt, 4_000_000_000);
    // A notice with a huge reason: cut, markers intact.
    let n = Publication::notice("demo", "failed", &target(1, Some(&url)), HEAD, BASE, &"why ".repeat(40_000));
    assert!(n.body.len() <= MAX_BYTES && n.body.ends_with("report.html has all of it._\n"), "{}", n.body.len());
    assert_eq!(n.marker.status.as_deref(), Some("failed"));
}
