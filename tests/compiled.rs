//! The demo's compiled installation end to end in Docker (the reference's pull request #2248):
//! a head revision that gains the compiled build releases a single executable beside the npm
//! tarball (the optional prepare step behind its `when`), both in `SHA256SUMS`, served under
//! `releases/v1.0.0/`; its installer picks the executable and base's the script, each side's
//! format recorded and verified. And a head whose installer falls back to Node although it built
//! the executable is refused with the reference's message.

mod support;

use std::path::Path;
use std::time::Duration;

use sandbench::observations::server::HubConfig;
use sandbench::observations::store::{Data, StoredBody, read_events};
use sandbench::provision::{AgentShipping, Resources};
use sandbench::report::Status;
use sandbench::run::{RunOptions, run};
use sandbench::station::sandbox;
use sandbench_proto::Phase;
use sandbench_proto::plan::fact;
use sandbench_proto::v1::PhaseStatus;

/// The demo's spec cut to prepare, install and measure (a cold and a warm start of whichever
/// program was installed).
fn lean_spec(repo: &Path) {
    let spec = repo.join("bench.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, text.split("[[runtime.scenario]]").next().unwrap()).unwrap();
}

/// The demo repository (`base`), and `head`: the revision that gains the compiled build (the
/// scripts moved into place), then `edit`ed and committed.
fn compiled_head(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let repo = support::demo_repo(lean_spec);
    let git = |args: &str| support::git(repo.path(), args);
    git("mv compiled scripts");
    git("commit -qm 'the compiled build'");
    edit(repo.path());
    git("commit -qam edit --allow-empty");
    git("tag head");
    repo
}

/// Every log text of the sandboxes of one side (`-base`, `-head`), in order.
fn logs(run_dir: &Path, side: &str) -> String {
    read_events(&run_dir.join("observations.jsonl"))
        .unwrap()
        .into_iter()
        .filter(|e| e.sandbox.ends_with(side))
        .filter_map(|e| match e.body {
            StoredBody::Log { data: Data::Text { text }, .. } => Some(text),
            _ => None,
        })
        .collect()
}

/// The `SHA256SUMS` prepare wrote, as the agent's log quotes it: `<hex>␠␠<name>` lines.
fn sums_in(log: &str) -> Vec<(String, String)> {
    let at = log.find("SHA256SUMS (").unwrap_or_else(|| panic!("no SHA256SUMS in the log:\n{log}"));
    log[at..]
        .lines()
        .skip(1)
        .map_while(|line| {
            let (hex, name) = line.split_once("  ")?;
            (hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()))
                .then(|| (hex.to_string(), name.to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_installs_the_script_and_head_the_single_executable_it_built() {
    let repo = compiled_head(|_| {});
    let out = tempfile::tempdir().unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let options = RunOptions {
        trials: Some(2),
        run_timeout: Duration::from_secs(900),
        ledger: Some(out.path().join("ledger.sqlite")),
        ..RunOptions::new(repo.path().join("bench.toml"), "base", "head", out.path())
    };
    let result = run(options, cancel).await.unwrap();
    let report = &result.report;
    assert_eq!(result.status, Status::Completed, "errors: {:?}", report.errors);
    // Each side's facts: what it released, which optional step ran, what it installed.
    let (base, head) = (&report.base_side.facts, &report.head_side.facts);
    assert_eq!(base[fact::ARTIFACT_FORMAT], "npm-tarball");
    assert_eq!(base[fact::OPTIONAL_STEPS], "");
    assert_eq!(base[fact::INSTALLATION_FORMAT], "script");
    assert_eq!(head[fact::ARTIFACT_FORMAT], "npm-tarball+linux-x64-single-executable");
    assert_eq!(head[fact::OPTIONAL_STEPS], "compiled");
    assert_eq!(head[fact::INSTALLATION_FORMAT], "compiled");
    assert!(head["sea_node"].starts_with("v24."), "{head:?}");
    assert!(!base.contains_key("sea_node"), "a step that did not run names no version: {base:?}");
    for facts in [base, head] {
        assert_eq!(facts[fact::DEPENDENCY_INVENTORY], "ok", "{facts:?}");
        assert_eq!(facts[fact::MACHINE], "x86_64");
    }
    let inventory = result.dir.join("sandboxes").join(format!("sandbench-{}-head", report.run_id));
    let inventory: serde_json::Value =
        serde_json::from_slice(&std::fs::read(inventory.join(fact::INVENTORY_FILE)).unwrap()).unwrap();
    assert_eq!(inventory["dependencies"]["demo-cli"]["version"], "1.0.0", "{inventory}");
    // SHA256SUMS in the reference's form over both formats, sorted; bundle is their sum.
    let (base_log, head_log) = (logs(&result.dir, "-base"), logs(&result.dir, "-head"));
    let names = |sums: Vec<(String, String)>| sums.into_iter().map(|(_, name)| name).collect::<Vec<_>>();
    assert_eq!(names(sums_in(&base_log)), ["demo-cli-1.0.0.tgz"]);
    assert_eq!(names(sums_in(&head_log)), ["demo-1.0.0-linux-x64.tar.gz", "demo-cli-1.0.0.tgz"]);
    let bundle = |side: &sandbench::report::Side| side.metrics["bundle"][0].value.unwrap();
    let (base_bundle, head_bundle) = (bundle(&report.base_side), bundle(&report.head_side));
    assert!(head_bundle > base_bundle + 20e6, "the archive holds node: {base_bundle} → {head_bundle} bytes");
    assert!(head_log.contains(&format!("SHA256SUMS ({head_bundle} bytes in all)")), "{head_log}");
    assert!(head_log.contains("demo 1.0.0: the compiled release") && base_log.contains("demo 1.0.0: the npm release"));
    assert!(base_log.contains("optional step compiled: skipped"), "{base_log}");
    // Both installations counted; the executable starts, cold and warm (its daemon started from
    // itself), in every measure trial (two, and a third when the adaptive pairs add one).
    for side in [&report.base_side, &report.head_side] {
        for key in ["install", "cold", "warm"] {
            let samples = &side.metrics[key];
            let trials = if key == "install" { 2..=2 } else { 2..=3 };
            assert!(trials.contains(&samples.len()) && samples.iter().all(|s| s.value.is_some()), "{key}: {samples:?}");
        }
    }
    let markdown = std::fs::read_to_string(result.dir.join("report.md")).unwrap();
    assert!(
        markdown.contains(
            "Release: base: artifacts npm-tarball, no optional step ran, installed as script, dependency inventory ok; \
             head: artifacts npm-tarball+linux-x64-single-executable, optional steps run: compiled, installed as compiled, \
             dependency inventory ok, sea\\_node v24."
        ),
        "{markdown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_built_the_executable_but_installed_through_node_is_refused() {
    // The installer falls back to Node although the release lists the executable.
    let repo = compiled_head(|repo| {
        let path = repo.join("install.sh");
        let text = std::fs::read_to_string(&path).unwrap();
        let fallback = text.replace("then method=compiled; fi", "then method=npm; fi");
        assert_ne!(fallback, text);
        std::fs::write(&path, fallback).unwrap();
    });
    support::with_harness("fallback", HubConfig::default(), |h| async move {
        let plan = sandbench::spec::load(&repo.path().join("bench.toml")).unwrap_or_else(|e| panic!("{e}"));
        let commit = sandbench::source::resolve(repo.path(), "head").await.unwrap();
        let agent_plan = plan.agent_plan(&commit);
        let mut request = h.request("head", support::NODE_IMAGE, AgentShipping::Bind);
        request.resources = Resources {
            cpus: plan.sandbox.cpus,
            cpuset: None,
            memory_bytes: plan.sandbox.memory_bytes,
            pids_limit: plan.sandbox.pids_limit,
            disk_bytes: Some(plan.sandbox.disk_bytes()),
            io_weight: None,
        };
        let hub = h.hub().await;
        let live = h.launch(request).await;
        let id = live.sandbox.id.clone();
        sandbox::deliver_source(&*h.provisioner, &plan, &live.sandbox, &agent_plan).await.unwrap();
        let timeout = Duration::from_secs(300);
        let prepared = sandbox::run_phase(&hub, &id, &agent_plan, Phase::Prepare, 0, timeout).await.unwrap();
        assert_eq!(prepared.status, PhaseStatus::Ok, "{}", prepared.error);
        let installed = sandbox::run_phase(&hub, &id, &agent_plan, Phase::Install, 0, timeout).await.unwrap();
        h.teardown(&live.sandbox).await;
        hub.close().await;
        assert_ne!(installed.status, PhaseStatus::Ok);
        assert!(
            installed.error.contains("Expected the compiled installation, but the installer selected Node"),
            "{}",
            installed.error
        );
        let errors: Vec<String> = read_events(&hub.log_path())
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.body {
                StoredBody::Observation { metric, error: Some(error), .. } => Some(format!("{metric}: {error}")),
                _ => None,
            })
            .collect();
        assert_eq!(errors, ["install: Expected the compiled installation, but the installer selected Node"]);
        // The trial's facts say what was installed.
        let facts = h.run_dir.path().join("sandboxes").join(&id).join(fact::INSTALL_DIR).join("0.json");
        let facts: serde_json::Value = serde_json::from_slice(&std::fs::read(facts).unwrap()).unwrap();
        assert_eq!(facts[fact::INSTALLATION_FORMAT], "script");
    })
    .await;
}
