//! report.html in a real headless Chromium (Debian's `chromium`): it loads with no console
//! error, makes no request outside its own file, and shows one chart per metric with its
//! decision, interval and floor, the summary line, warnings and failed samples; its overview (the
//! forest plot) has the rows of report.json in order, each visible and linking to its card, at
//! 1280 px and at a phone's width, with screenshots of both in `target/tmp/html-report/`.

use std::collections::BTreeMap;
use std::path::Path;

use sandbench::report::{self, Report, Resources, Revision, Rule, Sample, Side, Status};
use sandbench::spec::metrics::built_in;

fn report() -> Report {
    let keys = ["cold", "warm", "install", "rss", "kernel_exec", "cold.cpu"];
    let mut base = Side::default();
    let mut head = Side::default();
    for (i, key) in keys.iter().enumerate() {
        let samples = |shift: f64| {
            (0..5)
                .map(|t| Sample {
                    trial: t,
                    sample: 0,
                    value: Some(1.0 + i as f64 + 0.1 * t as f64 + shift),
                    error: None,
                })
                .collect()
        };
        base.metrics.insert(key.to_string(), samples(0.0));
        let shift = match *key {
            "cold" => 0.5,
            "cold.cpu" => 3.0,
            _ => 0.0,
        };
        head.metrics.insert(key.to_string(), samples(shift));
    }
    head.metrics.get_mut("warm").unwrap()[4] =
        Sample { trial: 4, sample: 0, value: None, error: Some("<script>alert(1)</script>".into()) };
    Report {
        schema_version: report::SCHEMA_VERSION,
        run_id: "html-test".into(),
        spec_name: "Chart <check>".into(),
        status: Status::Partial,
        base: Revision { rev: "main".into(), commit: "a".repeat(40) },
        head: Revision { rev: "pr".into(), commit: "b".repeat(40) },
        image: "node:24-bookworm".into(),
        resources: Resources { cpus: 2.0, memory_bytes: 1 << 31, disk_gb: 10.0, disk_enforced: None },
        started_at: "2026-11-29T00:00:00Z".into(),
        finished_at: None,
        failure_limit: 2,
        budget_usd: None,
        // `cold.cpu` has samples but no definition: the report adds "Cold startup (CPU)".
        metrics: keys.iter().filter_map(|k| built_in(k)).collect(),
        expected: keys.iter().map(|k| (k.to_string(), 5)).collect::<BTreeMap<_, _>>(),
        base_side: base,
        head_side: head,
        sandboxes: Vec::new(),
        errors: vec!["head warm trial 4: <img src=\"http://example.invalid/x.png\">".into()],
        warnings: vec!["base: cannot collect the agent log <b>".into()],
        rule: Rule::Paired,
        order: Default::default(),
        attempt: 2,
        noise: None,
        sequential: None,
        shards: Vec::new(),
        comparisons: Vec::new(),
        conditions: Vec::new(),
        lens: None,
        bisections: Vec::new(),
        lens_runs: Vec::new(),
        trend: Vec::new(),
        estimates: Default::default(),
        record: false,
    }
}

fn chromium() -> &'static str {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("Chromium is needed for this test (scripts/test installs Debian's chromium)")
}

/// Headless Chromium as root on a machine without a network, with a profile of its own.
fn headless(profile: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(chromium());
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            // Nothing resolves: even Chromium's own background requests cannot leave the machine.
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

#[test]
fn the_html_report_loads_in_chromium_offline_with_one_chart_per_metric() {
    let chromium = chromium();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let report = report();
    std::fs::write(&page, report::html::render(&report)).unwrap();
    let net_log = dir.path().join("net.json");
    let output = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            // Nothing resolves: even Chromium's own background requests cannot leave the machine.
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ])
        .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
        .arg(format!("--log-net-log={}", net_log.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    let dom = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // One chart per metric (the CPU companion included), in the rendered document.
    let metrics = report.metric_defs().len();
    assert_eq!(metrics, 6);
    assert_eq!(dom.matches("<svg").count(), metrics, "{dom}");
    assert_eq!(dom.matches("<section class=\"metric\"").count(), metrics);
    assert!(dom.contains("Cold startup (CPU)"), "{dom}");
    // The summary line, warnings, failed samples, and each metric's interval and floor.
    assert!(dom.contains("Overall: 2 regressed · 0 improved · "), "{dom}");
    assert!(dom.contains("cannot collect the agent log &lt;b&gt;"), "{dom}");
    assert!(dom.contains("head warm trial 4: &lt;script&gt;alert(1)&lt;/script&gt;"), "{dom}");
    // "floor ±x%" in each metric's numbers and in its chart's floor band.
    assert_eq!(dom.matches("floor ±").count(), 2 * metrics, "{dom}");
    assert!(dom.contains("interval +") && dom.contains("minimum detectable effect"), "{dom}");
    // No console message at all (errors are logged as CONSOLE lines).
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains("CONSOLE") || l.contains("Uncaught")).collect();
    assert!(console.is_empty(), "console output: {console:?}");
    // Hostile text stayed text.
    assert!(!dom.contains("<img") && !dom.contains("<script>alert"), "{dom}");
    // Every request the page made was for the file itself. The page's requests carry its
    // (opaque, "null") origin as initiator; Chromium's own background ones are "not an origin".
    let log = std::fs::read_to_string(&net_log).unwrap();
    let log: serde_json::Value = serde_json::from_str(&log)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", log.trim_end().trim_end_matches(','))))
        .expect("a net log");
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_i64().expect("event type");
    let page_requests: Vec<String> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"].as_i64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .filter(|u| !u.starts_with("file://"))
        .collect();
    assert!(page_requests.is_empty(), "the page made requests: {page_requests:?}");
}

/// A run of 12 metrics in three groups: 2 regressed, 1 improved, 1 incomplete, 2 inconclusive
/// (noisy), the rest unchanged; CPU companions of two of them.
fn overview_report() -> Report {
    let mut report = report();
    report.status = Status::Partial;
    let keys = [
        "cold",
        "warm",
        "install",
        "rss",
        "kernel_start",
        "kernel_exec",
        "bash",
        "git_status",
        "output",
        "mixed",
        "snapshot",
        "restore",
    ];
    report.metrics = keys.iter().filter_map(|k| built_in(k)).collect();
    report.expected = keys.iter().map(|k| (k.to_string(), 6)).collect();
    report.base_side.metrics.clear();
    report.head_side.metrics.clear();
    let series = |scale: f64, noise: f64, seed: usize| -> Vec<Sample> {
        (0..6)
            .map(|t| {
                let wobble = [0.3, -0.7, 1.0, -0.2, 0.6, -1.0][(t + seed) % 6];
                Sample { trial: t as u32, sample: 0, value: Some(scale * (1.0 + noise * wobble)), error: None }
            })
            .collect()
    };
    for (i, key) in keys.iter().chain(&["cold.cpu", "bash.cpu"]).enumerate() {
        let (ratio, noise) = match *key {
            "cold" | "git_status" => (1.6, 0.01),
            "snapshot" => (0.5, 0.01),
            "kernel_exec" | "mixed" => (1.0, 0.9),
            "bash.cpu" => (2.0, 0.01),
            _ => (1.0, 0.01),
        };
        report.base_side.metrics.insert(key.to_string(), series(1.0 + i as f64, noise, i));
        report.head_side.metrics.insert(key.to_string(), series((1.0 + i as f64) * ratio, noise, i + 3));
    }
    report.head_side.metrics.get_mut("warm").unwrap()[4] =
        Sample { trial: 4, sample: 0, value: None, error: Some("timed out".into()) };
    report
}

/// What the page's script found in one frame.
#[derive(serde::Deserialize, Debug)]
struct Frame {
    width: f64,
    overflow: f64,
    rows: Vec<FoundRow>,
}

#[derive(serde::Deserialize, Debug)]
struct FoundRow {
    metric: String,
    outcome: String,
    top: f64,
    height: f64,
    name_width: f64,
    track_width: f64,
    card: bool,
}

/// The order report.json implies: the changed metrics first (regressed, improved, incomplete,
/// unavailable), then the others by group, each in report order.
fn expected_rows(json: &serde_json::Value) -> Vec<(String, String)> {
    let group_of = |key: &str| -> String {
        let stem = key.strip_suffix(".cpu").unwrap_or(key);
        let metrics = json["metrics"].as_array().unwrap();
        let def = metrics.iter().find(|m| m["key"] == key).or_else(|| metrics.iter().find(|m| m["key"] == stem));
        def.unwrap()["group"].as_str().unwrap().to_string()
    };
    let word = |o: &str| match o {
        "no_clear_change" => "no change".to_string(),
        other => other.to_string(),
    };
    let all: Vec<(String, String, String)> = json["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let key = c["key"].as_str().unwrap().to_string();
            let group = group_of(&key);
            (key, word(c["comparison"]["outcome"].as_str().unwrap()), group)
        })
        .collect();
    let changed = |o: &str| ["regressed", "improved", "incomplete", "unavailable"].contains(&o);
    let mut out: Vec<(String, String)> =
        all.iter().filter(|r| changed(&r.1)).map(|r| (r.0.clone(), r.1.clone())).collect();
    let mut groups: Vec<&str> = Vec::new();
    for r in &all {
        if !groups.contains(&r.2.as_str()) {
            groups.push(&r.2);
        }
    }
    for g in groups {
        out.extend(all.iter().filter(|r| !changed(&r.1) && r.2 == g).map(|r| (r.0.clone(), r.1.clone())));
    }
    out
}

const PROBE: &str = r#"<!doctype html><html><body>
<iframe id="wide" src="report.html" style="width:1280px;height:900px;border:0"></iframe>
<iframe id="phone" src="report.html" style="width:390px;height:900px;border:0"></iframe>
<pre id="result"></pre>
<script>
function measure(id) {
  const frame = document.getElementById(id);
  const doc = frame.contentDocument;
  const rows = [...doc.querySelectorAll('.forest a.row')].map(r => {
    const box = r.getBoundingClientRect();
    return {
      metric: r.dataset.metric, outcome: r.dataset.outcome, top: box.top, height: box.height,
      name_width: r.querySelector('.name').getBoundingClientRect().width,
      track_width: r.querySelector('.track').getBoundingClientRect().width,
      card: doc.getElementById(r.getAttribute('href').slice(1)) !== null,
    };
  });
  const root = doc.documentElement;
  return { width: root.clientWidth, overflow: root.scrollWidth - root.clientWidth, rows };
}
window.addEventListener('load', () => {
  document.getElementById('result').textContent =
    JSON.stringify({ wide: measure('wide'), phone: measure('phone') });
});
</script></body></html>"#;

#[test]
fn the_overview_has_the_rows_of_report_json_at_1280_px_and_on_a_phone() {
    let dir = tempfile::tempdir().unwrap();
    let mut report = overview_report();
    // The run's own writer: report.json and report.html from the same data.
    sandbench::run::write_reports(dir.path(), &mut report).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap()).unwrap();
    let expected = expected_rows(&json);
    let outcomes: Vec<&str> = expected.iter().map(|r| r.1.as_str()).collect();
    for o in ["regressed", "improved", "incomplete", "inconclusive", "no change"] {
        assert!(outcomes.contains(&o), "the example has a {o} row: {expected:?}");
    }
    std::fs::write(dir.path().join("probe.html"), PROBE).unwrap();
    let output = headless(&dir.path().join("profile"))
        .args(["--allow-file-access-from-files", "--virtual-time-budget=5000", "--dump-dom"])
        .arg(format!("file://{}", dir.path().join("probe.html").display()))
        .output()
        .expect("run chromium");
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    let dom = String::from_utf8_lossy(&output.stdout);
    let found = dom.split("<pre id=\"result\">").nth(1).and_then(|r| r.split("</pre>").next()).unwrap_or("");
    let frames: std::collections::BTreeMap<String, Frame> =
        serde_json::from_str(&found.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
            .unwrap_or_else(|e| panic!("the probe's result ({e}): {dom}"));
    for (name, frame) in &frames {
        let rows: Vec<(String, String)> = frame.rows.iter().map(|r| (r.metric.clone(), r.outcome.clone())).collect();
        assert_eq!(rows, expected, "{name}: the overview's rows (count, order, outcome) are report.json's");
        for (a, b) in frame.rows.iter().zip(frame.rows.iter().skip(1)) {
            assert!(b.top >= a.top + a.height - 0.5, "{name}: {} is drawn above {}", b.metric, a.metric);
        }
        for r in &frame.rows {
            assert!(r.card, "{name}: {} links to no card", r.metric);
            assert!(r.name_width > 60.0 && r.track_width > 120.0, "{name}: {r:?} is too narrow to read");
        }
        assert!(frame.overflow <= 0.0, "{name} ({} px) scrolls sideways by {} px", frame.width, frame.overflow);
    }
    assert!(frames.contains_key("wide") && frames["phone"].width <= 390.0, "{frames:?}");
    // Screenshots, for a person to look at.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-report");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(dir.path().join("report.html"), out.join("report.html")).unwrap();
    for (width, height) in [(1280, 1400), (390, 2000)] {
        let shot = out.join(format!("overview-{width}.png"));
        let _ = std::fs::remove_file(&shot);
        let output = headless(&dir.path().join(format!("profile-{width}")))
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(format!("file://{}", dir.path().join("report.html").display()))
            .output()
            .expect("run chromium");
        assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
        let png = std::fs::read(&shot).unwrap_or_default();
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "no screenshot at {}", shot.display());
        eprintln!("screenshot: {}", shot.display());
    }
}

/// A history of 12 recorded commits: `cold` (wall) steps +30 % at commit 7, its count +2 % at
/// commit 4, `warm` flat, `rss` (memory, another group) flat; one subject is hostile.
fn history() -> sandbench::history::analysis::History {
    use sandbench::history::store::{CommitInfo, Record, TrialValue};
    use sandbench::history::{analysis, series};
    let first_parents: Vec<String> =
        (0..12).map(|i| format!("{:02x}{}", 17 * i + 16, "c0ffee".repeat(7).get(..38).unwrap())).collect();
    let records: Vec<Record> = (0..12)
        .map(|i| {
            let mut values = Vec::new();
            let mut add = |metric: &str, lens: &str, trials: u32, value: &dyn Fn(u32) -> f64| {
                for t in 0..trials {
                    let (steal, throttled, flagged) = (None, None, false);
                    values.push(TrialValue {
                        metric: metric.into(),
                        lens: lens.into(),
                        trial: t,
                        value: value(t),
                        steal,
                        throttled,
                        flagged,
                    });
                }
            };
            let wobble = |t: u32| 1.0 + 0.01 * [0.3, -0.7, 1.0, -0.2, 0.6][((i as u32 + t) % 5) as usize];
            add("cold", "wall", 5, &|t| if i >= 7 { 0.52 } else { 0.4 } * wobble(t));
            add("cold.instructions", "instructions", 1, &|_| if i >= 4 { 612_000_000.0 } else { 600_000_000.0 });
            add("warm", "wall", 5, &|t| 0.2 * wobble(t));
            add("rss", "memory", 3, &|t| 80e6 * wobble(t));
            let subject =
                if i == 3 { "<script>alert(1)</script> @someone #12".to_string() } else { format!("commit {i}") };
            Record {
                record_id: format!("r{i}/base"),
                run_id: format!("r{i}"),
                origin: "base".into(),
                spec: "demo".into(),
                repository: "/repo".into(),
                commit: CommitInfo { commit: first_parents[i].clone(), committed_at: String::new(), subject },
                image: "node:24-bookworm".into(),
                machine: "m1/2 cpus/model".into(),
                setting: "1 CPU, 2 GiB, duet".into(),
                recorded_at: "2026-12-01T00:00:00Z".into(),
                values,
            }
        })
        .collect();
    let mut defs: Vec<_> = ["cold", "warm", "rss"].iter().filter_map(|k| built_in(k)).collect();
    defs.insert(
        1,
        sandbench::spec::MetricDef {
            key: "cold.instructions".into(),
            title: "Cold startup (instructions)".into(),
            unit: "M instructions".into(),
            scale: 1e-6,
            absolute: 0.0,
            relative: 0.005,
            group: "CLI".into(),
            better: sandbench::stats::Better::Lower,
        },
    );
    for def in &mut defs {
        def.absolute = 0.0;
    }
    let line = series::line(&records, Some(&first_parents));
    let all = series::series(&records, &line);
    let cx = analysis::Context {
        spec: "demo <b>",
        defs: &defs,
        noise: &|_, _| None,
        first_parents: Some(&first_parents),
        line: Some(Revision { rev: "main".into(), commit: first_parents[11].clone() }),
        generated_at: "2026-12-04T00:00:00Z".into(),
    };
    analysis::analyse(&cx, &line, &all)
}

/// What the history page's script found in one frame.
#[derive(serde::Deserialize, Debug)]
struct HistoryFrame {
    width: f64,
    overflow: f64,
    summary: String,
    cards: Vec<FoundCard>,
}

#[derive(serde::Deserialize, Debug)]
struct FoundCard {
    key: String,
    kind: String,
    group: String,
    top: f64,
    chart_width: f64,
    points: Vec<FoundPoint>,
    changes: Vec<FoundChange>,
    bands: usize,
}

#[derive(serde::Deserialize, Debug)]
struct FoundPoint {
    commit: String,
    value: f64,
    x: f64,
    y: f64,
}

#[derive(serde::Deserialize, Debug)]
struct FoundChange {
    before: String,
    after: String,
    x: f64,
}

const HISTORY_PROBE: &str = r#"<!doctype html><html><body>
<iframe id="wide" src="history.html" style="width:1280px;height:900px;border:0"></iframe>
<iframe id="phone" src="history.html" style="width:390px;height:900px;border:0"></iframe>
<pre id="result"></pre>
<script>
function centre(e) { const b = e.getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2]; }
function measure(id) {
  const doc = document.getElementById(id).contentDocument;
  const cards = [...doc.querySelectorAll('section.metric')].map(s => ({
    key: s.dataset.key, kind: s.dataset.kind,
    group: s.parentElement.previousElementSibling.textContent,
    top: s.getBoundingClientRect().top,
    chart_width: s.querySelector('svg').getBoundingClientRect().width,
    points: [...s.querySelectorAll('circle.point')].map(c => {
      const [x, y] = centre(c); return { commit: c.dataset.commit, value: +c.dataset.value, x, y };
    }),
    changes: [...s.querySelectorAll('line.change')].map(l => ({
      before: l.dataset.before, after: l.dataset.after, x: centre(l)[0] })),
    bands: s.querySelectorAll('rect.band').length,
  }));
  const root = doc.documentElement;
  return { width: root.clientWidth, overflow: root.scrollWidth - root.clientWidth,
           summary: doc.querySelector('.summary').textContent, cards };
}
window.addEventListener('load', () => {
  document.getElementById('result').textContent =
    JSON.stringify({ wide: measure('wide'), phone: measure('phone') });
});
</script></body></html>"#;

#[test]
fn the_history_page_draws_history_json_one_chart_per_metric_at_1280_px_and_on_a_phone() {
    let dir = tempfile::tempdir().unwrap();
    sandbench::history::command::write(dir.path(), &history()).unwrap();
    // Everything below is checked against what history.json says.
    let json: sandbench::history::analysis::History =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("history.json")).unwrap()).unwrap();
    let changes: usize = json.metrics.iter().map(|m| m.change_points.len()).sum();
    assert_eq!(changes, 2, "the example has its two steps: {:?}", json.metrics);
    std::fs::write(dir.path().join("probe.html"), HISTORY_PROBE).unwrap();
    let output = headless(&dir.path().join("profile"))
        .args(["--allow-file-access-from-files", "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0"])
        .arg("--dump-dom")
        .arg(format!("file://{}", dir.path().join("probe.html").display()))
        .output()
        .expect("run chromium");
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    let dom = String::from_utf8_lossy(&output.stdout);
    let found = dom.split("<pre id=\"result\">").nth(1).and_then(|r| r.split("</pre>").next()).unwrap_or("");
    let frames: BTreeMap<String, HistoryFrame> =
        serde_json::from_str(&found.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
            .unwrap_or_else(|e| panic!("the probe's result ({e}): {dom}"));
    for (name, frame) in &frames {
        assert!(
            frame.summary.starts_with(&format!("{changes} change points in {} series", json.metrics.len())),
            "{name}: {}",
            frame.summary
        );
        let cards: Vec<(&str, &str)> = frame.cards.iter().map(|c| (c.key.as_str(), c.group.as_str())).collect();
        let expected: Vec<(&str, &str)> = json.metrics.iter().map(|m| (m.key.as_str(), m.group.as_str())).collect();
        assert_eq!(cards, expected, "{name}: one chart per series, in history.json's order and groups");
        for (card, metric) in frame.cards.iter().zip(&json.metrics) {
            let at = format!("{name} {}", card.key);
            assert_eq!(
                card.kind,
                if metric.kind == sandbench::history::series::Kind::Count { "count" } else { "measured" }
            );
            let commits: Vec<&str> = card.points.iter().map(|p| p.commit.as_str()).collect();
            let json_commits: Vec<&str> = metric.points.iter().map(|p| p.commit.as_str()).collect();
            assert_eq!(commits, json_commits, "{at}: a dot per commit, in order");
            for (p, q) in card.points.iter().zip(&metric.points) {
                assert!((p.value - q.median.unwrap()).abs() <= 1e-9 * q.median.unwrap().abs(), "{at}: {p:?}");
            }
            for w in card.points.windows(2) {
                assert!(w[1].x > w[0].x, "{at}: commits go left to right");
            }
            for a in &card.points {
                for b in &card.points {
                    if a.value > b.value * (1.0 + 1e-9) {
                        assert!(a.y < b.y, "{at}: {a:?} is drawn below {b:?}");
                    }
                }
            }
            let bands =
                if metric.kind == sandbench::history::series::Kind::Measured { metric.segments.len() } else { 0 };
            assert_eq!(card.bands, bands, "{at}: a band per stretch of a measured series");
            assert_eq!(card.changes.len(), metric.change_points.len(), "{at}");
            for (c, j) in card.changes.iter().zip(&metric.change_points) {
                assert_eq!((c.before.as_str(), c.after.as_str()), (j.before_commit.as_str(), j.after_commit.as_str()));
                let x = |commit: &str| card.points.iter().find(|p| p.commit == commit).unwrap().x;
                assert!(x(&c.before) < c.x && c.x < x(&c.after), "{at}: the mark lies between its two commits");
            }
            assert!(card.chart_width > 250.0, "{at}: a chart {} px wide is too small to read", card.chart_width);
        }
        assert!(frame.overflow <= 0.0, "{name} ({} px) scrolls sideways by {} px", frame.width, frame.overflow);
    }
    // At 1280 px the charts sit side by side: a glance takes in several.
    let wide = &frames["wide"];
    assert!(wide.cards.windows(2).any(|w| (w[0].top - w[1].top).abs() < 1.0), "{wide:?}");
    assert!(frames["phone"].width <= 390.0);
    // Hostile text stayed text.
    let page = std::fs::read_to_string(dir.path().join("history.html")).unwrap();
    assert!(!page.contains("<script") && page.contains("&lt;script&gt;alert(1)"), "no script at all: {page}");
    assert!(!page.contains("src=") && !page.contains("://"), "nothing outside the page: {page}");
    let console: Vec<&str> = std::str::from_utf8(&output.stderr)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(console.is_empty(), "console output: {console:?}");
    let markdown = std::fs::read_to_string(dir.path().join("history.md")).unwrap();
    assert!(markdown.contains("| Cold startup (`cold`) | wall | +30.00 %"), "{markdown}");
    assert!(!markdown.contains("@someone") || markdown.contains("@\u{200b}someone"), "{markdown}");
    // Screenshots, for a person to look at.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-history");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(dir.path().join("history.html"), out.join("history.html")).unwrap();
    for (width, height) in [(1280, 1000), (390, 2400)] {
        let shot = out.join(format!("history-{width}.png"));
        let _ = std::fs::remove_file(&shot);
        let output = headless(&dir.path().join(format!("profile-{width}")))
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(format!("file://{}", dir.path().join("history.html").display()))
            .output()
            .expect("run chromium");
        assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
        let png = std::fs::read(&shot).unwrap_or_default();
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "no screenshot at {}", shot.display());
        eprintln!("screenshot: {}", shot.display());
    }
}
