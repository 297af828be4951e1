//! Debugging one sandbox by hand, end to end in Docker: `debug --keep`, then `ls`, `phase`,
//! `shell` (a command, as root and as a benchmark user; and interactively under tmux), the
//! agent's `status`, and `rm`, after which nothing is left.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sandbench(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandbench")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux (scripts/test installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_kept_debug_sandbox_can_be_listed_rerun_entered_and_removed() {
    let out = tempfile::tempdir().unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/bench.toml");
    let mut debug = Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["debug", &spec.display().to_string(), "--rev", "HEAD", "--phase", "install", "--keep", "--out"])
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the session to say how to get in.
    let mut stderr = BufReader::new(debug.stderr.take().unwrap());
    let mut seen = String::new();
    let id = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = debug.wait();
            panic!("debug ended early: {seen}");
        }
        seen.push_str(&line);
        if let Some(rest) = line.strip_prefix("sandbox ").filter(|l| l.contains(" is kept ")) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining its output so it never blocks.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });

    let result = std::panic::catch_unwind(|| {
        let (ok, ls, _) = sandbench(&["ls"]);
        assert!(ok && ls.lines().any(|l| l.starts_with(&id) && l.contains("running") && l.contains("debug")), "{ls}");

        let (ok, phase, err) = sandbench(&["phase", &id, "install", "--trial", "1"]);
        assert!(ok, "{phase}{err}");
        assert!(phase.contains("= install trial 1: "), "the rerun's observation arrives: {phase}");
        assert!(phase.contains("installed demo 1.0.0"), "and its output: {phase}");

        let (ok, root, _) = sandbench(&["shell", &id, "--", "id", "-u"]);
        assert!(ok && root.trim() == "0", "{root}");
        let (ok, user, _) =
            sandbench(&["shell", &id, "--user", "benchmark1", "--", "sh", "-c", "id -u; echo $HOME; demo --version"]);
        assert!(ok, "{user}");
        assert_eq!(user.lines().collect::<Vec<_>>(), ["2001", "/home/benchmark1", "demo 1.0.0"]);
        let (ok, status, _) = sandbench(&["shell", &id, "--", "/sandbench/sandbox-agent", "status"]);
        assert!(ok && status.contains("controller: connected") && status.contains("install trial 1"), "{status}");

        // Errors say what to do.
        let (ok, _, err) = sandbench(&["shell", "no-such-sandbox", "--", "true"]);
        assert!(!ok && err.contains("known sandboxes") && err.contains(&id), "{err}");

        // The interactive shell, as a person uses it.
        let session = format!("sbt{}", std::process::id());
        tmux(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "30",
            env!("CARGO_BIN_EXE_sandbench"),
            "shell",
            &id,
        ]);
        std::thread::sleep(Duration::from_millis(1500));
        tmux(&["send-keys", "-t", &session, "echo hello-from-$((6*7)) $(id -un)", "Enter"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut screen = String::new();
        while Instant::now() < deadline && !screen.contains("hello-from-42 root") {
            std::thread::sleep(Duration::from_millis(200));
            screen = tmux(&["capture-pane", "-p", "-t", &session]);
        }
        tmux(&["send-keys", "-t", &session, "exit", "Enter"]);
        std::thread::sleep(Duration::from_millis(500));
        tmux(&["kill-session", "-t", &session]);
        assert!(screen.contains("hello-from-42 root"), "screen: {screen}");

        let (ok, removed, _) = sandbench(&["rm", &id]);
        assert!(ok && removed.contains(&id), "{removed}");
    });

    // Whatever happened: the debug session ends and nothing is left.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut exited = None;
    while Instant::now() < deadline {
        if let Some(status) = debug.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if exited.is_none() {
        let _ = debug.kill();
        let _ = sandbench(&["rm", &id]);
    }
    let _ = debug.wait();
    let rest = drain.join().unwrap_or_default();
    let (_, ls, _) = sandbench(&["ls"]);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(exited.is_some_and(|s| s.success()), "debug did not end cleanly after rm: {rest}");
    assert!(!ls.contains(&id), "{ls}");
}
