//! Isolation between trials, end to end in a busybox sandbox: a product whose start-up depends
//! on a cache under `$TMPDIR` (or `/tmp`), poisoned by the builder during prepare, gets a cache
//! of each trial's own; what a trial leaves in `/tmp`, `/var/tmp` and `/dev/shm` (and a process
//! started with `setsid`) is gone before the next trial and named in the warnings.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sandbench::observations::server::HubConfig;
use sandbench::observations::store::{StoredBody, read_events};
use sandbench::provision::AgentShipping;
use sandbench::station::sandbox;
use sandbench_proto::Phase;
use sandbench_proto::v1::PhaseStatus;
use support::with_harness;

/// The product: its cache is usable when it can write it (a miss fills it: 0.4 s; a hit is
/// immediate); a cache it cannot write costs 0.8 s every time, as Node's compile cache does.
/// Each start appends what it found to `~/cache.log`. The script counts what an earlier trial
/// left in the shared places and the `setsid` sleepers still running, then leaves some itself.
const SPEC: &str = r#"
name = "isolation"
[prepare]
commands = ["mkdir -p /tmp/cache && touch /tmp/cache/warm && chmod 755 /tmp/cache"]
[install]
command = "true"
[measure]
startup = ["/bin/sh", "-c", "d=${TMPDIR:-/tmp}/cache; if mkdir -p $d 2>/dev/null && [ -w $d ]; then if [ -e $d/warm ]; then echo hit >> ~/cache.log; else sleep 0.4; touch $d/warm; echo miss >> ~/cache.log; fi; else sleep 0.8; echo uncached >> ~/cache.log; fi; exec /usr/local/bin/pty-fixture --raw-after-ms 10"]
settle_s = 0.1
[[runtime.script]]
name = "leaks"
run = "n=$(ls /tmp/leak-* /var/tmp/leak-* /dev/shm/leak-* 2>/dev/null | wc -l); p=$(ps -o args | grep -c '^sleep 1234'); touch /tmp/leak-x /var/tmp/leak-x /dev/shm/leak-x; setsid sleep 1234 </dev/null >/dev/null 2>&1 & echo \"RESULT {\\\"leaks\\\": $n, \\\"escaped\\\": $p}\""
metrics = ["leaks", "escaped"]
[metrics.leaks]
title = "leftovers seen"
unit = "files"
[metrics.escaped]
title = "setsid sleepers seen"
unit = "processes"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_trial_has_its_own_cache_and_nothing_left_in_shared_places_reaches_the_next() {
    with_harness("isolation", HubConfig::default(), |h| async move {
        support::ensure_busybox_image(&h.provisioner).await;
        let hub = h.hub().await;
        let request = h.request("iso", support::BUSYBOX_IMAGE, AgentShipping::Bind);
        let live = h.launch(request).await;
        let id = live.sandbox.id.clone();
        h.provisioner.upload(&id, support::fixtures_tar(&["pty-fixture"]).into()).await.unwrap();
        // busybox has no /var/tmp: made as a Debian image has it.
        let (code, _) = h
            .provisioner
            .exec_capture(&id, vec!["sh".into(), "-c".into(), "mkdir -p /var/tmp && chmod 1777 /var/tmp".into()])
            .await
            .unwrap();
        assert_eq!(code, 0);
        let plan = sandbench::spec::parse(Path::new("isolation.toml"), SPEC).unwrap_or_else(|e| panic!("{e}"));
        let agent_plan = plan.agent_plan("");
        let steps = [
            (Phase::Prepare, 0),
            (Phase::Install, 0),
            (Phase::Measure, 0),
            (Phase::Measure, 1),
            (Phase::Runtime, 0),
            (Phase::Runtime, 1),
        ];
        for (name, trial) in steps {
            let done = sandbox::run_phase(&hub, &id, &agent_plan, name, trial, Duration::from_secs(60)).await.unwrap();
            assert_eq!(done.status, PhaseStatus::Ok, "{name} {trial}: {}", done.error);
        }
        let log = h.provisioner.download(&id, "/home/benchmark1/cache.log").await.unwrap_or_default();
        h.teardown(&live.sandbox).await;
        hub.close().await;

        let mut values = BTreeMap::new();
        for event in read_events(&hub.log_path()).unwrap().into_iter().filter(|e| e.sandbox == id) {
            if let StoredBody::Observation { metric, trial, value, error, .. } = event.body {
                assert!(error.is_none(), "{metric} {trial}: {error:?}");
                values.insert((metric, trial), value.unwrap());
            }
        }
        // Each trial's cold start fills a cache of its own (never the builder's, never the one of
        // the trial before), and its warm start hits it.
        assert_eq!(String::from_utf8_lossy(&log), "miss\nhit\nmiss\nhit\n");
        for trial in [0, 1] {
            let (cold, warm) = (values[&("cold".to_string(), trial)], values[&("warm".to_string(), trial)]);
            assert!((0.4..0.8).contains(&cold), "trial {trial}: cold {cold} s is a miss, not an uncached start");
            assert!(warm < cold - 0.25, "trial {trial}: warm {warm} s hit the cache (cold {cold} s)");
        }
        // The second trial saw nothing of the first: no file, no setsid process.
        for trial in [0, 1] {
            assert_eq!(values[&("leaks".to_string(), trial)], 0.0, "trial {trial}");
            assert_eq!(values[&("escaped".to_string(), trial)], 0.0, "trial {trial}");
        }
        // What was removed is named in the warnings the report gets.
        let warnings = sandbench::run::agent_warnings(h.run_dir.path());
        let named = |text: &str| warnings.iter().any(|w| w.contains(text));
        assert!(named("prepare trial 0: removed \"/tmp/cache\" (owner uid 1500)"), "{warnings:#?}");
        for trial in [0, 1] {
            for place in ["/tmp", "/var/tmp", "/dev/shm"] {
                let text = format!("runtime trial {trial}: removed \"{place}/leak-x\" (owner uid 2001)");
                assert!(named(&text), "{text} not in {warnings:#?}");
            }
        }
        assert!(!named("survived cleanup") && !named("cannot remove"), "{warnings:#?}");
        assert!(!named("sandbench-benchmark1"), "the private scratch folder is no leftover: {warnings:#?}");
    })
    .await;
}
