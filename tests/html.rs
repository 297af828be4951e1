//! report.html in a real headless Chromium (Debian's `chromium`): it loads with no console
//! error, makes no request outside its own file, and shows one chart per metric with its
//! decision, interval and floor, the summary line, warnings and failed samples.

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
        resources: Resources { cpus: 2.0, memory_bytes: 1 << 31, disk_gb: 10.0 },
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
        attempt: 2,
        noise: None,
        sequential: None,
        shards: Vec::new(),
        comparisons: Vec::new(),
        conditions: Vec::new(),
    }
}

#[test]
fn the_html_report_loads_in_chromium_offline_with_one_chart_per_metric() {
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("Chromium is needed for this test (scripts/test installs Debian's chromium)");
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
