//! The bridge against a stand-in registry on the loopback: what reaches it, what the cache keeps
//! for each side, and what the log holds under a flood.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A registry on 127.0.0.1 that answers GETs from its table (404 for the rest), one request a
/// connection, and counts what reaches it by path.
struct StandIn {
    url: String,
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
    total: Arc<AtomicU64>,
}

impl StandIn {
    async fn start(table: BTreeMap<String, Vec<u8>>) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://127.0.0.1:{}/", listener.local_addr().unwrap().port());
        let hits: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let total = Arc::new(AtomicU64::new(0));
        let (counted, all) = (hits.clone(), total.clone());
        let table = Arc::new(table);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (counted, all, table) = (counted.clone(), all.clone(), table.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split_whitespace().nth(1).unwrap_or_default().to_string();
                    all.fetch_add(1, Ordering::SeqCst);
                    *counted.lock().unwrap().entry(path.clone()).or_default() += 1;
                    let (status, body) = match table.get(&path) {
                        Some(body) => ("200 OK", body.clone()),
                        None => ("404 Not Found", b"{\"error\":\"Not found\"}".to_vec()),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        StandIn { url, hits, total }
    }

    fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

fn settings(npm: &str, cache: &Path) -> RegistrySettings {
    RegistrySettings {
        npm: Some(npm.to_string()),
        pypi: None,
        hosts: vec![],
        port: 4873,
        max_response_bytes: 1 << 20,
        requests_per_second: 100_000,
        upstream_per_second: 100_000,
        max_upstream_requests: 20_000,
        max_not_found: 500,
        cache_bytes: 1 << 20,
        metadata_ttl: Duration::from_secs(3600),
        cache_dir: Some(cache.to_path_buf()),
    }
}

fn ask((sandbox, side): &(String, Option<Side>), target: &str) -> Ask {
    Ask {
        sandbox: sandbox.clone(),
        side: *side,
        command: Running::Phase { phase: sandbench_proto::Phase::Install, trial: 0 },
        method: "GET".into(),
        target: target.into(),
        accept: String::new(),
    }
}

/// A run directory named `run` (the sandboxes' ids carry it).
fn run_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("run").tempdir().unwrap()
}

/// A sandbox of the run as the bridge sees its caller: its id, and the side the hub registered
/// it with.
fn sandbox(dir: &tempfile::TempDir, role: &str, side: Option<Side>) -> (String, Option<Side>) {
    (format!("sandbench-{}-{role}", dir.path().file_name().unwrap().to_string_lossy()), side)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_side_cannot_evict_what_the_other_sides_timed_trials_need() {
    // Tarballs of 300 bytes in a cache of 1,000: the head fetches three after the base's one.
    let tarball = |name: &str| {
        let mut body = name.as_bytes().to_vec();
        body.resize(300, b'x');
        (format!("/{name}/-/{name}-1.0.0.tgz"), body)
    };
    let table: BTreeMap<String, Vec<u8>> = ["a", "h1", "h2", "h3"].map(tarball).into_iter().collect();
    let upstream = StandIn::start(table).await;
    let (dir, cache) = (run_dir(), tempfile::tempdir().unwrap());
    let mut settings = settings(&upstream.url, cache.path());
    settings.cache_bytes = 1000;
    let bridge = Bridge::open(dir.path(), &settings).unwrap();
    let (base, head) = (sandbox(&dir, "base", Some(Side::Base)), sandbox(&dir, "head-r2", Some(Side::Head)));
    assert_eq!(bridge.handle(&ask(&base, "/a/-/a-1.0.0.tgz")).await.status, 200);
    for name in ["h1", "h2", "h3"] {
        // Apart in time: the least recently used body is the base's.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(bridge.handle(&ask(&head, &format!("/{name}/-/{name}-1.0.0.tgz"))).await.status, 200);
    }
    // The base's timed trial: from the cache, its preparation's answer kept.
    let again = bridge.handle(&ask(&base, "/a/-/a-1.0.0.tgz")).await;
    assert_eq!((again.status, again.cache), (200, Served::Hit));
    assert_eq!(upstream.hits("/a/-/a-1.0.0.tgz"), 1, "the base's tarball was evicted by the head's");
    // The head passed its half of the cache: said in the report, and the bound holds.
    let summary = bridge.summary();
    assert!(summary.iter().any(|l| l.contains("head's answers passed its half of registries.cache_mb")), "{summary:?}");
    let blobs: u64 =
        std::fs::read_dir(cache.path().join("blobs")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(blobs <= 1000, "the cache holds {blobs} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_reaches_the_registry_is_bounded_and_a_miss_does_not_go_out_twice() {
    let table = BTreeMap::from([("/chalk".to_string(), b"{}".to_vec())]);
    let upstream = StandIn::start(table).await;
    let (dir, cache) = (run_dir(), tempfile::tempdir().unwrap());
    let mut settings = settings(&upstream.url, cache.path());
    settings.max_not_found = 20;
    let bridge = Bridge::open(dir.path(), &settings).unwrap();
    let (base, head) = (sandbox(&dir, "base", Some(Side::Base)), sandbox(&dir, "head", Some(Side::Head)));
    // Junk of no registry's shape never leaves; a repeated miss goes out once.
    let junk = format!("/{}/1", "a".repeat(7000));
    assert_eq!(bridge.handle(&ask(&head, &junk)).await.status, 403);
    for _ in 0..5 {
        assert_eq!(bridge.handle(&ask(&head, "/no-such-package")).await.status, 404);
    }
    assert_eq!(upstream.hits("/no-such-package"), 1);
    // Distinct misses: the sandbox's bound, then the run's (twice a sandbox's).
    let mut refused = 0;
    for n in 0..100 {
        refused += u32::from(bridge.handle(&ask(&head, &format!("/missing-{n}"))).await.status == 429);
    }
    assert_eq!(upstream.total.load(Ordering::SeqCst), 20, "1 + 19 misses reach it");
    assert_eq!(refused, 81);
    for n in 0..100 {
        bridge.handle(&ask(&base, &format!("/other-{n}"))).await;
    }
    assert_eq!(upstream.total.load(Ordering::SeqCst), 40, "the run's bound");
    let summary = bridge.summary();
    assert!(summary.iter().any(|l| l.contains("refused by the bounds of what reaches the registries")), "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_requests_leave_the_log_within_its_cap_with_a_count_of_the_rest() {
    let upstream = StandIn::start(BTreeMap::new()).await;
    let (dir, cache) = (run_dir(), tempfile::tempdir().unwrap());
    let bridge = Bridge::open(dir.path(), &settings(&upstream.url, cache.path())).unwrap();
    let head = sandbox(&dir, "head", Some(Side::Head));
    const REQUESTS: u64 = 1_000_000;
    let long = format!("/{}", "b".repeat(300));
    for n in 0..REQUESTS {
        // Misses remembered (logged as answered), refusals of every kind, long targets.
        let target = match n % 3 {
            0 => "/missing",
            1 => "/a//b",
            _ => long.as_str(),
        };
        bridge.handle(&ask(&head, target)).await;
    }
    assert_eq!(upstream.total.load(Ordering::SeqCst), 1);
    let counted: u64 = bridge.counts().values().map(|c| c.requests).sum();
    assert_eq!(counted, REQUESTS);
    drop(bridge);
    let path = dir.path().join(LOG_FILE);
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size <= log::LOG_CAP_BYTES, "{LOG_FILE} holds {size} bytes, past its cap");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let logged = lines.iter().filter(|l| l.get("sandbox").is_some()).count() as u64;
    let unlogged = lines.last().and_then(|l| l["unlogged"].as_u64()).expect("the last line counts the rest");
    assert_eq!(logged + unlogged, REQUESTS);
    eprintln!("{REQUESTS} requests: {logged} logged in {size} bytes, {unlogged} counted");
}
