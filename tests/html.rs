//! report.html in a real headless Chromium (Debian's `chromium`): it loads with no console
//! error, makes no request outside its own file, and shows one chart per metric.

use std::collections::BTreeMap;
use std::path::Path;

use sandbench::report::{self, Report, Resources, Revision, Sample, Side, Status};
use sandbench::spec::metrics::built_in;

fn report() -> Report {
    let keys = ["cold", "warm", "install", "rss", "kernel_exec"];
    let mut base = Side::default();
    let mut head = Side::default();
    for (i, key) in keys.iter().enumerate() {
        let samples = |shift: f64| {
            (0..5)
                .map(|t| Sample { trial: t, value: Some(1.0 + i as f64 + 0.1 * t as f64 + shift), error: None })
                .collect()
        };
        base.metrics.insert(key.to_string(), samples(0.0));
        head.metrics.insert(key.to_string(), samples(if *key == "cold" { 0.5 } else { 0.0 }));
    }
    head.metrics.get_mut("warm").unwrap()[4] =
        Sample { trial: 4, value: None, error: Some("<script>alert(1)</script>".into()) };
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
        metrics: keys.iter().map(|k| built_in(k).unwrap()).collect(),
        expected: keys.iter().map(|k| (k.to_string(), 5)).collect::<BTreeMap<_, _>>(),
        base_side: base,
        head_side: head,
        sandboxes: Vec::new(),
        errors: vec!["head warm trial 4: <img src=\"http://example.invalid/x.png\">".into()],
        warnings: Vec::new(),
        comparisons: Vec::new(),
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
    // One chart per metric, in the rendered document.
    assert_eq!(dom.matches("<svg").count(), report.metrics.len(), "{dom}");
    assert_eq!(dom.matches("<section class=\"metric\"").count(), report.metrics.len());
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
