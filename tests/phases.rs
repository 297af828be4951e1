//! The phases end to end: one sandbox of the node:24-bookworm image driven through every phase
//! of the demo spec (examples/demo), and every metric of the spec observed with a value.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sandbench::provision::{AgentShipping, Resources};
use sandbench::sandbox;
use sandbench::server::HubConfig;
use sandbench::store::{StoredBody, read_events};
use sandbench_proto::plan::phase;
use sandbench_proto::v1::PhaseStatus;
use support::{NODE_IMAGE, with_harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_through_every_phase_and_every_metric_is_observed() {
    with_harness("demo", HubConfig::default(), |h| async move {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let plan = sandbench::spec::load(&root.join("examples/demo/bench.toml")).unwrap_or_else(|e| panic!("{e}"));
        let sandbench::spec::SourceSettings::Local { repository } = &plan.source else {
            panic!("the demo uses a local source")
        };
        let commit = sandbench::source::resolve(repository, "HEAD").await.unwrap();
        let agent_plan = plan.agent_plan(&commit);

        let mut request = h.request("base", NODE_IMAGE, AgentShipping::Bind);
        request.resources = Resources {
            cpus: plan.sandbox.cpus,
            cpuset: None,
            memory_bytes: plan.sandbox.memory_bytes,
            pids_limit: plan.sandbox.pids_limit,
        };
        let hub = h.hub().await;
        let live = sandbox::launch(&h.provisioner, &hub, request, Duration::from_secs(60)).await.unwrap();
        let id = live.sandbox.id.clone();
        sandbox::deliver_source(&h.provisioner, &plan, &live.sandbox, &agent_plan).await.unwrap();

        let steps =
            [(phase::PREPARE, 0), (phase::INSTALL, 0), (phase::INSTALL, 1), (phase::MEASURE, 0), (phase::RUNTIME, 0)];
        for (name, trial) in steps {
            let outcome =
                sandbox::run_phase(&hub, &id, &agent_plan, name, trial, Duration::from_secs(300)).await.unwrap();
            if outcome.status != PhaseStatus::Ok {
                let logs = read_events(&hub.log_path()).unwrap_or_default();
                let output: String = logs
                    .iter()
                    .filter_map(|e| match &e.body {
                        StoredBody::Log { data: sandbench::store::Data::Text { text }, .. } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                panic!("{name} {trial} failed: {}\n--- phase output ---\n{output}", outcome.error);
            }
        }
        let down = sandbox::teardown(&h.provisioner, &hub, h.run_dir.path(), &live.sandbox).await;
        assert!(down.removal_error.is_none());
        hub.close().await;

        let events = read_events(&hub.log_path()).unwrap();
        let mut values: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
        let mut errors = Vec::new();
        for event in &events {
            if let StoredBody::Observation { metric, trial, value, error, .. } = &event.body {
                match (value, error) {
                    (Some(v), _) => values.entry(metric.clone()).or_default().push((*trial, *v)),
                    (_, Some(e)) => errors.push(format!("{metric} trial {trial}: {e}")),
                    _ => {}
                }
            }
        }
        assert!(errors.is_empty(), "errors observed: {errors:#?}");
        for def in &plan.metrics {
            let got =
                values.get(&def.key).unwrap_or_else(|| panic!("metric {} was not observed; got {values:?}", def.key));
            assert!(got.iter().all(|(_, v)| v.is_finite() && *v >= 0.0), "{}: {got:?}", def.key);
        }
        assert_eq!(values["install"].iter().map(|(t, _)| *t).collect::<Vec<_>>(), [0, 1]);
        // The daemon makes the warm start faster than the cold one.
        let (cold, warm) = (values["cold"][0].1, values["warm"][0].1);
        assert!(warm < cold, "cold {cold} s, warm {warm} s");
        assert!(values["bundle"][0].1 > 1000.0, "the npm tarball has a size");
        // Transcripts arrived as files in the run directory.
        let transcripts = h.run_dir.path().join("sandboxes").join(&id).join("transcripts");
        let raw = std::fs::read(transcripts.join("cold-0.raw")).unwrap();
        assert!(String::from_utf8_lossy(&raw).contains("demo 1.0.0"));
        assert!(transcripts.join("warm-0.txt").is_file());
        assert!(transcripts.join("kernel-0.jsonl").is_file());
        eprintln!("observed: {values:?}");
    })
    .await;
}
