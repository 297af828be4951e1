//! End-to-end tests of the backbone against the real Docker engine: controller ↔ Docker ↔ static
//! agent ↔ gRPC, with nothing lost and nothing counted twice, whatever fails.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use sandbench::observations::server::{Hub, HubConfig};
use sandbench::observations::store::{StoredBody, read_events};
use sandbench::provision::AgentShipping;
use sandbench::station::sandbox::LiveSandbox;
use sandbench_proto::v1::{Command, PhaseStatus, RunPhase, command};
use support::{Harness, NODE_IMAGE, SCRATCH_IMAGE, quick_heartbeats, with_harness};

const OBSERVATIONS: u64 = 100_000;
/// Paced so the stream lasts a few seconds and can be interrupted in the middle.
const RATE_PER_S: u64 = 40_000;
const KILL_AFTER: u64 = 30_000;

fn stream_command(id: &str, observations: u64, rate: u64) -> Command {
    let plan = serde_json::json!({ "observations": observations, "rate_per_s": rate });
    Command {
        command_id: format!("{id}-stream"),
        body: Some(command::Body::RunPhase(RunPhase {
            phase: "synthetic".into(),
            trial: 0,
            plan: serde_json::to_vec(&plan).unwrap(),
            stepwise: false,
        })),
    }
}

async fn launch_all(h: &Harness, count: usize, image: &str, shipping: AgentShipping) -> Vec<LiveSandbox> {
    let launches = (0..count).map(|i| {
        let request = h.request(&format!("s{i}"), image, shipping);
        async move { h.station.launch(request, Duration::from_secs(60)).await }
    });
    futures_util::future::try_join_all(launches).await.expect("launch sandboxes")
}

async fn wait_persisted(hub: &Hub, id: &str, observations: u64) {
    let mut status = hub.status(id).expect("known sandbox");
    tokio::time::timeout(Duration::from_secs(60), status.wait_for(|s| s.observations >= observations))
        .await
        .expect("stream progressed in time")
        .expect("status");
}

/// Every sandbox's observations in the log: exactly 0..n, in order, each once, seqs rising.
fn assert_exactly_once(hub: &Hub, ids: &[String], n: u64) {
    let events = read_events(&hub.log_path()).expect("read the log");
    let mut per_sandbox: HashMap<&str, (Vec<u64>, Vec<u32>)> = HashMap::new();
    for event in &events {
        let entry = per_sandbox.entry(event.sandbox.as_str()).or_default();
        entry.0.push(event.seq);
        if let StoredBody::Observation { trial, .. } = event.body {
            entry.1.push(trial);
        }
    }
    for id in ids {
        let (seqs, trials) = per_sandbox.get(id.as_str()).unwrap_or_else(|| panic!("{id}: no events at all"));
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{id}: seqs are not contiguous and unique");
        assert_eq!(trials.len() as u64, n, "{id}: wrong number of observations");
        assert!(
            trials.iter().enumerate().all(|(i, &t)| t as usize == i),
            "{id}: observations out of order or repeated"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_sandboxes_lose_nothing_when_agents_are_killed_mid_stream() {
    with_harness("kill", HubConfig::default(), |h| async move {
        let live = launch_all(&h, 4, SCRATCH_IMAGE, AgentShipping::Bind).await;
        let hub = h.hub().await;
        let ids: Vec<String> = live.iter().map(|l| l.sandbox.id.clone()).collect();
        for id in &ids {
            hub.send(id, stream_command(id, OBSERVATIONS, RATE_PER_S)).await.unwrap();
        }
        // SIGKILL each agent once it is well into its stream, then restart its sandbox.
        let kills = ids.iter().map(|id| {
            let (h, hub) = (h.clone(), hub.clone());
            async move {
                wait_persisted(&hub, id, KILL_AFTER).await;
                h.provisioner.kill(id, "SIGKILL").await.unwrap();
                assert_eq!(h.provisioner.wait_exit(id).await.unwrap(), 137);
                assert_eq!(h.provisioner.lost_cause(id).await.unwrap(), "killed by signal 9 (SIGKILL)");
                let at_kill = hub.status(id).unwrap().borrow().observations;
                assert!(at_kill < OBSERVATIONS, "{id}: the kill came after the stream ended");
                h.provisioner.start(id).await.unwrap();
            }
        });
        futures_util::future::join_all(kills).await;
        for id in &ids {
            let outcome = hub.wait_done(id, &format!("{id}-stream"), Duration::from_secs(120)).await.unwrap();
            assert_eq!(outcome.status, PhaseStatus::Ok, "{id}: {}", outcome.error);
            let status = hub.status(id).unwrap().borrow().clone();
            assert_eq!(status.boots, 2, "{id}: the agent should have started twice");
            assert_eq!(status.observations, OBSERVATIONS, "{id}: persisted observations");
        }
        for l in &live {
            let down = h.teardown(&l.sandbox).await;
            assert!(down.removal_error.is_none());
            let log = std::fs::read_to_string(down.log_path.expect("agent log saved")).unwrap();
            assert!(log.contains("reconnected") || log.contains("journal at seq"), "agent log: {log}");
        }
        hub.close().await;
        assert_exactly_once(&hub, &ids, OBSERVATIONS);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_sandboxes_lose_nothing_when_the_server_restarts_mid_stream() {
    with_harness("restart", HubConfig::default(), |h| async move {
        // The other shipping path: the agent uploaded through the archive API.
        let live = launch_all(&h, 4, SCRATCH_IMAGE, AgentShipping::Upload).await;
        let hub = h.hub().await;
        let ids: Vec<String> = live.iter().map(|l| l.sandbox.id.clone()).collect();
        for id in &ids {
            hub.send(id, stream_command(id, OBSERVATIONS, RATE_PER_S)).await.unwrap();
        }
        for id in &ids {
            wait_persisted(&hub, id, KILL_AFTER).await;
        }
        let hub = h.restart_server().await;
        // A restarted controller re-issues the commands of its plan; the agents run each once.
        for id in &ids {
            hub.send(id, stream_command(id, OBSERVATIONS, RATE_PER_S)).await.unwrap();
        }
        for id in &ids {
            let outcome = hub.wait_done(id, &format!("{id}-stream"), Duration::from_secs(120)).await.unwrap();
            assert_eq!(outcome.status, PhaseStatus::Ok, "{id}: {}", outcome.error);
            // A stream that ended before the restart is done at once (the log says so): wait
            // for its agent to come back too before counting its boots.
            let mut status = hub.status(id).unwrap();
            let back = tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| s.sessions > 0)).await;
            let status = back.expect("the agent reconnected to the restarted server").unwrap().clone();
            assert_eq!(status.boots, 1, "{id}: the agent kept running");
            assert!(status.observations < OBSERVATIONS, "{id}: the restart came after the stream ended");
        }
        for l in &live {
            h.teardown(&l.sandbox).await;
        }
        hub.close().await;
        assert_exactly_once(&hub, &ids, OBSERVATIONS);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_reused_and_retired_tokens_are_refused() {
    with_harness("token", quick_heartbeats(), |h| async move {
        let hub = h.hub().await;
        // A legitimate sandbox whose token the others will try.
        let good = launch_all(&h, 1, SCRATCH_IMAGE, AgentShipping::Bind).await.remove(0);
        let good_token = {
            let tokens: serde_json::Value =
                serde_json::from_slice(&std::fs::read(h.run_dir.path().join(".agent-tokens.json")).unwrap()).unwrap();
            tokens[&good.sandbox.id]["token"].as_str().unwrap().to_string()
        };
        let mut cases = Vec::new();
        for (role, token) in [("wrong", "0".repeat(64)), ("reused", good_token.clone())] {
            let mut request = h.request(role, SCRATCH_IMAGE, AgentShipping::Bind);
            hub.register(&request.sandbox_id()).unwrap();
            request.token = token;
            let created = h.provisioner.create(&request).await.unwrap();
            h.provisioner.start(&created.id).await.unwrap();
            cases.push(created.id);
        }
        // Retire the good sandbox, then restart its agent: its own token is now refused.
        hub.retire(&good.sandbox.id).unwrap();
        h.provisioner.kill(&good.sandbox.id, "SIGKILL").await.unwrap();
        h.provisioner.wait_exit(&good.sandbox.id).await.unwrap();
        h.provisioner.start(&good.sandbox.id).await.unwrap();
        cases.push(good.sandbox.id.clone());

        for id in &cases {
            let code =
                tokio::time::timeout(Duration::from_secs(30), h.provisioner.wait_exit(id)).await.unwrap().unwrap();
            assert_eq!(code, 3, "{id}: a refused agent exits with code 3");
            let log = h.provisioner.logs(id).await.unwrap();
            assert!(log.contains("refused"), "{id}: {log}");
        }
        let refusals = hub.refusals();
        let reason =
            |id: &str| refusals.iter().find(|r| r.sandbox_id == id).map(|r| r.reason.clone()).unwrap_or_default();
        assert_eq!(reason(&cases[0]), "wrong token");
        assert_eq!(reason(&cases[1]), format!("token reused: it belongs to sandbox {}", good.sandbox.id));
        assert_eq!(reason(&cases[2]), "token reused: the sandbox was retired");
        for id in &cases {
            let status = hub.status(id).unwrap().borrow().clone();
            assert!(status.sessions == 0 || id == &good.sandbox.id, "{id} must never get a session");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_loses_its_controller_stops_and_exits() {
    with_harness("deadman", quick_heartbeats(), |h| async move {
        let live = launch_all(&h, 1, SCRATCH_IMAGE, AgentShipping::Bind).await.remove(0);
        let id = live.sandbox.id.clone();
        let hub = h.hub().await;
        // A stream that would take minutes.
        hub.send(&id, stream_command(&id, 10_000_000, 1_000)).await.unwrap();
        wait_persisted(&hub, &id, 100).await;
        h.stop_server().await;
        let begun = std::time::Instant::now();
        let code = tokio::time::timeout(Duration::from_secs(30), h.provisioner.wait_exit(&id)).await.unwrap().unwrap();
        assert_eq!(code, 4, "exit code of an agent that lost its controller");
        // 5 intervals of 200 ms, plus reconnection attempts: well under 10 s.
        assert!(begun.elapsed() < Duration::from_secs(10), "took {:?}", begun.elapsed());
        let log = h.provisioner.logs(&id).await.unwrap();
        assert!(log.contains("no word from the controller"), "{log}");
        let cause = h.provisioner.lost_cause(&id).await.unwrap();
        assert!(cause.starts_with("its agent lost its controller"), "{cause}");
        h.provisioner.remove(&id).await.unwrap();
        assert_eq!(h.provisioner.lost_cause(&id).await.unwrap(), "its container was removed");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_sandbox_image_runs_the_agent_both_ways() {
    with_harness("node", HubConfig::default(), |h| async move {
        assert!(
            h.provisioner.image_exists(NODE_IMAGE).await,
            "{NODE_IMAGE} is missing: build it with images/node24-bookworm/build-offline.sh"
        );
        let hub = h.hub().await;
        let mut live = Vec::new();
        for (role, shipping) in [("bind", AgentShipping::Bind), ("upload", AgentShipping::Upload)] {
            let request = h.request(role, NODE_IMAGE, shipping);
            live.push(h.launch(request).await);
        }
        let ids: Vec<String> = live.iter().map(|l| l.sandbox.id.clone()).collect();
        for l in &live {
            assert!(l.hello.facts.os_release.contains("bookworm"), "{:?}", l.hello.facts);
            assert!(!l.hello.facts.kernel.is_empty());
            hub.send(&l.sandbox.id, stream_command(&l.sandbox.id, 5_000, 100_000)).await.unwrap();
        }
        for l in &live {
            let outcome = hub
                .wait_done(&l.sandbox.id, &format!("{}-stream", l.sandbox.id), Duration::from_secs(60))
                .await
                .unwrap();
            assert_eq!(outcome.status, PhaseStatus::Ok);
            h.teardown(&l.sandbox).await;
        }
        hub.close().await;
        assert_exactly_once(&hub, &ids, 5_000);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_removes_expired_sandboxes_but_not_live_ones() {
    with_harness("reap", HubConfig::default(), |h| async move {
        let live = launch_all(&h, 1, SCRATCH_IMAGE, AgentShipping::Bind).await.remove(0);
        // Our own live sandbox survives a reap.
        let reaped = h.provisioner.reap().await.unwrap();
        assert!(reaped.iter().all(|r| r.name != live.sandbox.id), "reaped a live sandbox: {reaped:?}");
        // One past its expiry and the grace does not (its controller, this one, is alive).
        let mut request = h.request("expired", SCRATCH_IMAGE, AgentShipping::Bind);
        let long_ago =
            std::time::SystemTime::now() - sandbench::provision::docker::REAP_GRACE - Duration::from_secs(60);
        let long_ago = long_ago.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        request.labels.insert(sandbench::provision::labels::EXPIRES_AT.into(), long_ago.to_string());
        let expired = h.provisioner.create(&request).await.unwrap();
        let reaped = h.provisioner.reap().await.unwrap();
        assert!(reaped.iter().any(|r| r.name == expired.id && r.reason.contains("expired")), "{reaped:?}");
        let left: Vec<String> = h
            .provisioner
            .list(Some(("io.sandbench.run", &h.run_id)))
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(left, vec![live.sandbox.id.clone()]);
        h.teardown(&live.sandbox).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_of_a_killed_controller_are_reaped() {
    let provisioner = sandbench::provision::DockerProvisioner::connect(2).await.expect("a Docker engine");
    support::ensure_scratch_image(&provisioner).await;
    // A real controller process, killed without warning in the middle of its work. Its
    // temporary files and its ledger go to a folder this test removes.
    let tmp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .env("TMPDIR", tmp.path())
        .env("SANDBENCH_LEDGER", tmp.path().join("ledger.sqlite"))
        .args(["bench", "--image", SCRATCH_IMAGE, "--samples", "1000", "--observations", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start sandbench");
    let marker = format!("/{}/", child.id());
    let owned_by_child = |containers: Vec<sandbench::provision::docker::ContainerInfo>| -> Vec<String> {
        containers
            .into_iter()
            .filter(|c| c.labels.get("io.sandbench.owner").is_some_and(|o| o.contains(&marker)))
            .map(|c| c.name)
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while seen.is_empty() && std::time::Instant::now() < deadline {
        seen = owned_by_child(provisioner.list(None).await.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("kill sandbench");
    child.wait().expect("reap sandbench");
    // Let anything the dead controller had in flight at the engine land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reaped = provisioner.reap().await.unwrap();
    let left = owned_by_child(provisioner.list(None).await.unwrap());
    for name in &left {
        provisioner.remove(name).await.unwrap();
    }
    assert!(!seen.is_empty(), "the controller never created a sandbox");
    assert!(left.is_empty(), "orphans survived the reaper: {left:?} (reaped: {reaped:?})");
}

/// The agent that ships (the static release build, as `scripts/test` builds it) is static and
/// contains no NSS or libc resolver entry point: it never looks up users or hosts through glibc,
/// which cannot work in a static binary nor in an empty container. (A debug build links all of
/// std's object code, unreachable paths included, so only the release build can tell.)
#[test]
fn the_agent_is_static_and_links_no_nss_or_resolver_code() {
    let agent = support::static_dir().join("sandbox-agent");
    assert!(agent.is_file(), "build the shipped agent first: cargo build-static --release ({})", agent.display());
    sandbench::agent_binary::check_static(&agent).unwrap();
    let linked = nss_or_resolver_code(&agent);
    assert!(linked.is_empty(), "NSS or resolver functions linked into the agent: {linked:?}");
    let bytes = std::fs::read(&agent).unwrap();
    assert!(!bytes.windows(13).any(|w| w == b"nsswitch.conf"), "NSS configuration code is linked into the agent");
    // The check can fail: a program built the same way (static, release) that resolves host
    // names is caught by it.
    let control = support::static_dir().join("resolver-fixture");
    sandbench::agent_binary::check_static(&control).unwrap();
    assert!(nss_or_resolver_code(&control).contains(&"getaddrinfo"), "the detector finds nothing");
}

/// The NSS and resolver functions linked into a static executable. glibc marks each function
/// that cannot work statically with a .gnu.warning.<name> section in the object that defines
/// it; the section is in the output when the object was linked.
fn nss_or_resolver_code(executable: &std::path::Path) -> Vec<&'static str> {
    let sections =
        std::process::Command::new("readelf").args(["-W", "-S"]).arg(executable).output().expect("readelf (binutils)");
    let sections = String::from_utf8_lossy(&sections.stdout);
    let banned = [
        "getaddrinfo",
        "gethostbyname",
        "gethostbyaddr",
        "getpwnam",
        "getpwuid",
        "getgrnam",
        "getgrgid",
        "initgroups",
        "getservbyname",
    ];
    banned.into_iter().filter(|b| sections.contains(&format!(".gnu.warning.{b}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_are_created_locked_down_with_their_labels_and_limits() {
    with_harness("settings", HubConfig::default(), |h| async move {
        let mut request = h.request("base", SCRATCH_IMAGE, AgentShipping::Bind);
        request.resources = sandbench::provision::Resources {
            cpus: 1.5,
            cpuset: Some("0".into()),
            memory_bytes: 256 << 20,
            pids_limit: 64,
            disk_bytes: None,
            io_weight: None,
        };
        let live = h.launch(request).await;
        let s = h.provisioner.settings(&live.sandbox.id).await.unwrap();
        assert_eq!(live.sandbox.id, format!("sandbench-{}-base", h.run_id));
        assert_eq!(s.labels["io.sandbench.run"], h.run_id);
        assert_eq!(s.labels["io.sandbench.role"], "base");
        assert_eq!(s.labels["io.sandbench.owner"], h.provisioner.owner());
        assert!(s.labels["io.sandbench.expires-at"].parse::<u64>().is_ok());
        assert_eq!(s.network_mode, "none");
        assert_eq!(
            (s.nano_cpus, s.cpuset_cpus.as_str(), s.memory_bytes, s.pids_limit),
            (1_500_000_000, "0", 256 << 20, 64)
        );
        // The container log is capped on the host (tests/hostile.rs floods it).
        let (driver, options) = &s.log_config;
        assert_eq!(
            (driver.as_str(), options["max-size"].as_str(), options["max-file"].as_str()),
            ("json-file", "1m", "2")
        );
        assert!(s.storage_opt.is_empty(), "no disk bound asked, none set: {:?}", s.storage_opt);
        assert_eq!(s.cap_drop, ["ALL"]);
        assert!(!s.cap_add.iter().any(|c| c.contains("SYS_ADMIN") || c.contains("NET_ADMIN")), "{:?}", s.cap_add);
        assert!(!s.privileged);
        assert!(s.security_opt.iter().any(|o| o.starts_with("no-new-privileges")));
        assert_eq!(s.entrypoint, ["/sandbench/sandbox-agent"]);
        assert_eq!(s.user, "0:0");
        let mut env = s.env_names.clone();
        env.sort();
        assert_eq!(env, ["SANDBENCH_SANDBOX_ID", "SANDBENCH_SOCKET", "SANDBENCH_TOKEN"], "nothing from the host");
        assert!(s.binds.iter().any(|b| b.ends_with(":/sandbench/sandbox-agent:ro")), "{:?}", s.binds);
        // The sandbox's own socket folder, no other sandbox's.
        let sockets = h.station.socket_dir("base");
        assert!(
            s.binds.iter().any(|b| b == &format!("{}:/run/sandbench:ro", sockets.display())),
            "the socket folder is mounted read-only: {:?}",
            s.binds
        );
        assert!(s.binds.iter().all(|b| b.ends_with(":ro")), "nothing writable on the host is mounted: {:?}", s.binds);
        assert!(sockets.join("agent.sock").exists());
        h.teardown(&live.sandbox).await;
        assert!(!sockets.exists(), "teardown removes the sandbox's socket folder");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compared_sandbox_carries_its_place_in_the_run_as_labels_and_its_agent_says_it() {
    with_harness("placement", HubConfig::default(), |h| async move {
        let placement = sandbench_proto::Placement { side: sandbench_proto::Side::Head, pair: 1, attempt: 2 };
        let mut request = h.request("head1-r2", SCRATCH_IMAGE, AgentShipping::Bind);
        request.placement = Some(placement);
        let live = h.launch(request).await;
        let s = h.provisioner.settings(&live.sandbox.id).await.unwrap();
        let label = |key: &str| s.labels[key].as_str();
        assert_eq!(
            (label("io.sandbench.side"), label("io.sandbench.pair"), label("io.sandbench.attempt")),
            ("head", "1", "2")
        );
        let mut env = s.env_names.clone();
        env.sort();
        assert_eq!(
            env,
            [
                "SANDBENCH_ATTEMPT",
                "SANDBENCH_PAIR",
                "SANDBENCH_SANDBOX_ID",
                "SANDBENCH_SIDE",
                "SANDBENCH_SOCKET",
                "SANDBENCH_TOKEN"
            ]
        );
        // The real agent read it from its environment and said it in its Hello (the hub
        // refuses a Hello that says another).
        assert_eq!(live.hello.placement, Some(placement));
        let registered = &sandbench::observations::server::registrations(h.run_dir.path()).unwrap()[&live.sandbox.id];
        assert_eq!((registered.role.as_deref(), registered.placement), (Some("head1-r2"), Some(placement)));
        h.teardown(&live.sandbox).await;
    })
    .await;
}

/// The setuid drill: root in a sandbox, with the capabilities the agent keeps (CHOWN,
/// DAC_OVERRIDE, FOWNER, FSETID…), tries to plant a setuid-root binary in its socket folder on
/// the host, open that folder to everyone, and delete or replace its socket. Each fails on the
/// read-only mount, the host folders are unchanged, and the agent's socket still carries a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_in_a_sandbox_cannot_write_its_socket_folder_on_the_host() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    with_harness("rootdrill", HubConfig::default(), |h| async move {
        support::ensure_busybox_image(&h.provisioner).await;
        let live = launch_all(&h, 2, support::BUSYBOX_IMAGE, AgentShipping::Bind).await;
        let (me, other) = (&live[0].sandbox.id, h.station.socket_dir("s1"));
        let mine = h.station.socket_dir("s0");
        let listing = |dir: &std::path::Path| {
            let mut names: Vec<(String, u32)> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().permissions().mode()))
                .collect();
            names.sort();
            (std::fs::metadata(dir).unwrap().permissions().mode() & 0o7777, names)
        };
        let (mine_before, other_before) = (listing(&mine), listing(&other));
        assert_eq!(mine_before.0, 0o700, "{mine_before:?}");
        let attacks = [
            "cp /bin/busybox /run/sandbench/x && chmod 4755 /run/sandbench/x",
            "chmod 0777 /run/sandbench",
            "chown 1000:1000 /run/sandbench",
            "rm /run/sandbench/agent.sock",
            "mv /run/sandbench/agent.sock /run/sandbench/old",
            "ln -s /etc/shadow /run/sandbench/link",
            "mkdir /run/sandbench/d",
        ];
        for attack in attacks {
            let (code, output) =
                h.provisioner.exec_capture(me, vec!["/bin/sh".into(), "-c".into(), attack.into()]).await.unwrap();
            assert_ne!(code, 0, "{attack:?} succeeded as root in the sandbox: {output}");
            assert!(output.contains("Read-only file system"), "{attack:?}: {output}");
        }
        // Who is root in the sandbox, and what it sees: its own socket only.
        let (_, seen) = h
            .provisioner
            .exec_capture(me, vec!["/bin/sh".into(), "-c".into(), "id -u; ls -a /run/sandbench".into()])
            .await
            .unwrap();
        assert_eq!(seen.split_whitespace().collect::<Vec<_>>(), ["0", ".", "..", "agent.sock"], "{seen}");
        assert_eq!(listing(&mine), mine_before, "the sandbox's socket folder on the host changed");
        assert_eq!(listing(&other), other_before, "the other sandbox's socket folder changed");
        assert!(std::fs::metadata(mine.join("agent.sock")).unwrap().file_type().is_socket());
        // The read-only mount still carries the agent's stream.
        let hub = h.hub().await;
        hub.send(me, stream_command(me, 1000, 10_000)).await.unwrap();
        let outcome = hub.wait_done(me, &format!("{me}-stream"), Duration::from_secs(60)).await.unwrap();
        assert_eq!(outcome.status, PhaseStatus::Ok, "{}", outcome.error);
        for l in &live {
            assert!(h.teardown(&l.sandbox).await.removal_error.is_none());
        }
    })
    .await;
}

/// Two removers of one sandbox at once (`sandbench rm` beside a debug session's teardown): both
/// succeed, whichever the engine served first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_removed_twice_at_once_is_removed_without_error() {
    with_harness("rmtwice", HubConfig::default(), |h| async move {
        for round in 0..3 {
            let live = h.launch(h.request(&format!("r{round}"), SCRATCH_IMAGE, AgentShipping::Bind)).await;
            let id = live.sandbox.id.as_str();
            let (a, b) = tokio::join!(h.provisioner.remove(id), h.provisioner.remove(id));
            assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
            assert!(!h.provisioner.exists(id).await);
            h.teardown(&live.sandbox).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_missing_image_that_cannot_be_pulled_says_what_to_do() {
    let provisioner = sandbench::provision::DockerProvisioner::connect(1).await.expect("a Docker engine");
    // A registry on a closed loopback port: the pull fails at once, without leaving the machine.
    let err = provisioner.ensure_image("127.0.0.1:9/sandbench/absent:1", &mut |_| {}).await.unwrap_err().to_string();
    assert!(err.contains("127.0.0.1:9/sandbench/absent:1") && err.contains("cannot be pulled"), "{err}");
    assert!(err.contains("images/node24-bookworm/build-offline.sh"), "{err}");
}
