//! The by-hand commands on the fake provisioner: finding a sandbox, `ls`, `rm`, `gc`, `phase`,
//! `logs` and `shell`, each through the `Provisioner` trait.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::*;
use crate::provision::fake::{FakeProvisioner, Script};
use crate::provision::{AgentShipping, Resources, SandboxRequest, labels};

fn request(run: &str, role: &str, ttl: Duration, socket_dir: &Path) -> SandboxRequest {
    SandboxRequest {
        run_id: run.into(),
        role: role.into(),
        image: "node:24-bookworm".into(),
        resources: Resources::default(),
        network: false,
        ttl,
        shipping: AgentShipping::Bind,
        agent_binary: "sandbox-agent".into(),
        socket_dir: socket_dir.to_path_buf(),
        token: String::new(),
        labels: Default::default(),
        placement: None,
    }
}

/// A fake with the sandboxes of runs `r1` (base, head) and `r2` (base), created, not started.
async fn three(dir: &Path) -> FakeProvisioner {
    let fake = FakeProvisioner::new(Script::default());
    for (run, role) in [("r1", "base"), ("r1", "head"), ("r2", "base")] {
        fake.create(&request(run, role, Duration::from_secs(900), dir)).await.unwrap();
    }
    fake
}

fn names(found: &[crate::provision::ContainerInfo]) -> Vec<String> {
    let mut names: Vec<String> = found.iter().map(|c| c.name.clone()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_sandbox_is_found_by_its_name_or_a_prefix_and_a_wrong_id_names_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let empty = FakeProvisioner::new(Script::default());
    let err = find(&empty, "x").await.unwrap_err().to_string();
    assert!(err.contains("there are no sandbench sandboxes"), "{err}");
    let fake = three(dir.path()).await;
    assert_eq!(find(&fake, "sandbench-r1-head").await.unwrap().name, "sandbench-r1-head");
    assert_eq!(find(&fake, "sandbench-r2").await.unwrap().name, "sandbench-r2-base");
    assert_eq!(find(&fake, "fake-sandbench-r2").await.unwrap().name, "sandbench-r2-base", "by container id");
    let err = find(&fake, "sandbench-r1").await.unwrap_err().to_string();
    assert!(err.contains("names several sandboxes: sandbench-r1-base, sandbench-r1-head"), "{err}");
    let err = find(&fake, "nope").await.unwrap_err().to_string();
    assert!(err.contains("no sandbox \"nope\"; known sandboxes: sandbench-r1-base"), "{err}");
    assert!(find(&fake, "").await.is_err(), "an empty id names none");
}

#[tokio::test]
async fn ls_lists_every_sandbox_sorted_with_its_state() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(ls(&FakeProvisioner::new(Script::default())).await.unwrap(), "no sandbench sandboxes\n");
    let fake = three(dir.path()).await;
    fake.keep_running("sandbench-r2-base").unwrap();
    let text = ls(&fake).await.unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0][..3], ["SANDBOX", "RUN", "ROLE"]);
    let shown: Vec<[&str; 5]> = rows[1..].iter().map(|r| [r[0], r[1], r[2], r[3], r[4]]).collect();
    assert_eq!(
        shown,
        [
            ["sandbench-r1-base", "r1", "base", "node:24-bookworm", "exited"],
            ["sandbench-r1-head", "r1", "head", "node:24-bookworm", "exited"],
            ["sandbench-r2-base", "r2", "base", "node:24-bookworm", "running"],
        ]
    );
}

#[tokio::test]
async fn rm_removes_one_a_run_s_or_all_and_gc_the_expired() {
    let dir = tempfile::tempdir().unwrap();
    let fake = three(dir.path()).await;
    let err = rm(&fake, Some("sandbench-r1-base"), Some("r1"), false).await.unwrap_err().to_string();
    assert!(err.contains("give one of"), "{err}");
    let err = rm(&fake, None, Some("r9"), false).await.unwrap_err().to_string();
    assert!(err.contains("no sandbox of run \"r9\""), "{err}");
    assert_eq!(rm(&fake, Some("sandbench-r2"), None, false).await.unwrap(), ["sandbench-r2-base"]);
    assert_eq!(names(&fake.list(None).await.unwrap()), ["sandbench-r1-base", "sandbench-r1-head"]);
    let mut removed = rm(&fake, None, Some("r1"), false).await.unwrap();
    removed.sort();
    assert_eq!(removed, ["sandbench-r1-base", "sandbench-r1-head"]);
    assert!(fake.list(None).await.unwrap().is_empty());

    let fake = three(dir.path()).await;
    fake.create(&request("r3", "head", Duration::ZERO, dir.path())).await.unwrap();
    assert_eq!(gc(&fake).await.unwrap(), ["sandbench-r3-head (expired)"]);
    assert_eq!(names(&fake.list(None).await.unwrap()).len(), 3);
    assert_eq!(rm(&fake, None, None, true).await.unwrap().len(), 3);
    assert!(fake.list(None).await.unwrap().is_empty());
}

/// A stand-in for the control socket of `sandbench debug --keep`: takes one request and answers
/// with a phase's events, then ends. Returns the request it got.
async fn debug_session(socket: &Path) -> tokio::task::JoinHandle<String> {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let request = BufReader::new(read).lines().next_line().await.unwrap().unwrap();
        let events = [
            r#"{"sandbox":"s","seq":1,"unix_ms":1,"kind":"phase_started","command_id":"install-2","phase":"install","trial":2}"#,
            r#"{"sandbox":"s","seq":2,"unix_ms":2,"kind":"phase_done","command_id":"install-2","status":"ok","error":""}"#,
        ];
        for event in events {
            write.write_all(format!("{{\"event\":{event}}}\n").as_bytes()).await.unwrap();
        }
        request
    })
}

#[tokio::test]
async fn phase_goes_through_the_debug_session_keeping_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let fake = three(dir.path()).await;
    let err =
        phase(&fake, "sandbench-r2", "install", 0, &crate::display::Display::plain()).await.unwrap_err().to_string();
    assert!(err.contains("is not kept by `sandbench debug --keep`"), "{err}");
    let socket = dir.path().join("control.sock");
    let mut kept = request("d1", "base", Duration::from_secs(900), dir.path());
    kept.labels.insert(labels::CONTROL.into(), socket.display().to_string());
    fake.create(&kept).await.unwrap();
    let err =
        phase(&fake, "sandbench-d1", "install", 0, &crate::display::Display::plain()).await.unwrap_err().to_string();
    assert!(err.contains("the agent of sandbox sandbench-d1-base is gone (the container is exited)"), "{err}");
    fake.keep_running("sandbench-d1-base").unwrap();
    let err =
        phase(&fake, "sandbench-d1", "install", 0, &crate::display::Display::plain()).await.unwrap_err().to_string();
    assert!(err.contains("the debug session that kept sandbox sandbench-d1-base is gone"), "{err}");
    let session = debug_session(&socket).await;
    assert!(
        phase(&fake, "sandbench-d1", "install", 2, &crate::display::Display::plain()).await.unwrap(),
        "the phase ended ok"
    );
    let asked: serde_json::Value = serde_json::from_str(&session.await.unwrap()).unwrap();
    assert_eq!(asked, serde_json::json!({ "phase": "install", "trial": 2 }));
}

#[tokio::test]
async fn logs_merge_the_agent_s_log_and_the_kept_sandbox_s_events_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvisioner::new(Script::default());
    let mut kept = request("d1", "base", Duration::from_secs(900), dir.path());
    kept.labels.insert(labels::CONTROL.into(), dir.path().join("control.sock").display().to_string());
    fake.create(&kept).await.unwrap();
    // Started with no controller to reach, its agent logs why it ended, and ends.
    fake.start("sandbench-d1-base").await.unwrap();
    for _ in 0..200 {
        if !fake.running("sandbench-d1-base").await.unwrap() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let event = r#"{"sandbox":"sandbench-d1-base","seq":1,"unix_ms":1772359200000,"kind":"phase_started","command_id":"install-1","phase":"install","trial":1}"#;
    std::fs::write(dir.path().join(crate::observations::store::OBSERVATIONS_FILE), format!("{event}\n")).unwrap();
    let shown = |lines, follow| {
        let fake = &fake;
        async move {
            let mut out = Vec::new();
            logs::logs_to(fake, "sandbench-d1", lines, follow, &mut out).await.unwrap();
            String::from_utf8(out).unwrap()
        }
    };
    let all = shown(None, false).await;
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 2, "{all}");
    assert_eq!(lines[0], "2026-03-01T10:00:00.000Z --- install trial 1");
    assert!(lines[1].contains(" session ended: cannot reach the controller"), "{all}");
    assert_eq!(shown(Some(1), false).await.lines().collect::<Vec<_>>(), [lines[1]]);
    // Following a sandbox that has ended shows the same, and returns.
    assert_eq!(shown(None, true).await, all);
    let err = logs::logs_to(&fake, "nope", None, false, &mut Vec::new()).await.unwrap_err().to_string();
    assert!(err.contains("no sandbox \"nope\""), "{err}");
}

#[tokio::test]
async fn shell_runs_a_command_or_a_terminal_in_a_running_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let fake = three(dir.path()).await;
    let err = shell(&fake, "sandbench-r2", None, &["echo".into()]).await.unwrap_err().to_string();
    assert!(err.contains("sandbox sandbench-r2-base is not running (exited)"), "{err}");
    fake.keep_running("sandbench-r2-base").unwrap();
    assert_eq!(shell(&fake, "sandbench-r2", None, &["echo".into(), "hi".into()]).await.unwrap(), 0);
    assert_eq!(shell(&fake, "sandbench-r2", None, &["false".into()]).await.unwrap(), 1);
    // The terminal: keys go in, what it shows comes out, until its command ends (Ctrl-D).
    let terminal = fake.terminal("sandbench-r2-base", shell_command(None, &[]), 24, 80).await.unwrap();
    let id = terminal.id.clone();
    let (keys, receiver) = tokio::sync::mpsc::channel(4);
    keys.send(b"ls\r".to_vec()).await.unwrap();
    keys.send(vec![0x04]).await.unwrap();
    let mut shown = Vec::new();
    shell::forward(&fake, terminal, receiver, &mut shown).await.unwrap();
    assert_eq!(shown, b"ls\r");
    assert_eq!(shell::exit_code(&fake, &id).await.unwrap(), 0);
    assert!(fake.terminal("sandbench-r1-base", vec![], 24, 80).await.is_err(), "not running");
}

#[tokio::test]
async fn a_failure_through_the_trait_says_what_failed_by_its_kind() {
    use crate::provision::{ProvisionError, Provisioner};
    let dir = tempfile::tempdir().unwrap();
    let fake = three(dir.path()).await;
    let provisioner: &dyn Provisioner = &fake;
    let again = provisioner.create(&request("r1", "base", Duration::from_secs(900), dir.path())).await;
    assert!(matches!(&again, Err(ProvisionError::Create { name, .. }) if name == "sandbench-r1-base"), "{again:?}");
    let stopped = provisioner.exec("sandbench-r1-base", vec!["echo".into()]).await;
    assert!(matches!(&stopped, Err(ProvisionError::Exec { name, .. }) if name == "sandbench-r1-base"), "{stopped:?}");
    fake.engine_down_for(Duration::from_secs(60));
    let down = provisioner.running("sandbench-r1-base").await;
    assert!(matches!(&down, Err(ProvisionError::Connect { host, .. }) if host == "fake://engine"), "{down:?}");
    assert!(matches!(provisioner.ping().await, Err(ProvisionError::Connect { .. })));
}
