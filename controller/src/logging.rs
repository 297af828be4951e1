//! The controller's diagnostics (`tracing`): warnings to stderr, and everything from `info` up
//! into the run directory's `controller.log` while a run is going. Measurements are never logged:
//! they travel as observations.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

static RUN_LOG: Mutex<Option<File>> = Mutex::new(None);

/// Writes to the current run's log file, or nowhere between runs.
struct RunLog;

impl Write for RunLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match RUN_LOG.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            Some(file) => file.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match RUN_LOG.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }
}

/// Installs the subscriber; `stderr_filter` is the user's `--log` filter.
pub fn init(stderr_filter: &str) {
    let stderr = tracing_subscriber::EnvFilter::try_new(stderr_filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(stderr))
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(|| RunLog)
                .with_filter(tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
}

/// Sends diagnostics to `path` (a run's `controller.log`) from now on.
pub fn to_file(path: &Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    *RUN_LOG.lock().unwrap_or_else(PoisonError::into_inner) = Some(file);
    Ok(())
}

/// Stops writing the run's log.
pub fn close_file() {
    RUN_LOG.lock().unwrap_or_else(PoisonError::into_inner).take();
}

#[cfg(test)]
mod tests {
    #[test]
    fn diagnostics_go_to_the_run_log_only_while_it_is_open() {
        super::init("off");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("controller.log");
        tracing::info!("before the run");
        super::to_file(&path).unwrap();
        tracing::info!(sandbox = "base", "prepare (untimed)");
        tracing::debug!("too detailed");
        super::close_file();
        tracing::info!("after the run");
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(log.contains("prepare (untimed)") && log.contains("sandbox=\"base\""), "{log}");
        assert!(
            !log.contains("before the run") && !log.contains("after the run") && !log.contains("too detailed"),
            "{log}"
        );
    }
}
