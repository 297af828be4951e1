//! The controller's diagnostics (`tracing`): to stderr as the user's `--log` filter says, and
//! into the run directory's `controller.log` (plain text, `info` and up from sandbench, `warn`
//! and up from its libraries) while a run is going. Measurements are never logged: they travel
//! as observations.
//!
//! Each message reaches a person once: without `--log`, while a run log is open, sandbench's own
//! warnings stay off stderr (the run's display shows what a person needs, and controller.log
//! keeps them all); libraries' warnings still show. Colour codes go to stderr only when it is
//! a terminal (and `NO_COLOR` is unset), never into a file.
//!
//! The binary installs the subscriber once ([`init`]); a run opens its log ([`RunLog::open`], or
//! [`to_file`] and [`close_file`]) and every event from then on, from any thread, lands in it
//! until it is closed. Several logs open at once (runs side by side in one process, as in tests)
//! each receive every event.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// What the run logs receive, whatever `--log` says.
const RUN_LOG_FILTER: &str = "warn,sandbench=info";

/// The open run logs, by the id of their [`RunLog`].
static OPEN: Mutex<Vec<(u64, File)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
/// The log opened by [`to_file`].
static CURRENT: Mutex<Option<RunLog>> = Mutex::new(None);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What stderr shows when `--log` is not given.
const DEFAULT_STDERR_FILTER: &str = "warn";

/// Installs the subscriber; `stderr_filter` is the user's `--log` filter (None: `warn`, and
/// sandbench's own events stay off stderr while a run log is open; an invalid one means `warn`).
/// Does nothing when a subscriber is installed already.
pub fn init(stderr_filter: Option<&str>) {
    let stderr = targets(stderr_filter.unwrap_or(DEFAULT_STDERR_FILTER));
    let explicit = stderr_filter.is_some();
    // Dynamic: whether a run log is open changes over time, so the answer is never cached.
    let not_shown_elsewhere =
        tracing_subscriber::filter::dynamic_filter_fn(move |meta, _| explicit || !shown_by_the_run(meta.target()));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .fmt_fields(sanitized_fields())
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::filter::FilterExt::and(stderr, not_shown_elsewhere)),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .fmt_fields(sanitized_fields())
                .with_writer(|| RunLogWriter)
                .with_filter(targets(RUN_LOG_FILTER)),
        )
        .try_init();
}

/// A filter of `level` and `target=level` directives, comma-separated (`warn,sandbench=debug`);
/// an invalid one means [`DEFAULT_STDERR_FILTER`]. (tracing-subscriber's `Targets`: the same
/// directives as `RUST_LOG` without span and field filters, and without the regular-expression
/// engine `EnvFilter` compiles in.)
fn targets(filter: &str) -> tracing_subscriber::filter::Targets {
    filter.parse().unwrap_or_else(|_| DEFAULT_STDERR_FILTER.parse().unwrap_or_default())
}

/// Event fields as the default formatter writes them (`message`, then `name=value`), each value
/// with escape sequences and controls removed ([`crate::sanitize::terminal`]): a revision, a
/// spec name or a sandbox's error text in a field can neither drive the operator's terminal nor
/// hide in controller.log. (tracing-subscriber escapes the message only.)
fn sanitized_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = format!("{value:?}");
        let text = crate::sanitize::terminal(&text);
        match field.name() {
            "message" => write!(writer, "{text}"),
            name => write!(writer, "{name}={text}"),
        }
    })
    .delimited(" ")
}

/// Whether an event of `target` is the run's to show: sandbench's own, while a run log is open.
fn shown_by_the_run(target: &str) -> bool {
    (target == "sandbench" || target.starts_with("sandbench::")) && !lock(&OPEN).is_empty()
}

/// A run's log file, receiving diagnostics until this value is dropped.
#[derive(Debug)]
pub struct RunLog {
    id: u64,
}

impl RunLog {
    /// Opens `path` (a run's `controller.log`) for appending, and sends diagnostics to it.
    pub fn open(path: &Path) -> std::io::Result<RunLog> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        lock(&OPEN).push((id, file));
        Ok(RunLog { id })
    }
}

impl Drop for RunLog {
    fn drop(&mut self) {
        let mut open = lock(&OPEN);
        if let Some(at) = open.iter().position(|(id, _)| *id == self.id) {
            let (_, mut file) = open.remove(at);
            let _ = file.flush();
        }
    }
}

/// Sends diagnostics to `path` (a run's `controller.log`) from now on, in place of the file an
/// earlier call opened.
pub fn to_file(path: &Path) -> std::io::Result<()> {
    let log = RunLog::open(path)?;
    *lock(&CURRENT) = Some(log);
    Ok(())
}

/// Closes the file [`to_file`] opened.
pub fn close_file() {
    lock(&CURRENT).take();
}

/// Writes each formatted event (one `write` per event) to every open run log.
struct RunLogWriter;

impl Write for RunLogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for (_, file) in lock(&OPEN).iter_mut() {
            // A full disk must not fail the run: the event is lost from this file only.
            let _ = file.write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        for (_, file) in lock(&OPEN).iter_mut() {
            let _ = file.flush();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sandbench_proto::Side;

    #[test]
    fn diagnostics_go_to_the_run_log_only_while_it_is_open_and_in_plain_text() {
        super::init(Some("off"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("controller.log");
        tracing::info!("before the run");
        let run_log = super::RunLog::open(&path).unwrap();
        tracing::info!(run = "r1", "run started");
        tracing::info!(sandbox = %Side::Base, "prepare (untimed)");
        // A revision or a sandbox's error text in a field, not only in the message.
        let hostile = "\u{1b}]0;owned\u{7}main\u{9b}2J\u{202e}";
        tracing::info!(base = %hostile, error = ?hostile, "hostile {hostile}");
        tracing::debug!("too detailed");
        tracing::warn!(target: "h2", "a library's warning");
        tracing::info!(target: "h2", "a library's chatter");
        // From another thread, as the runtime's workers log.
        std::thread::spawn(|| tracing::warn!("sandbox head: removal failed")).join().unwrap();
        drop(run_log);
        tracing::info!("after the run");
        let log = std::fs::read_to_string(&path).unwrap();
        for line in
            ["run started", "sandbox=base", "prepare (untimed)", "a library's warning", "removal failed", "base=main"]
        {
            assert!(log.contains(line), "{line:?} missing from:\n{log}");
        }
        for line in ["before the run", "after the run", "too detailed", "a library's chatter"] {
            assert!(!log.contains(line), "{line:?} in:\n{log}");
        }
        assert!(!log.contains('\x1b'), "colour codes in:\n{log}");
        assert!(!log.chars().any(|c| c == '\u{9b}' || c == '\u{202e}' || c == '\u{7}'), "controls in:\n{log}");
    }

    #[test]
    fn runs_side_by_side_each_get_their_log() {
        super::init(Some("off"));
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
        let first = super::RunLog::open(&a).unwrap();
        tracing::info!("only the first is open");
        let second = super::RunLog::open(&b).unwrap();
        tracing::info!("both are open");
        drop(first);
        tracing::info!("only the second is open");
        drop(second);
        let (a, b) = (std::fs::read_to_string(&a).unwrap(), std::fs::read_to_string(&b).unwrap());
        assert!(a.contains("only the first") && a.contains("both are open") && !a.contains("only the second"), "{a}");
        assert!(!b.contains("only the first") && b.contains("both are open") && b.contains("only the second"), "{b}");
    }

    #[test]
    fn while_a_run_log_is_open_sandbenchs_own_events_are_the_runs_to_show() {
        let dir = tempfile::tempdir().unwrap();
        let log = super::RunLog::open(&dir.path().join("controller.log")).unwrap();
        assert!(super::shown_by_the_run("sandbench"));
        assert!(super::shown_by_the_run("sandbench::run"));
        assert!(!super::shown_by_the_run("h2::proto"), "libraries' warnings still reach stderr");
        assert!(!super::shown_by_the_run("sandbenchx"));
        drop(log);
    }
}
