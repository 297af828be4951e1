//! The agent's own log: `tracing` events, one line each on stderr (which the controller collects
//! at teardown), stamped with the Unix time in milliseconds.

use std::fmt;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// `sandbox-agent <seconds>.<milliseconds>`, the prefix of every line.
struct UnixMillis;

impl FormatTime for UnixMillis {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let ms = crate::journal::now_unix_ms();
        write!(w, "sandbox-agent {}.{:03}", ms / 1000, ms % 1000)
    }
}

/// Sends the agent's `info` and louder events to stderr. A second call changes nothing.
pub fn init() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_timer(UnixMillis)
        .with_target(false)
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .try_init();
}
