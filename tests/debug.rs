//! Debugging one sandbox by hand, end to end in Docker: `debug --keep`, then `ls`, `phase`,
//! `shell` (a command, as root and as a benchmark user; and interactively under tmux: prompt,
//! errors, size, Ctrl-C, exit), the agent's `status`, `logs`, a session stalled for 15 s (the
//! dead-man waits), and `rm`, after which nothing is left.

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

/// tmux on a server of this test's own (`-S socket`, in a temporary folder), so other tmux users
/// are left alone and no socket file outlives the test.
fn tmux(socket: &str, args: &[&str]) -> String {
    let out = Command::new("tmux").arg("-S").arg(socket).args(args).output().expect("tmux (scripts/test installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls the pane until `done` holds for its text, or `wait` passes; returns the last text.
fn screen_until(socket: &str, session: &str, wait: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + wait;
    loop {
        let screen = tmux(socket, &["capture-pane", "-p", "-t", session]);
        if done(&screen) || Instant::now() >= deadline {
            return screen;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Types `keys` and Enter into the pane.
fn type_line(socket: &str, session: &str, keys: &str) {
    tmux(socket, &["send-keys", "-t", session, "-l", keys]);
    tmux(socket, &["send-keys", "-t", session, "Enter"]);
}

/// `sandbench shell ID` in a tmux pane, as a person uses it: a prompt, errors shown, the
/// terminal's size at start and after a resize, Ctrl-C interrupting the command but not the
/// shell, and `exit` returning at once without swallowing the next key.
fn root_shell_under_tmux(socket: &str, id: &str) {
    let session = "shell";
    // A shell around `sandbench shell` says when it returned, then reads one key.
    let script = format!(
        "'{}' shell {id}; echo shell-returned-$?; read key; echo got-$key; sleep 30",
        env!("CARGO_BIN_EXE_sandbench")
    );
    tmux(socket, &["new-session", "-d", "-s", session, "-x", "120", "-y", "30", "sh", "-c", &script]);
    let pane_size = || tmux(socket, &["display-message", "-p", "-t", session, "#{pane_height} #{pane_width}"]);

    let is_prompt = |line: &str| line.trim_end().ends_with('#');
    let screen = screen_until(socket, session, Duration::from_secs(20), |s| s.lines().any(is_prompt));
    assert!(screen.lines().any(is_prompt), "no root prompt: {screen}");

    type_line(socket, session, "echo hello-from-$((6*7)) $(id -un)");
    let screen = screen_until(socket, session, Duration::from_secs(10), |s| s.contains("hello-from-42 root"));
    assert!(screen.contains("hello-from-42 root"), "screen: {screen}");

    type_line(socket, session, "ls /nonexistent");
    let screen = screen_until(socket, session, Duration::from_secs(10), |s| s.contains("No such file or directory"));
    assert!(
        screen.contains("ls: cannot access '/nonexistent': No such file or directory"),
        "errors are shown: {screen}"
    );

    // The terminal has the pane's size from the start, and follows a resize.
    let size = pane_size();
    type_line(socket, session, "echo size-$(stty size | tr ' ' x)");
    let want = format!("size-{}", size.trim().replace(' ', "x"));
    let screen = screen_until(socket, session, Duration::from_secs(10), |s| s.contains(&want));
    assert!(screen.contains(&want), "{want} (pane {size:?}): {screen}");
    tmux(socket, &["resize-window", "-t", session, "-x", "100", "-y", "25"]);
    let resized = pane_size();
    assert_ne!(resized, size, "tmux did not resize");
    std::thread::sleep(Duration::from_millis(300));
    type_line(socket, session, "clear; echo size-$(stty size | tr ' ' x)");
    let want = format!("size-{}", resized.trim().replace(' ', "x"));
    let screen = screen_until(socket, session, Duration::from_secs(10), |s| s.contains(&want));
    assert!(screen.contains(&want), "{want} after a resize: {screen}");

    // Ctrl-C interrupts the foreground command, not the shell.
    let begun = Instant::now();
    type_line(socket, session, "sleep 30; echo slept-$((2*3))");
    std::thread::sleep(Duration::from_millis(1000));
    tmux(socket, &["send-keys", "-t", session, "C-c"]);
    type_line(socket, session, "echo alive-$((40+2))");
    let screen = screen_until(socket, session, Duration::from_secs(10), |s| s.contains("alive-42"));
    assert!(screen.contains("alive-42") && !screen.contains("shell-returned"), "Ctrl-C ended the shell: {screen}");
    assert!(begun.elapsed() < Duration::from_secs(20), "sleep was not interrupted: {screen}");
    assert!(!screen.contains("slept-6"), "{screen}");

    // `exit` returns at once, and the next key reaches the local shell.
    type_line(socket, session, "exit");
    let typed = Instant::now();
    let screen = screen_until(socket, session, Duration::from_secs(5), |s| s.contains("shell-returned-"));
    let took = typed.elapsed();
    assert!(screen.contains("shell-returned-0"), "{screen}");
    assert!(took < Duration::from_secs(1), "`shell` took {took:?} to return after exit");
    type_line(socket, session, "k");
    let screen = screen_until(socket, session, Duration::from_secs(5), |s| s.contains("got-k"));
    assert!(screen.contains("got-k"), "the key typed after exit was swallowed: {screen}");
}

/// `sandbench debug --phase install --keep` on the demo: the session, the kept sandbox's id,
/// and a thread draining the session's output (so it never blocks).
fn start_kept_debug(out: &Path) -> (std::process::Child, String, std::thread::JoinHandle<String>) {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo/bench.toml");
    let mut debug = Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["debug", &spec.display().to_string(), "--rev", "HEAD", "--phase", "install", "--keep", "--out"])
        .arg(out)
        .env("SANDBENCH_LEDGER", out.join("ledger.sqlite"))
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
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    (debug, id, drain)
}

/// What a person does with the kept sandbox: list it, rerun a phase, enter it, read its log,
/// stall the controller, use the interactive shell, remove it.
fn use_the_kept_sandbox(id: &str, debug_pid: u32, tmux_socket: &str) {
    let id = id.to_string();
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

    // A controller stalled for 15 s (a loaded machine) is waited for: the agent keeps its
    // sandbox, and the session takes phases again once it runs.
    let signal = |name: &str| {
        let sent = Command::new("kill").args([name, &debug_pid.to_string()]).status().unwrap();
        assert!(sent.success(), "kill {name}");
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_secs(15));
    signal("-CONT");
    let (ok, phase, err) = sandbench(&["phase", &id, "install", "--trial", "2"]);
    assert!(ok && phase.contains("= install trial 2: "), "after the stall: {phase}{err}");

    // The agent's log: every line with its time in RFC 3339; -n keeps the last lines.
    let stamped =
        |line: &str| line.split_once(' ').is_some_and(|(t, _)| t.len() == 24 && t.parse::<jiff::Timestamp>().is_ok());
    let (ok, log, err) = sandbench(&["logs", &id]);
    assert!(ok && log.lines().count() >= 2 && log.lines().all(stamped), "{log}{err}");
    // With the kept session's phases: their starts, output and observations, in time order.
    assert!(log.contains(" --- install trial 2\n") && log.contains(" stdout: installed demo 1.0.0\n"), "{log}");
    assert!(log.contains(" = install trial 2: "), "{log}");
    let (ok, tail, err) = sandbench(&["logs", &id, "-n", "1"]);
    assert!(ok && tail.lines().count() == 1 && tail.lines().all(stamped), "{tail}{err}");

    // Errors say what to do.
    let (ok, _, err) = sandbench(&["shell", "no-such-sandbox", "--", "true"]);
    assert!(!ok && err.contains("known sandboxes") && err.contains(&id), "{err}");

    // The interactive shell, as a person uses it.
    root_shell_under_tmux(tmux_socket, &id);

    let (ok, removed, _) = sandbench(&["rm", &id]);
    assert!(ok && removed.contains(&id), "{removed}");
}

#[test]
fn a_kept_debug_sandbox_can_be_listed_rerun_entered_and_removed() {
    let out = tempfile::tempdir().unwrap();
    let (mut debug, id, drain) = start_kept_debug(out.path());
    let tmux_dir = tempfile::tempdir().unwrap();
    let tmux_socket = tmux_dir.path().join("tmux").display().to_string();
    let result = std::panic::catch_unwind(|| use_the_kept_sandbox(&id, debug.id(), &tmux_socket));

    // Whatever happened: the terminal, the debug session end and nothing is left.
    tmux(&tmux_socket, &["kill-server"]);
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
    // The session is in the ledger it was given, its one sandbox charged for as long as it was kept.
    let ledger = sandbench::cost::ledger::Ledger::open(&out.path().join("ledger.sqlite")).unwrap();
    let runs = ledger.runs(None).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].run_id.starts_with("debug-") && runs[0].status == "completed", "{runs:?}");
    assert_eq!(runs[0].sandboxes, 1, "{runs:?}");
    assert!(runs[0].seconds >= 15.0, "kept through the 15 s stall: {runs:?}");
}
