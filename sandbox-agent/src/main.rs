//! sandbox-agent: runs as root (PID 1) inside a sandbench sandbox, runs the phases the controller
//! asks for, and streams every event back over gRPC on a Unix socket, journaled on disk first so
//! nothing is lost or sent twice whatever fails.
//!
//! It is a static executable: it runs in an empty container, and never calls NSS or resolves
//! host names through libc.

// A panic here loses a measurement: no unwrap outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use sandbench_proto::v1::event::Body;
use sandbench_proto::{SOCKET_DIR_IN_SANDBOX, SOCKET_NAME, env};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use sandbox_agent::commands::Workloads;
use sandbox_agent::journal::{self, Journal};
use sandbox_agent::session::{Exit, Identity, Session};
use sandbox_agent::{logging, reaper};

const DEFAULT_STATE_DIR: &str = "/var/lib/sandbench";
/// Events waiting for the journal writer, at most; phases block beyond it.
const EMIT_QUEUE: usize = 4096;
/// Events the journal writer appends with one fdatasync, at most.
const JOURNAL_BATCH: usize = 4096;

/// Exit codes, so `docker inspect` tells why an agent stopped.
const EXIT_REFUSED: u8 = 3;
const EXIT_CONTROLLER_LOST: u8 = 4;
const EXIT_JOURNAL: u8 = 5;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => {}
        Some("--version" | "version") => {
            println!("sandbox-agent {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some("status") => return status(args.get(1).map(String::as_str) == Some("--json")),
        Some("run-as") => return run_as(&args[1..]),
        Some("probe") => return probe(&args[1..]),
        Some(other) => {
            eprintln!(
                "sandbox-agent: unknown argument {other:?}; usage: sandbox-agent [--version | status [--json] | run-as USER [-- COMMAND...] | probe USER RUNS -- COMMAND]"
            );
            return ExitCode::from(2);
        }
    }
    logging::init();
    match run() {
        Ok(code) => code,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}

fn state_dir() -> PathBuf {
    std::env::var_os(env::STATE_DIR).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// `sandbox-agent status`: what the running agent of this sandbox is doing.
fn status(json: bool) -> ExitCode {
    match sandbox_agent::status::read(&state_dir()) {
        Ok(s) => {
            let alive = std::path::Path::new(&format!("/proc/{}", s.pid)).exists();
            if json {
                println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
            } else {
                print!("{}", sandbox_agent::status::describe(&s, alive, journal::now_unix_ms()));
            }
            if alive { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(err) => {
            eprintln!("sandbox-agent: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// `sandbox-agent probe USER RUNS -- COMMAND`: times COMMAND RUNS times as the command probe
/// of a repeated command does (as USER, with the phases' environment) and prints the mean,
/// median and min in milliseconds: the probe's own overhead, measured (`scripts/probe-overhead`).
fn probe(args: &[String]) -> ExitCode {
    let usage = "sandbox-agent: usage: sandbox-agent probe USER RUNS -- COMMAND";
    let (Some(name), Some(runs), Some("--"), Some(line)) =
        (args.first(), args.get(1).and_then(|r| r.parse::<usize>().ok()), args.get(2).map(String::as_str), args.get(3))
    else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let result = (|| {
        let user =
            sandbox_agent::users::Accounts::new("/").find(name)?.ok_or_else(|| anyhow::anyhow!("no user {name:?}"))?;
        sandbox_agent::isolation::ensure_scratch(std::path::Path::new("/"), &user)?;
        let command = sandbox_agent::probes::command::ShellCommand {
            run: line.clone(),
            env: sandbox_agent::users::environment(&user, &Default::default()),
            cwd: user.home.clone(),
            user: Some((user.uid, user.gid)),
            timeout: std::time::Duration::from_secs(60),
        };
        let output = std::env::temp_dir().join(format!("sandbench-probe-{}.out", std::process::id()));
        let mut probe = sandbox_agent::probes::timed::Repeatable::new(&command, &output)?;
        let mut times: Vec<f64> = Vec::with_capacity(runs);
        for _ in 0..runs.max(1) {
            times.push(probe.run_once()?.elapsed.as_secs_f64() * 1e3);
        }
        let _ = std::fs::remove_file(&output);
        times.sort_by(f64::total_cmp);
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        let median = (times[(times.len() - 1) / 2] + times[times.len() / 2]) / 2.0;
        anyhow::Ok(format!(
            "probe: {} runs, mean {mean:.3} ms, median {median:.3} ms, min {:.3} ms",
            times.len(),
            times[0]
        ))
    })();
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("sandbox-agent: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// `sandbox-agent run-as USER [-- COMMAND...]`: runs a command (default: the user's login
/// shell) as a benchmark user, with the environment the phases give that user.
fn run_as(args: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let Some(name) = args.first() else {
        eprintln!("sandbox-agent: usage: sandbox-agent run-as USER [-- COMMAND...]");
        return ExitCode::from(2);
    };
    let accounts = sandbox_agent::users::Accounts::new("/");
    let user = match accounts.find(name) {
        Ok(Some(user)) => user,
        Ok(None) => {
            let known: Vec<String> = std::fs::read_to_string("/etc/passwd")
                .map(|t| {
                    sandbox_agent::users::parse_passwd(&t)
                        .into_iter()
                        .filter(|u| u.uid >= 1000)
                        .map(|u| u.name)
                        .collect()
                })
                .unwrap_or_default();
            eprintln!("sandbox-agent: no user {name:?} in this sandbox; users: {}", known.join(", "));
            return ExitCode::from(2);
        }
        Err(err) => {
            eprintln!("sandbox-agent: cannot read the users: {err:#}");
            return ExitCode::from(1);
        }
    };
    let command: Vec<String> = match args.iter().position(|a| a == "--") {
        Some(i) if i + 1 < args.len() => args[i + 1..].to_vec(),
        _ => vec![user.shell.clone(), "-l".to_string()],
    };
    let env = sandbox_agent::users::environment(&user, &Default::default());
    if let Err(err) = sandbox_agent::isolation::ensure_scratch(std::path::Path::new("/"), &user) {
        eprintln!("sandbox-agent: cannot make the scratch folder of {name}: {err:#}");
    }
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .env_clear()
        .envs(&env)
        .current_dir(&user.home)
        .uid(user.uid)
        .gid(user.gid)
        .exec();
    eprintln!("sandbox-agent: cannot run {:?} as {name}: {err}", command[0]);
    ExitCode::from(127)
}

fn required_env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("environment variable {name} is not set (the controller sets it)"))
}

fn run() -> anyhow::Result<ExitCode> {
    let identity = identity()?;
    let state_dir = state_dir();
    std::fs::create_dir_all(&state_dir).with_context(|| format!("cannot create {}", state_dir.display()))?;
    set_private(&state_dir);
    let journal_path = state_dir.join("journal");
    let journal =
        Journal::open(&journal_path).with_context(|| format!("cannot open the journal {}", journal_path.display()))?;
    reaper::become_subreaper();
    sandbox_agent::phases::restore_origin(&state_dir);
    tracing::info!(
        "starting: sandbox {}, boot {}, journal at seq {}",
        identity.sandbox_id,
        identity.boot_id,
        journal.last_seq()
    );

    let (emit_tx, emit_rx) = mpsc::channel(EMIT_QUEUE);
    let (durable_tx, durable_rx) = watch::channel(journal.last_seq());
    let source = journal.source();
    let workloads = Workloads::new(journal.progress(), emit_tx, state_dir.clone());
    spawn_journal_writer(journal, emit_rx, durable_tx)?;

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let exit = runtime.block_on(async move {
        tokio::spawn(reaper::run());
        let (stop_tx, mut stop_rx) = watch::channel(false);
        tokio::spawn(stop_on_signal(stop_tx));
        let mut session = Session::new(identity, state_dir.clone(), source, durable_rx, workloads);
        let exit = session.run(&mut stop_rx).await;
        session.workloads.cancel_all();
        exit
    });
    let code = exit_code(exit);
    // Give phase threads a moment to see their cancel flag; the process exit ends them anyway.
    std::thread::sleep(Duration::from_millis(10));
    Ok(code)
}

/// Who this agent is: the controller's sandbox id and token, this boot, the socket, and the
/// sandbox's place in its run.
fn identity() -> anyhow::Result<Identity> {
    let placement = sandbench_proto::Placement::from_env(|name| std::env::var(name).ok())
        .map_err(|why| anyhow::anyhow!("{why} (the controller sets it)"))?;
    Ok(Identity {
        placement,
        sandbox_id: required_env(env::SANDBOX_ID)?,
        token: required_env(env::TOKEN)?,
        boot_id: std::fs::read_to_string("/proc/sys/kernel/random/uuid")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| format!("pid{}-{}", std::process::id(), journal::now_unix_ms())),
        socket: std::env::var_os(env::SOCKET)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(SOCKET_DIR_IN_SANDBOX).join(SOCKET_NAME)),
    })
}

/// The journal writer: a plain thread, so fdatasync never stalls the connection. It appends
/// events in batches and publishes the last durable sequence number; a write failure ends
/// the agent.
fn spawn_journal_writer(
    mut journal: Journal,
    mut emit_rx: mpsc::Receiver<Body>,
    durable_tx: watch::Sender<u64>,
) -> std::io::Result<()> {
    std::thread::Builder::new().name("journal".into()).spawn(move || {
        let mut batch = Vec::new();
        while let Some(first) = emit_rx.blocking_recv() {
            batch.push(first);
            while batch.len() < JOURNAL_BATCH {
                match emit_rx.try_recv() {
                    Ok(body) => batch.push(body),
                    Err(_) => break,
                }
            }
            match journal.append(std::mem::take(&mut batch)) {
                Ok(seq) => {
                    let _ = durable_tx.send(seq);
                }
                Err(err) => {
                    tracing::error!("cannot write the journal: {err}; stopping");
                    std::process::exit(i32::from(EXIT_JOURNAL));
                }
            }
        }
    })?;
    Ok(())
}

/// Sets the stop flag on SIGTERM or SIGINT.
async fn stop_on_signal(stop_tx: watch::Sender<bool>) {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    let _ = stop_tx.send(true);
}

/// Logs why the session ended and picks the exit code that says it.
fn exit_code(exit: Exit) -> ExitCode {
    match exit {
        Exit::Shutdown => {
            tracing::info!("shutting down at the controller's request");
            ExitCode::SUCCESS
        }
        Exit::Signal => {
            tracing::info!("stopping on signal");
            ExitCode::SUCCESS
        }
        Exit::Refused(reason) => {
            tracing::error!("the controller refused this agent: {reason}");
            ExitCode::from(EXIT_REFUSED)
        }
        Exit::ControllerLost(silent) => {
            tracing::error!("no word from the controller for {:.1} s; workload stopped, exiting", silent.as_secs_f64());
            ExitCode::from(EXIT_CONTROLLER_LOST)
        }
    }
}

fn set_private(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
}
