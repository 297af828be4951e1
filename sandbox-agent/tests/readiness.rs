//! Readiness against a real program in a real pseudo-terminal: the fixture enters raw mode late,
//! drops early input, answers only whole frames, and asks split terminal queries.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use sandbox_agent::probes::readiness;
use sandbox_agent::probes::terminal::{Launch, Terminal};

fn fixture() -> PathBuf {
    // Test executables live in target/<triple>/<profile>/deps; the fixture one folder up.
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().join("../pty-fixture");
    assert!(path.is_file(), "build the fixtures first: cargo build --workspace ({})", path.display());
    path
}

fn start(raw_after_ms: u64, log: &std::path::Path) -> Terminal {
    let launch = Launch {
        program: fixture(),
        args: vec!["--raw-after-ms".into(), raw_after_ms.to_string(), "--log".into(), log.display().to_string()],
        env: BTreeMap::from([("TERM".to_string(), "xterm-256color".to_string())]),
        cwd: std::env::temp_dir(),
        user: None,
    };
    Terminal::spawn(&launch).unwrap()
}

#[test]
fn slow_and_fast_startups_are_told_apart_and_enter_is_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mut measured = Vec::new();
    for (delay, name) in [(600, "slow"), (50, "fast")] {
        let log = dir.path().join(format!("{name}.log"));
        let mut term = start(delay, &log);
        let elapsed = readiness::ready(&mut term, Duration::from_secs(10)).unwrap();
        // Cleanup left the prompt empty with the cursor after it.
        assert_eq!(term.screen().cursor_position(), (1, 2), "{}", term.screen_text());
        assert!(term.screen_text().ends_with('>'), "{:?}", term.screen_text());
        term.close(Some(&dir.path().join(name))).unwrap();
        let received = std::fs::read(&log).unwrap();
        assert!(!received.contains(&b'\r') && !received.contains(&b'\n'), "Enter was sent");
        // The three split queries were answered.
        for reply in [&b"\x1b[1;1R"[..], b"\x1b]11;rgb:0000/0000/0000\x1b\\", b"\x1b[?2026;2$y"] {
            assert!(received.windows(reply.len()).any(|w| w == reply), "missing reply {reply:?}");
        }
        let raw = std::fs::read(dir.path().join(format!("{name}.raw"))).unwrap();
        assert!(raw.starts_with(b"fixture: starting"));
        assert!(std::fs::read_to_string(dir.path().join(format!("{name}.txt"))).unwrap().contains("fixture: starting"));
        measured.push(elapsed);
    }
    let (slow, fast) = (measured[0], measured[1]);
    assert!(slow >= Duration::from_millis(600), "slow start measured {slow:?}");
    assert!(slow - fast > Duration::from_millis(250), "slow {slow:?} vs fast {fast:?}");
}

#[test]
fn a_program_that_never_takes_raw_input_times_out_naming_the_stage() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = start(60_000, &dir.path().join("log"));
    let err = readiness::ready(&mut term, Duration::from_millis(300)).unwrap_err().to_string();
    assert_eq!(err, "Timed out waiting for noncanonical, no-echo terminal input");
    term.close(None).unwrap();
}

#[test]
fn a_program_that_exits_is_reported() {
    let launch = Launch {
        program: "/bin/true".into(),
        args: vec![],
        env: BTreeMap::new(),
        cwd: std::env::temp_dir(),
        user: None,
    };
    let mut term = Terminal::spawn(&launch).unwrap();
    let err = readiness::ready(&mut term, Duration::from_secs(5)).unwrap_err().to_string();
    assert!(err.contains("exited before the measurement completed"), "{err}");
    term.close(None).unwrap();
}
