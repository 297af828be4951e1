//! The phases end to end: one sandbox of the node:24-bookworm image driven through every phase
//! of the demo spec (examples/demo), and every metric of the spec observed with a value.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sandbench::observations::server::HubConfig;
use sandbench::observations::store::{StoredBody, read_events};
use sandbench::provision::{AgentShipping, Resources};
use sandbench::station::sandbox;
use sandbench_proto::Phase;
use sandbench_proto::v1::PhaseStatus;
use support::{NODE_IMAGE, with_harness};

/// Everything the agent printed, for a failed phase's message.
fn output_of(hub: &sandbench::observations::server::Hub) -> String {
    read_events(&hub.log_path())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| match &e.body {
            StoredBody::Log { data: sandbench::observations::store::Data::Text { text }, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// Every observed value per metric, as (trial, value); an observed error fails the test.
fn observed_values(hub: &sandbench::observations::server::Hub) -> BTreeMap<String, Vec<(u32, f64)>> {
    let mut values: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    let mut errors = Vec::new();
    for event in read_events(&hub.log_path()).unwrap() {
        if let StoredBody::Observation { metric, trial, value, error, .. } = event.body {
            match (value, error) {
                (Some(v), _) => values.entry(metric).or_default().push((trial, v)),
                (_, Some(e)) => errors.push(format!("{metric} trial {trial}: {e}")),
                _ => {}
            }
        }
    }
    assert!(errors.is_empty(), "errors observed: {errors:#?}");
    values
}

/// The transport and ui phases' values and the files they leave.
fn assert_transport_and_ui(
    plan: &sandbench::spec::Plan,
    values: &BTreeMap<String, Vec<(u32, f64)>>,
    transcripts: &Path,
) {
    // Transport ran the benches against the source: one full-history transfer per warm
    // switch, and a 32 MiB frame decoded.
    assert_eq!(values["switch_fetch"], [(0, 1.0)]);
    assert!(values["frame_decode"][0].1 > 0.0);
    // The ui phase: every wall metric has its CPU companion; the browser's terminal and the
    // catalog daemon's socket traffic and log are kept.
    for def in plan.metrics.iter().filter(|d| d.group == "UI interactions" && d.key.ends_with("_cpu")) {
        let wall = def.key.trim_end_matches("_cpu");
        assert!(values.contains_key(wall), "{} has no wall metric {wall}", def.key);
    }
    let (first, warm) = (values["scheduled_catalog"][0].1, values["scheduled_catalog_warm"][0].1);
    assert!(
        warm < first,
        "a repeated catalog request ({warm} s) is served from the index built by the first ({first} s)"
    );
    assert!(values["ui_rss"][0].1 > 10e6, "the browser's memory: {:?}", values["ui_rss"]);
    let screen = String::from_utf8_lossy(&std::fs::read(transcripts.join("browse-0.txt")).unwrap()).to_string();
    assert!(screen.contains("▾ ui-bench-root-00") && screen.contains("ui-bench-child-20"), "{screen}");
    let traffic = std::fs::read_to_string(transcripts.join("catalog-0.socket.jsonl")).unwrap();
    assert!(traffic.contains("\"workerState\":\"ready\"") && traffic.matches("> {").count() == 7, "{traffic}");
    assert!(transcripts.join("catalog-0.daemon.log").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_through_every_phase_and_every_metric_is_observed() {
    with_harness("demo", HubConfig::default(), |h| async move {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let plan = sandbench::spec::load(&root.join("examples/demo/bench.toml")).unwrap_or_else(|e| panic!("{e}"));
        let sandbench::spec::SourceSettings::Local { repository } = &plan.source else {
            panic!("the demo uses a local source")
        };
        let commit = sandbench::source::resolve(repository, "HEAD").await.unwrap();
        // Without the instruction lens (tests/lens.rs runs it, in the image derived with valgrind).
        let mut agent_plan = plan.agent_plan(&commit);
        agent_plan.measure.instructions = false;
        agent_plan.runtime.commands.iter_mut().for_each(|c| c.instructions = false);

        let mut request = h.request("base", NODE_IMAGE, AgentShipping::Bind);
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

        let steps = [
            (Phase::Prepare, 0),
            (Phase::Install, 0),
            (Phase::Install, 1),
            (Phase::Measure, 0),
            (Phase::Runtime, 0),
            (Phase::Transport, 0),
            (Phase::Ui, 0),
        ];
        for (name, trial) in steps {
            let outcome =
                sandbox::run_phase(&hub, &id, &agent_plan, name, trial, Duration::from_secs(300)).await.unwrap();
            if outcome.status != PhaseStatus::Ok {
                panic!("{name} {trial} failed: {}\n--- phase output ---\n{}", outcome.error, output_of(&hub));
            }
        }
        let down = h.teardown(&live.sandbox).await;
        assert!(down.removal_error.is_none());
        hub.close().await;

        let values = observed_values(&hub);
        for def in plan.metrics.iter().filter(|d| !sandbench_proto::metric::MetricKey::facet_of(&d.key).is_lens()) {
            let got =
                values.get(&def.key).unwrap_or_else(|| panic!("metric {} was not observed; got {values:?}", def.key));
            assert!(got.iter().all(|(_, v)| v.is_finite() && *v >= 0.0), "{}: {got:?}", def.key);
        }
        assert_eq!(values["install"].iter().map(|(t, _)| *t).collect::<Vec<_>>(), [0, 1]);
        // The daemon makes the warm start faster than the cold one.
        let (cold, warm) = (values["cold"][0].1, values["warm"][0].1);
        assert!(warm < cold, "cold {cold} s, warm {warm} s");
        assert!(values["bundle"][0].1 > 1000.0, "the npm tarball has a size");
        // Node burns CPU to start: the live tree at the echo has some, less than its wall time
        // allows on the sandbox's 2 CPUs; the install and the git command have theirs.
        let cold_cpu = values["cold.cpu"][0].1;
        assert!(cold_cpu > 0.0 && cold_cpu < 2.0 * cold + 0.05, "cold {cold} s, CPU {cold_cpu} s");
        assert!(values["install.cpu"].iter().all(|(_, v)| *v > 0.0), "{:?}", values["install.cpu"]);
        assert!(values["git_status.cpu"][0].1 > 0.0 && values["git_status.maxrss"][0].1 > 1e6);
        // Transcripts arrived as files in the run directory.
        let transcripts = h.run_dir.path().join("sandboxes").join(&id).join("transcripts");
        let raw = std::fs::read(transcripts.join("cold-0.raw")).unwrap();
        assert!(String::from_utf8_lossy(&raw).contains("demo 1.0.0"));
        assert!(transcripts.join("warm-0.txt").is_file());
        assert!(transcripts.join("kernel-0.jsonl").is_file());
        assert_transport_and_ui(&plan, &values, &transcripts);
        eprintln!("observed: {values:?}");
    })
    .await;
}

/// Runs phases of a spec (given as TOML text, source none) on one busybox sandbox with the
/// fixtures uploaded; returns each phase's outcome and every observation.
struct BusyboxRun {
    outcomes: Vec<(String, u32, PhaseStatus, String)>,
    values: BTreeMap<(String, u32), f64>,
    /// Every value of a metric and trial, with its sample index, in the order received.
    samples: BTreeMap<(String, u32), Vec<(u32, f64)>>,
    errors: BTreeMap<(String, u32), String>,
    files: BTreeMap<String, Vec<u8>>,
}

async fn run_on_busybox(h: &support::Harness, role: &str, specs: &[(Phase, u32, &str)], fetch: &[&str]) -> BusyboxRun {
    support::ensure_busybox_image(&h.provisioner).await;
    let hub = h.hub().await;
    let request = h.request(role, support::BUSYBOX_IMAGE, AgentShipping::Bind);
    let live = h.launch(request).await;
    let id = live.sandbox.id.clone();
    h.provisioner.upload(&id, support::fixtures_tar(&["pty-fixture", "jsonl-fixture"]).into()).await.unwrap();
    let mut outcomes = Vec::new();
    for (name, trial, spec) in specs {
        let plan = sandbench::spec::parse(Path::new("test.toml"), spec).unwrap_or_else(|e| panic!("{e}"));
        let outcome =
            sandbox::run_phase(&hub, &id, &plan.agent_plan(""), *name, *trial, Duration::from_secs(120)).await.unwrap();
        outcomes.push((name.to_string(), *trial, outcome.status, outcome.error));
    }
    let mut files = BTreeMap::new();
    for path in fetch {
        files.insert(path.to_string(), h.provisioner.download(&id, path).await.unwrap_or_default());
    }
    h.teardown(&live.sandbox).await;
    let mut values = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut samples: BTreeMap<(String, u32), Vec<(u32, f64)>> = BTreeMap::new();
    for event in read_events(&hub.log_path()).unwrap().into_iter().filter(|e| e.sandbox == id) {
        if let StoredBody::Observation { metric, trial, value, error, sample, .. } = event.body {
            if let Some(v) = value {
                samples.entry((metric.clone(), trial)).or_default().push((sample, v));
            }
            match (value, error) {
                (Some(v), _) => values.insert((metric, trial), v),
                (_, Some(e)) => errors.insert((metric, trial), e).map(|_| 0.0),
                _ => None,
            };
        }
    }
    BusyboxRun { outcomes, values, samples, errors, files }
}

const ENGINE_SPEC: &str = r#"
name = "fixtures"
[env]
SPEC_VAR = "from-spec"
[install]
# Records its environment and ids, and leaves a process that ignores SIGTERM behind.
command = "env | sort > ~/env; id >> ~/env; ls -A ~ >> ~/env; touch ~/mark; ln -s /bin/busybox ~/busybox; (trap '' TERM; sleep 1000) & echo installed"
env = { STEP_VAR = "from-step" }
checks = [ { output = "echo hello", contains = "hello" }, { file_exists = "~/mark" }, { file_starts_with = "~/busybox", prefix = "\\x7fELF" } ]
[measure]
startup = ["/usr/local/bin/pty-fixture", "--raw-after-ms", "RAW_AFTER", "--log", "/home/benchmark1/pty-RAW_AFTER.log"]
settle_s = 0.2
[[runtime.scenario]]
name = "kernel"
command = ["/usr/local/bin/jsonl-fixture", "--start-ms", "50"]
start_metric = "k_start"
timeout_s = 10
shutdown = { type = "shutdown" }
  [[runtime.scenario.step]]
  kind = "request"
  metric = "k_exec"
  send = { type = "execute", code = "pass" }
  repeat = 20
  expect = { status = "ok" }
  [[runtime.scenario.step]]
  kind = "request"
  metric = "k_output"
  send = { type = "execute", code = "print:5000" }
  output_bytes = 5000
  expect = { status = "ok" }
  [[runtime.scenario.step]]
  kind = "interrupt"
  metric = "k_interrupt"
  send = { type = "execute", code = "sleep:10000" }
  marker = "interrupt-ready"
  interrupt = { type = "interrupt" }
  expect = { status = "error" }
  [[runtime.scenario.step]]
  kind = "memory"
  metric = "k_rss"
  [[runtime.scenario.step]]
  kind = "restart"
  metric = "k_restart"
[[runtime.scenario]]
name = "editor"
channel = "terminal"
command = ["/usr/local/bin/pty-fixture", "--raw-after-ms", "100"]
timeout_s = 10
  [[runtime.scenario.step]]
  kind = "ready"
  metric = "t_ready"
  [[runtime.scenario.step]]
  kind = "type"
  text = "hello"
  [[runtime.scenario.step]]
  kind = "wait_for"
  text = "> hello"
  metric = "t_echo"
  [[runtime.scenario.step]]
  kind = "settle"
  seconds = 0.2
  [[runtime.scenario.step]]
  kind = "cpu"
  metric = "t_cpu"
  [[runtime.scenario.step]]
  kind = "memory"
  metric = "t_rss"
[[runtime.script]]
name = "no-enter"
run = "for f in /home/benchmark1/pty-*.log; do tr -cd '\\r\\n' < $f; done | wc -c | sed 's/ //g; s/.*/RESULT {\"enter_bytes\": &}/'"
metrics = ["enter_bytes"]
[metrics.k_start]
title = "start"
unit = "ms"
[metrics.k_exec]
title = "exec"
unit = "ms"
[metrics.k_output]
title = "output"
unit = "ms"
[metrics.k_interrupt]
title = "interrupt"
unit = "ms"
[metrics.k_rss]
title = "rss"
unit = "MB"
[metrics.k_restart]
title = "restart"
unit = "ms"
[metrics.t_ready]
title = "editor ready"
unit = "ms"
[metrics.t_echo]
title = "editor echo"
unit = "ms"
[metrics.t_cpu]
title = "editor CPU"
unit = "s"
[metrics.t_rss]
title = "editor memory"
unit = "MB"
[metrics.enter_bytes]
title = "Enter keys received"
unit = "bytes"
"#;

/// Fresh users with their own uid and home, and exactly the environment built for them.
fn assert_fresh_users(run: &BusyboxRun) {
    for (uid, user) in [(2001, "benchmark1"), (2002, "benchmark2")] {
        let text = String::from_utf8(run.files[&format!("/home/{user}/env")].clone()).unwrap();
        let mut keys: Vec<&str> =
            text.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).filter(|k| !k.starts_with("uid")).collect();
        keys.retain(|k| !["PWD", "SHLVL", "_", "OLDPWD"].contains(k));
        assert_eq!(
            keys,
            [
                "COLORTERM",
                "HOME",
                "LANG",
                "LOGNAME",
                "NPM_CONFIG_CACHE",
                "NPM_CONFIG_PREFIX",
                "PATH",
                "SHELL",
                "SPEC_VAR",
                "STEP_VAR",
                "TERM",
                "TMPDIR",
                "USER",
                "UV_CACHE_DIR",
                "UV_LINK_MODE",
                "XDG_CACHE_HOME",
                "XDG_CONFIG_HOME",
                "XDG_DATA_HOME",
                "XDG_RUNTIME_DIR",
                "XDG_STATE_HOME"
            ],
            "{text}"
        );
        assert!(text.contains(&format!("HOME=/home/{user}\n")) && text.contains(&format!("USER={user}\n")), "{text}");
        assert!(text.contains(&format!("PATH=/home/{user}/.local/bin:/usr/local/bin:/usr/bin:/bin\n")), "{text}");
        assert!(text.contains(&format!("TMPDIR=/tmp/sandbench-{user}\n")), "{text}");
        // Supplementary groups dropped: only the user's own group.
        let id_line = text.lines().find(|l| l.starts_with("uid=")).unwrap_or_default();
        assert!(
            id_line == format!("uid={uid}({user}) gid={uid}({user})")
                || id_line == format!("uid={uid}({user}) gid={uid}({user}) groups={uid}({user})"),
            "{text}"
        );
        let home_listing: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("uid=")).skip(1).collect();
        assert!(!home_listing.contains(&"mark"), "the home was not fresh: {text}");
    }
}

/// Every timed step's process tree beside its wall time, and the conditions of each timed trial.
fn assert_companions_and_conditions(run: &BusyboxRun, run_dir: &Path) {
    // Every timed step's process tree beside its wall time: the install command (wait4),
    // the terminal starts (the live tree at the echo), the script (named after it).
    let suffixes = sandbench_proto::metric::Facet::COMPANIONS.map(|f| f.suffix());
    for (key, trials) in [("install", [0, 1]), ("cold", [0, 1]), ("warm", [0, 1])] {
        for trial in trials {
            for suffix in suffixes {
                let value = run.values.get(&(format!("{key}{suffix}"), trial));
                assert!(value.is_some_and(|v| v.is_finite() && *v >= 0.0), "{key}{suffix} {trial}: {value:?}");
            }
        }
    }
    assert!(run.values[&("install.maxrss".into(), 0)] > 100e3, "{:?}", run.values);
    assert!(run.values[&("cold.maxrss".into(), 0)] > 100e3, "the fixture was alive at its echo");
    assert!(run.values[&("install.minflt".into(), 0)] > 0.0 && run.values[&("cold.vcsw".into(), 0)] > 0.0);
    assert!(run.values[&("cold.cpu".into(), 0)] < 2.0, "the fixture mostly waits: {:?}", run.values);
    assert!(run.values.contains_key(&("script.no-enter.cpu".into(), 0)), "{:?}", run.values);
    // The conditions of each timed trial arrived beside the samples.
    let sandboxes: Vec<_> = std::fs::read_dir(run_dir.join("sandboxes")).unwrap().flatten().map(|e| e.path()).collect();
    let file = sandboxes.iter().map(|s| s.join("conditions/measure-1.json")).find(|p| p.is_file());
    let file = file.unwrap_or_else(|| panic!("no conditions of measure 1 in {sandboxes:?}"));
    let conditions: sandbench_proto::conditions::TrialConditions =
        serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    assert_eq!((conditions.phase.as_str(), conditions.trial), ("measure", 1));
    assert!(conditions.steal().is_some() && conditions.after.load.is_some(), "{conditions:?}");
    assert!(conditions.throttled_periods().is_some(), "the sandbox's cpu.stat: {conditions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixtures_in_docker_fresh_users_exact_environment_readiness_and_the_jsonl_engine() {
    with_harness("fixtures", HubConfig::default(), |h| async move {
        let slow = ENGINE_SPEC.replace("RAW_AFTER", "600");
        let fast = ENGINE_SPEC.replace("RAW_AFTER", "50");
        let specs = [
            (Phase::Install, 0, slow.as_str()),
            (Phase::Install, 1, slow.as_str()),
            (Phase::Measure, 0, slow.as_str()),
            (Phase::Measure, 1, fast.as_str()),
            (Phase::Runtime, 0, slow.as_str()),
        ];
        let run = run_on_busybox(&h, "bb", &specs, &["/home/benchmark1/env", "/home/benchmark2/env"]).await;
        for (name, trial, status, error) in &run.outcomes {
            assert_eq!(*status, PhaseStatus::Ok, "{name} {trial}: {error} (errors: {:?})", run.errors);
        }
        assert!(run.errors.is_empty(), "{:?}", run.errors);

        assert_fresh_users(&run);
        // Installs were timed; the stubborn process left behind was killed (else the trial fails).
        assert!(run.values.contains_key(&("install".into(), 1)));

        // Readiness: 0.60 s and 0.05 s starts told apart; Enter never sent.
        let (slow_cold, fast_cold) = (run.values[&("cold".into(), 0)], run.values[&("cold".into(), 1)]);
        assert!(slow_cold >= 0.6, "slow cold {slow_cold}");
        assert!(slow_cold - fast_cold > 0.25, "slow {slow_cold} vs fast {fast_cold}");
        assert!(run.values[&("warm".into(), 0)] >= 0.6);
        assert!(run.values[&("rss".into(), 0)] > 0.0);
        assert_eq!(run.values[&("enter_bytes".into(), 0)], 0.0);

        // The JSON-lines engine over 17-byte fragments.
        let start = run.values[&("k_start".into(), 0)];
        assert!((0.05..5.0).contains(&start), "k_start {start}");
        for key in ["k_exec", "k_output", "k_interrupt", "k_rss", "k_restart"] {
            assert!(run.values.contains_key(&(key.into(), 0)), "{key} missing: {:?}", run.values);
        }
        assert!(run.values[&("k_interrupt".into(), 0)] < 1.0, "the interrupt took the whole sleep");

        // The scenario engine over a terminal: readiness, keystrokes, waiting for the screen.
        let ready = run.values[&("t_ready".into(), 0)];
        assert!((0.1..5.0).contains(&ready), "t_ready {ready}");
        let echo = run.values[&("t_echo".into(), 0)];
        assert!(echo < 1.0, "t_echo {echo}");
        assert!(run.values[&("t_cpu".into(), 0)] >= 0.0);
        assert!(run.values[&("t_rss".into(), 0)] > 0.0);

        assert_companions_and_conditions(&run, h.run_dir.path());
    })
    .await;
}

const FAILING_SPEC: &str = r#"
name = "failing"
[install]
command = "echo installing; exit 3"
[[runtime.scenario]]
name = "kernel"
command = ["/usr/local/bin/jsonl-fixture", "--start-ms", "0"]
timeout_s = 5
  [[runtime.scenario.step]]
  kind = "request"
  metric = "k_ok"
  send = { type = "execute", code = "pass" }
  expect = { status = "ok" }
  [[runtime.scenario.step]]
  kind = "request"
  metric = "k_fail"
  send = { type = "execute", code = "fail" }
  expect = { status = "ok" }
  [[runtime.scenario.step]]
  kind = "memory"
  metric = "k_after"
[[runtime.script]]
name = "bad"
run = "echo 'RESULT {\"s_value\": -1}'"
metrics = ["s_value"]
[metrics.k_ok]
title = "ok"
unit = "ms"
[metrics.k_fail]
title = "fail"
unit = "ms"
[metrics.k_after]
title = "after"
unit = "MB"
[metrics.s_value]
title = "script"
unit = "ms"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_recorded_on_their_metrics_and_nothing_is_faked() {
    with_harness("failing", HubConfig::default(), |h| async move {
        let specs =
            [(Phase::Install, 0, FAILING_SPEC), (Phase::Measure, 0, FAILING_SPEC), (Phase::Runtime, 0, FAILING_SPEC)];
        let run = run_on_busybox(&h, "first", &specs, &[]).await;
        let status: Vec<PhaseStatus> = run.outcomes.iter().map(|o| o.2).collect();
        assert_eq!(status, [PhaseStatus::Failed, PhaseStatus::Failed, PhaseStatus::Failed]);
        assert_eq!(run.errors[&("install".into(), 0)], "the install command failed (exit status 3): installing");
        // The first install failed: no measurement pretends otherwise.
        assert_eq!(
            run.errors[&("cold".into(), 0)],
            "The first installation must succeed before interactive measurements"
        );
        assert!(run.outcomes[2].3.contains("The first installation must succeed"), "{:?}", run.outcomes[2]);
        assert!(run.values.is_empty(), "{:?}", run.values);

        // A failing step: its metric gets the error, the ones after it say why they are missing,
        // the ones before keep their values; a script's invalid RESULT fails its metrics.
        let ok_install = FAILING_SPEC.replace("echo installing; exit 3", "true");
        let specs = [(Phase::Install, 0, ok_install.as_str()), (Phase::Runtime, 0, ok_install.as_str())];
        let run = run_on_busybox(&h, "second", &specs, &[]).await;
        assert_eq!(run.outcomes[0].2, PhaseStatus::Ok);
        assert_eq!(run.outcomes[1].2, PhaseStatus::Failed);
        assert!(run.values.contains_key(&("k_ok".into(), 0)));
        assert!(
            run.errors[&("k_fail".into(), 0)].starts_with("request failed: expected status = \"ok\", got \"error\""),
            "{:?}",
            run.errors
        );
        assert_eq!(run.errors[&("k_after".into(), 0)], "not measured: an earlier step of scenario kernel failed");
        assert_eq!(run.errors[&("s_value".into(), 0)], "invalid RESULT line: s_value: -1 is negative");
        assert!(!run.values.contains_key(&("s_value".into(), 0)));
    })
    .await;
}

/// A tar of a host folder under `prefix`, every entry owned by `uid`.
fn tar_dir(dir: &Path, prefix: &str, uid: u64) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let rel = path.strip_prefix(dir).unwrap();
        let name = Path::new(prefix).join(rel);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_metadata(&meta);
        header.set_uid(uid);
        header.set_gid(uid);
        if meta.is_dir() {
            builder.append_data(&mut header, &name, std::io::empty()).unwrap();
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else if meta.is_file() {
            builder.append_data(&mut header, &name, std::fs::File::open(&path).unwrap()).unwrap();
        }
    }
    builder.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_source_is_fetched_in_the_sandbox_and_its_commit_verified() {
    with_harness("gitsrc", HubConfig::default(), |h| async move {
        // A repository the sandbox can reach without a network: a folder inside it.
        let repo = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg("git init -q -b main . && echo hello > hello.txt && git add -A && git -c user.name=t -c user.email=t@t commit -qm one")
            .current_dir(repo.path())
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let commit = sandbench::source::resolve(repo.path(), "HEAD").await.unwrap();
        let spec = r#"name = "git"
[sandbox]
network = true
[source]
url = "file:///srv/origin-repo"
[prepare]
commands = ["test \"$(cat hello.txt)\" = hello"]
artifacts = ["hello.txt"]
[install]
command = "true"
"#;
        let plan = sandbench::spec::parse(Path::new("git.toml"), spec).unwrap();
        let hub = h.hub().await;
        let live = h.launch(h.request("git", NODE_IMAGE, AgentShipping::Bind)).await;
        let id = live.sandbox.id.clone();
        h.provisioner.upload(&id, tar_dir(repo.path(), "srv/origin-repo", 1500).into()).await.unwrap();
        let done = sandbox::run_phase(&hub, &id, &plan.agent_plan(&commit), Phase::Prepare, 0, Duration::from_secs(60)).await.unwrap();
        assert_eq!(done.status, PhaseStatus::Ok, "{}", done.error);
        // A commit the repository does not have: refused, not silently replaced by another.
        let missing = "0123456789abcdef0123456789abcdef01234567";
        let failed = sandbox::run_phase(&hub, &id, &plan.agent_plan(missing), Phase::Prepare, 1, Duration::from_secs(60)).await.unwrap();
        assert_eq!(failed.status, PhaseStatus::Failed);
        assert!(failed.error.starts_with("fetching the source failed"), "{}", failed.error);
        h.teardown(&live.sandbox).await;
        hub.close().await;
        let bundle: Vec<f64> = read_events(&hub.log_path())
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.body {
                StoredBody::Observation { metric, value: Some(v), .. } if metric == "bundle" => Some(v),
                _ => None,
            })
            .collect();
        assert_eq!(bundle, [6.0], "hello.txt is 6 bytes");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivors_of_process_hygiene_fail_the_trial() {
    with_harness("survivors", HubConfig::default(), |h| async move {
        support::ensure_busybox_image(&h.provisioner).await;
        let hub = h.hub().await;
        let live = h.launch(h.request("hyg", support::BUSYBOX_IMAGE, AgentShipping::Bind)).await;
        let id = live.sandbox.id.clone();
        h.provisioner.upload(&id, support::fixtures_tar(&["pty-fixture"]).into()).await.unwrap();
        let spec = r#"name = "hygiene"
[install]
command = "true"
[measure]
startup = ["/usr/local/bin/pty-fixture"]
"#;
        let plan = sandbench::spec::parse(Path::new("h.toml"), spec).unwrap().agent_plan("");
        let install = sandbox::run_phase(&hub, &id, &plan, Phase::Install, 0, Duration::from_secs(60)).await.unwrap();
        assert_eq!(install.status, PhaseStatus::Ok, "{}", install.error);
        // A root service that keeps starting processes as the benchmark user: killing them does
        // not make them stop appearing.
        // Four loops, each starting a new process as soon as its last one is killed, so a
        // moment with none of them alive cannot happen.
        let respawner = "for i in 1 2 3 4; do (while true; do /sandbench/sandbox-agent run-as benchmark1 -- sleep 100; done) >/dev/null 2>&1 </dev/null & done";
        let (code, _) = h.provisioner.exec_capture(&id, vec!["sh".into(), "-c".into(), respawner.into()]).await.unwrap();
        assert_eq!(code, 0);
        let measure = sandbox::run_phase(&hub, &id, &plan, Phase::Measure, 0, Duration::from_secs(60)).await.unwrap();
        assert_eq!(measure.status, PhaseStatus::Failed);
        assert!(measure.error.starts_with("Processes remain for benchmark1: "), "{}", measure.error);
        h.teardown(&live.sandbox).await;
        hub.close().await;
        // No measurement was taken with the survivors around.
        let cold = read_events(&hub.log_path())
            .unwrap()
            .into_iter()
            .any(|e| matches!(e.body, StoredBody::Observation { ref metric, value: Some(_), .. } if metric == "cold"));
        assert!(!cold);
    })
    .await;
}

const REPEATED_SPEC: &str = r#"
name = "repeated"
[install]
command = "true"
[[runtime.command]]
metric = "counted"
run = "wc -l < prepared >> seen"
warmup = 2
prepare = "echo x >> prepared"
repeat = 5
[metrics.counted]
title = "Counted"
unit = "ms"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_command_yields_a_sample_per_timed_run_each_after_its_prepare() {
    with_harness("repeated", HubConfig::default(), |h| async move {
        let specs = [
            (Phase::Install, 0, REPEATED_SPEC),
            (Phase::Runtime, 0, REPEATED_SPEC),
            (Phase::Runtime, 1, REPEATED_SPEC),
        ];
        let run = run_on_busybox(&h, "repeated", &specs, &["/home/benchmark1/seen"]).await;
        for (name, trial, status, error) in &run.outcomes {
            assert_eq!(*status, PhaseStatus::Ok, "{name} {trial}: {error} (errors: {:?})", run.errors);
        }
        assert!(run.errors.is_empty(), "{:?}", run.errors);
        for trial in [0, 1] {
            let got = &run.samples[&("counted".to_string(), trial)];
            assert_eq!(got.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1, 2, 3, 4], "trial {trial}: {got:?}");
            assert!(got.iter().all(|s| s.1 > 0.0 && s.1 < 5.0), "seconds each: {got:?}");
        }
        // The command wrote how many prepares had run when it started: 2 warmup and 5 timed
        // runs a trial, each right after its own prepare.
        let seen = String::from_utf8(run.files["/home/benchmark1/seen"].clone()).unwrap();
        let seen: Vec<u32> = seen.lines().map(|l| l.trim().parse().unwrap()).collect();
        assert_eq!(seen.len(), 14, "{seen:?}");
        for trial in seen.chunks(7) {
            assert!(trial.windows(2).all(|w| w[1] == w[0] + 1), "one prepare before each run: {seen:?}");
        }
    })
    .await;
}
