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
