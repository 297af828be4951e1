//! The registry bridge end to end (`sandbox.network = "registries"`), in real Docker with the
//! sandbox's network off: real `npm install` and `pip install` through the agent's loopback
//! endpoint and the controller, the timed trials served from the content cache, and the
//! hostile tries refused. The registries must answer from this machine: when they do not, the
//! tests fail saying so.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbench::observations::server::Hub;
use sandbench::observations::store::{Data, StoredBody, read_events};
use sandbench::station::sandbox;
use sandbench_proto::Phase;
use sandbench_proto::v1::PhaseStatus;
use support::{NODE_IMAGE, with_harness};

/// Everything the agent printed.
fn output_of(hub: &Hub) -> String {
    read_events(&hub.log_path())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| match &e.body {
            StoredBody::Log { data: Data::Text { text }, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// Fails, saying so, when a registry the tests need does not answer from this machine.
async fn registries_answer() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    for url in ["https://registry.npmjs.org/chalk", "https://pypi.org/simple/six/"] {
        match client.head(url).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => panic!("the registry does not answer from this machine: {url} gave {}", r.status()),
            Err(e) => panic!("the registry does not answer from this machine: {url}: {e}"),
        }
    }
}

/// A plan from `spec`, its bridge's cache in `cache`, and the hub settings that serve it.
fn plan_with_cache(spec: &str, cache: &Path) -> (sandbench::spec::Plan, sandbench::observations::server::HubConfig) {
    let mut plan = sandbench::spec::parse(Path::new("registries.toml"), spec).unwrap_or_else(|e| panic!("{e}"));
    plan.sandbox.registries.as_mut().unwrap().cache_dir = Some(cache.to_path_buf());
    let config = sandbench::station::hub_config(&plan, Duration::from_secs(30));
    (plan, config)
}

const INSTALL_SPEC: &str = r#"name = "registries"
[sandbox]
network = "registries"
[registries]
npm = "https://registry.npmjs.org/"
pypi = "https://pypi.org/simple/"
hosts = ["files.pythonhosted.org"]
[prepare]
commands = [
  # Cold: every answer from the registries; then the same install with an empty npm cache,
  # every answer from the bridge's cache. Both timed here for the figures.
  "s=$(date +%s%N); npm install --no-save --cache ~/npm-a --prefix ~/warm chalk@4.1.2; echo npm-cold-ms=$(( ($(date +%s%N) - s) / 1000000 ))",
  "s=$(date +%s%N); npm install --no-save --cache ~/npm-b --prefix ~/warm2 chalk@4.1.2; echo npm-cached-ms=$(( ($(date +%s%N) - s) / 1000000 ))",
  "python3 -m venv ~/venv && ~/venv/bin/pip install --no-cache-dir six==1.16.0",
]
[install]
command = "npm install --no-save --prefix ~/app chalk@4.1.2 && python3 -m venv ~/venv && ~/venv/bin/pip install --no-cache-dir six==1.16.0"
checks = [
  { output = "node -p \"require(process.env.HOME + '/app/node_modules/chalk/package.json').version\"", contains = "4.1.2" },
  { output = "node -p \"require(process.env.HOME + '/app/node_modules/ansi-styles/package.json').name\"", contains = "ansi-styles" },
  { output = "~/venv/bin/python -c 'import six; print(six.__version__)'", contains = "1.16.0" },
]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_and_pip_install_through_the_bridge_and_the_timed_trials_come_from_the_cache() {
    registries_answer().await;
    let cache = tempfile::tempdir().unwrap();
    let (plan, config) = plan_with_cache(INSTALL_SPEC, cache.path());
    with_harness("registries", config, move |h| async move {
        let hub = h.hub().await;
        let agent_plan = plan.agent_plan("none");
        let live = h.launch(h.request("reg", NODE_IMAGE, sandbench::provision::AgentShipping::Bind)).await;
        let id = live.sandbox.id.clone();
        let started = Instant::now();
        let steps = [(Phase::Prepare, 0), (Phase::Install, 0), (Phase::Install, 1)];
        for (name, trial) in steps {
            let done = sandbox::run_phase(&hub, &id, &agent_plan, name, trial, Duration::from_secs(600)).await.unwrap();
            if done.status != PhaseStatus::Ok {
                panic!("{name} {trial} failed: {}\n--- output ---\n{}", done.error, output_of(&hub));
            }
            eprintln!("{name} {trial}: {:.1} s", started.elapsed().as_secs_f64());
        }
        let output = output_of(&hub);
        let bridge = hub.bridge().expect("the hub serves the bridge").clone();
        let counts = bridge.counts();
        let prepare = &counts[&(id.clone(), "prepare#0".to_string())];
        assert!(prepare.requests > 10 && prepare.hits > 0 && prepare.hits < prepare.requests, "{prepare:?}");
        for trial in 0..2 {
            let c = &counts[&(id.clone(), format!("install#{trial}"))];
            assert!(c.requests >= 8, "install {trial}: {c:?}");
            assert_eq!((c.hits, c.refused), (c.requests, 0), "install {trial} is served from the cache only");
        }
        // Every request in the run directory's log, with its URL, status, bytes, cache and time.
        let log = std::fs::read_to_string(h.run_dir.path().join(sandbench::bridge::LOG_FILE)).unwrap();
        let lines: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let total: u64 = counts.values().map(|c| c.requests).sum();
        assert_eq!(lines.len() as u64, total);
        for line in &lines {
            for key in ["url", "status", "bytes", "cache", "ms", "command"] {
                assert!(line.get(key).is_some(), "{line}");
            }
        }
        let fetched =
            |host: &str| lines.iter().any(|l| l["url"].as_str().unwrap().starts_with(host) && l["status"] == 200);
        assert!(fetched("https://registry.npmjs.org/chalk/-/chalk-4.1.2.tgz"), "npm's tarball came through");
        assert!(fetched("https://files.pythonhosted.org/packages/"), "pip's wheel came through the rewritten link");
        // The report's lines: each timed trial's requests and cache hits.
        let summary = h.station.bridge_summary();
        assert!(
            summary.iter().any(|l| l.contains("install#1:") && !l.contains("timed with the network")),
            "{summary:?}"
        );
        let ms = |key: &str| -> f64 {
            let at = output.rfind(key).unwrap_or_else(|| panic!("no {key} in\n{output}")) + key.len();
            output[at..].split_whitespace().next().unwrap().parse().unwrap()
        };
        eprintln!(
            "npm install chalk@4.1.2: cold {} ms, from the bridge's cache {} ms",
            ms("npm-cold-ms="),
            ms("npm-cached-ms=")
        );
        eprintln!("bridge summary: {summary:#?}");
        h.teardown(&live.sandbox).await;
    })
    .await;
}

const HOSTILE_SPEC: &str = r#"name = "hostile-registries"
[sandbox]
network = "registries"
[registries]
npm = "https://registry.npmjs.org/"
pypi = "https://pypi.org/simple/"
hosts = ["files.pythonhosted.org"]
max_response_mb = 1
requests_per_second = 10
[prepare]
commands = ["sh /opt/sandbench/harness/tries.sh"]
[harness]
"tries.sh" = "tries.sh"
[install]
command = "true"
"#;

const TRIES: &str = r#"B=http://127.0.0.1:4873
code() { curl -s -o "$HOME/body" -w '%{http_code}' "$@"; printf ' %s' "$(head -c 300 "$HOME/body" | tr '\n' ' ')"; }
echo "try-post: $(code -X POST -d x $B/chalk)"
echo "try-put: $(code -X PUT $B/chalk)"
echo "try-host: $(code $B/_/h/example.com/)"
echo "try-proxy: $(code --proxy $B http://example.com/)"
echo "try-dots: $(code --path-as-is $B/a/../../etc/passwd)"
echo "try-encoded: $(code --path-as-is $B/a/%2e%2e/%2e%2e/etc/passwd)"
echo "try-huge: $(code $B/typescript/-/typescript-5.6.3.tgz)"
echo "try-dns: $(getent hosts registry.npmjs.org || echo none)"
echo "try-direct: $(curl -s -m 5 -o /dev/null -w '%{http_code}' https://registry.npmjs.org/chalk || true)"
echo "try-ok: $(curl -s -o /dev/null -w '%{http_code}' $B/is-number)"
for j in 1 2 3 4; do (for i in $(seq 1 25); do curl -s -o /dev/null -w '%{http_code}\n' -I $B/is-number; done > "$HOME/flood$j") & done; wait
echo "try-flood: $(cat $HOME/flood* | grep -c 429) of $(cat $HOME/flood* | wc -l) refused"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_refuses_other_methods_hosts_path_tricks_huge_answers_and_floods() {
    registries_answer().await;
    let cache = tempfile::tempdir().unwrap();
    let spec_dir = tempfile::tempdir().unwrap();
    std::fs::write(spec_dir.path().join("tries.sh"), TRIES).unwrap();
    let spec_path = spec_dir.path().join("registries.toml");
    std::fs::write(&spec_path, HOSTILE_SPEC).unwrap();
    let mut plan = sandbench::spec::load(&spec_path).unwrap_or_else(|e| panic!("{e}"));
    plan.sandbox.registries.as_mut().unwrap().cache_dir = Some(cache.path().to_path_buf());
    let config = sandbench::station::hub_config(&plan, Duration::from_secs(30));
    let plan = Arc::new(plan);
    with_harness("regtries", config, move |h| async move {
        let hub = h.hub().await;
        let live = h.launch(h.request("tries", NODE_IMAGE, sandbench::provision::AgentShipping::Bind)).await;
        let done = sandbox::run_phase(
            &hub,
            &live.sandbox.id,
            &plan.agent_plan("none"),
            Phase::Prepare,
            0,
            Duration::from_secs(300),
        )
        .await
        .unwrap();
        let output = output_of(&hub);
        assert_eq!(done.status, PhaseStatus::Ok, "{}\n{output}", done.error);
        let line = |key: &str| -> String {
            let at = output.find(&format!("{key}: ")).unwrap_or_else(|| panic!("no {key} in\n{output}"));
            output[at..].lines().next().unwrap().to_string()
        };
        eprintln!("{output}");
        assert!(
            line("try-post")
                .contains("403 sandbench registry bridge: only GET and HEAD reach the registries, not \"POST\"")
        );
        assert!(line("try-put").contains("403") && line("try-put").contains("not \"PUT\""));
        assert!(
            line("try-host").contains("403") && line("try-host").contains("\"example.com\" is not an allowed registry")
        );
        assert!(line("try-proxy").contains("403") && line("try-proxy").contains("paths only"));
        assert!(line("try-dots").contains("403") && line("try-dots").contains("dot segment"));
        assert!(line("try-encoded").contains("403") && line("try-encoded").contains("dot segment"));
        assert!(line("try-huge").contains("403") && line("try-huge").contains("larger than the bridge's bound"));
        assert_eq!(line("try-dns"), "try-dns: none", "the sandbox resolves no name");
        assert_eq!(line("try-direct"), "try-direct: 000", "the sandbox reaches no registry itself");
        assert_eq!(line("try-ok"), "try-ok: 200");
        let flood = line("try-flood");
        let refused: u32 = flood.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(refused > 0, "{flood}");
        // Nothing reached any host but the allowed registries.
        let log = std::fs::read_to_string(h.run_dir.path().join(sandbench::bridge::LOG_FILE)).unwrap();
        for l in log.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let url = v["url"].as_str().unwrap();
            assert!(url.is_empty() || url.starts_with("https://registry.npmjs.org/"), "{l}");
        }
        let summary = h.station.bridge_summary();
        assert!(
            summary.iter().any(|l| l.contains("requests refused, e.g. POST /chalk: only GET and HEAD")),
            "{summary:?}"
        );
        h.teardown(&live.sandbox).await;
    })
    .await;
}

/// `sandbench check` of a bridged spec naming no registry, started in a pull request's checkout:
/// the host's npm and pip are asked where their registries are, and nothing of the checkout runs
/// or counts (a `pip` package, a project `.npmrc`).
#[test]
fn registry_discovery_runs_no_code_of_the_working_directory_and_reads_none_of_its_settings() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("the-checkout-ran");
    let pip = dir.path().join("pip");
    std::fs::create_dir_all(pip.join("_internal/models")).unwrap();
    let hostile = format!("open({:?}, 'a').write(__name__ + '\\n')\n", ran.display().to_string());
    for module in ["__init__.py", "__main__.py", "_internal/__init__.py", "_internal/models/__init__.py"] {
        std::fs::write(pip.join(module), &hostile).unwrap();
    }
    std::fs::write(
        pip.join("_internal/models/index.py"),
        format!("{hostile}class PyPI:\n    simple_url = 'https://evil.example/simple/'\n    file_storage_domain = 'evil.example'\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join(".npmrc"), "registry=https://evil.example/npm/\n").unwrap();
    std::fs::write(dir.path().join("package.json"), "{\"name\": \"checkout\"}\n").unwrap();
    std::fs::write(
        dir.path().join("bench.toml"),
        "name = \"discovery\"\n[sandbox]\nnetwork = \"registries\"\n[install]\ncommand = \"true\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["check", "bench.toml"])
        .current_dir(dir.path())
        .env_remove("npm_config_registry")
        .env_remove("NPM_CONFIG_REGISTRY")
        .env_remove("PIP_INDEX_URL")
        .output()
        .expect("run sandbench check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let ran = std::fs::read_to_string(&ran).unwrap_or_default();
    assert!(ran.is_empty(), "the checkout's code ran on the host: {ran}");
    assert!(!stdout.contains("evil.example"), "the checkout's settings were taken:\n{stdout}");
    assert!(stdout.contains("registry bridge: npm https://"), "the host's npm registry is named:\n{stdout}");
}

/// A registry of one package, `tiny` 1.0.0, on the host's loopback: what reaches it is counted
/// by path (and the longest path that reached it kept).
struct StandIn {
    url: String,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl StandIn {
    async fn start() -> StandIn {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://127.0.0.1:{}/", listener.local_addr().unwrap().port());
        let tarball = tiny_tarball();
        let packument = serde_json::json!({
            "name": "tiny",
            "dist-tags": { "latest": "1.0.0" },
            "versions": { "1.0.0": {
                "name": "tiny", "version": "1.0.0",
                "dist": { "tarball": format!("{url}tiny/-/tiny-1.0.0.tgz"), "integrity": integrity(&tarball) },
            } },
        })
        .to_string()
        .into_bytes();
        let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let paths = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (paths, tarball, packument) = (paths.clone(), tarball.clone(), packument.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 16 << 10];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 1 << 20 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let path =
                        String::from_utf8_lossy(&request).split_whitespace().nth(1).unwrap_or_default().to_string();
                    paths.lock().unwrap().push(path.clone());
                    let (status, body) = match path.as_str() {
                        "/tiny" => ("200 OK", packument),
                        "/tiny/-/tiny-1.0.0.tgz" => ("200 OK", tarball),
                        _ => ("404 Not Found", b"{\"error\":\"Not found\"}".to_vec()),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        StandIn { url, seen }
    }
}

/// `tiny`'s tarball: `package/package.json` and `package/index.js`, gzipped.
fn tiny_tarball() -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, text) in [
        ("package/package.json", "{\"name\": \"tiny\", \"version\": \"1.0.0\", \"main\": \"index.js\"}\n"),
        ("package/index.js", "module.exports = 1;\n"),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(text.len() as u64);
        builder.append_data(&mut header, path, text.as_bytes()).unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let mut gzip = std::process::Command::new("gzip")
        .args(["-n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    std::io::Write::write_all(&mut gzip.stdin.take().unwrap(), &tar).unwrap();
    let out = gzip.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

/// npm's `dist.integrity` of `bytes`: `sha512-` and the digest in base64.
fn integrity(bytes: &[u8]) -> String {
    use sha2::Digest;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let digest = sha2::Sha512::digest(bytes);
    let mut out = String::from("sha512-");
    for chunk in digest.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

const FLOOD_SPEC: &str = r#"name = "registry-flood"
[sandbox]
network = "registries"
[registries]
npm = "NPM"
[prepare]
# The legitimate install first (it fills the cache), then 20 s of junk, as issue 39 measured:
# paths of 7,000 characters and names that do not exist, 16 at a time.
commands = [
  "npm install --no-save --prefix ~/app tiny",
  "node /opt/sandbench/harness/flood.js",
]
[harness]
"flood.js" = "flood.js"
[install]
command = "npm install --no-save --prefix ~/app tiny"
checks = [{ output = "node -p \"require(process.env.HOME + '/app/node_modules/tiny/package.json').version\"", contains = "1.0.0" }]
"#;

const FLOOD: &str = r#"const http = require('http');
const base = process.env.npm_config_registry;
const long = 'a'.repeat(7000);
const until = Date.now() + 20000;
const counts = {};
let sent = 0;
function one() {
  if (Date.now() > until) return Promise.resolve();
  const n = sent++;
  const path = n % 2 ? `${long}/${n}` : `junk-${n}`;
  return new Promise((done) => {
    const req = http.get(base + path, { agent: false }, (res) => {
      counts[res.statusCode] = (counts[res.statusCode] || 0) + 1;
      res.resume();
      res.on('end', done);
    });
    req.on('error', () => { counts.error = (counts.error || 0) + 1; done(); });
  }).then(one);
}
Promise.all(Array.from({ length: 16 }, one)).then(() => console.log(`flood: ${sent} requests ${JSON.stringify(counts)}`));
"#;

/// Issue 39's flood against a stand-in registry on the loopback: no more than the bound of
/// negative answers (`max_not_found`, 500 a sandbox by default) reaches it, nothing of the
/// 7,000-character paths at all; the sandbox's own install, before the flood and in its timed
/// trials after, succeeds; the log stays within its cap, and the report's warnings count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_junk_reaches_the_registry_only_within_its_bound_and_the_install_still_succeeds() {
    let upstream = StandIn::start().await;
    let cache = tempfile::tempdir().unwrap();
    let spec_dir = tempfile::tempdir().unwrap();
    std::fs::write(spec_dir.path().join("flood.js"), FLOOD).unwrap();
    let spec_path = spec_dir.path().join("registries.toml");
    std::fs::write(&spec_path, FLOOD_SPEC.replace("NPM", &upstream.url)).unwrap();
    let mut plan = sandbench::spec::load(&spec_path).unwrap_or_else(|e| panic!("{e}"));
    plan.sandbox.registries.as_mut().unwrap().cache_dir = Some(cache.path().to_path_buf());
    let bound = plan.sandbox.registries.as_ref().unwrap().max_not_found;
    let config = sandbench::station::hub_config(&plan, Duration::from_secs(30));
    let plan = Arc::new(plan);
    let seen = upstream.seen.clone();
    with_harness("regflood", config, move |h| async move {
        let hub = h.hub().await;
        let live = h.launch(h.request("flood", NODE_IMAGE, sandbench::provision::AgentShipping::Bind)).await;
        let id = live.sandbox.id.clone();
        let agent_plan = plan.agent_plan("none");
        for (name, trial) in [(Phase::Prepare, 0), (Phase::Install, 0), (Phase::Install, 1)] {
            let done = sandbox::run_phase(&hub, &id, &agent_plan, name, trial, Duration::from_secs(300)).await.unwrap();
            assert_eq!(done.status, PhaseStatus::Ok, "{name} {trial}: {}\n{}", done.error, output_of(&hub));
        }
        let output = output_of(&hub);
        let flood = output.lines().find(|l| l.starts_with("flood: ")).unwrap_or_else(|| panic!("{output}"));
        eprintln!("{flood}");
        let paths = seen.lock().unwrap().clone();
        let junk = paths.iter().filter(|p| p.starts_with("/junk-")).count() as u64;
        let longest = paths.iter().map(String::len).max().unwrap_or(0);
        eprintln!("{} requests reached the registry ({junk} junk), the longest path {longest} bytes", paths.len());
        assert!(junk <= bound, "{junk} junk requests reached the registry, past the bound of {bound}");
        assert!(longest < 100, "a path of {longest} bytes reached the registry");
        // The legitimate install: once in prepare (packument and tarball), then from the cache.
        let legit: Vec<&String> = paths.iter().filter(|p| p.starts_with("/tiny")).collect();
        assert_eq!(legit.len(), 2, "{legit:?}");
        let counts = hub.bridge().expect("the bridge").counts();
        for trial in 0..2 {
            let c = &counts[&(id.clone(), format!("install#{trial}"))];
            assert_eq!((c.hits, c.refused), (c.requests, 0), "install {trial} is served from the cache only: {c:?}");
        }
        // The log within its cap; the report's warnings count what was refused.
        let log = std::fs::metadata(h.run_dir.path().join(sandbench::bridge::LOG_FILE)).unwrap().len();
        assert!(log <= sandbench::bridge::log::LOG_CAP_BYTES, "{log} bytes of log");
        let summary = h.station.bridge_summary();
        eprintln!("log {log} bytes; {summary:#?}");
        assert!(
            summary.iter().any(|l| l.contains("refused by the bounds of what reaches the registries")),
            "{summary:?}"
        );
        h.teardown(&live.sandbox).await;
    })
    .await;
    drop(upstream);
}
