//! The bridge's request log in the run directory (`registries.jsonl`, one JSON object a line),
//! bounded: at most [`LOG_CAP_BYTES`] in all, and at most [`REFUSALS_LOGGED`] refused requests
//! a sandbox. What is past either is counted, not logged; the count is the log's last line
//! (`{"unlogged": N, …}`), written when the bridge closes, and in the report's warnings.

use std::collections::HashMap;
use std::io::Write;

/// The log's size at most.
pub const LOG_CAP_BYTES: u64 = 32 << 20;
/// Refused requests logged a sandbox at most (a loop of refusals is counted, not logged).
pub const REFUSALS_LOGGED: u64 = 1000;
/// Room kept for the closing line.
const CLOSING_ROOM: u64 = 512;

/// The log being written.
pub struct RequestLog {
    file: std::fs::File,
    written: u64,
    cap: u64,
    refusals: HashMap<String, u64>,
    unlogged: u64,
    /// Whether the log stopped taking lines because it is full (said once, in the log).
    full: bool,
}

impl RequestLog {
    /// A log appending to `file`, which holds `written` bytes already.
    pub fn new(file: std::fs::File, written: u64) -> RequestLog {
        RequestLog::with_cap(file, written, LOG_CAP_BYTES)
    }

    fn with_cap(file: std::fs::File, written: u64, cap: u64) -> RequestLog {
        RequestLog { file, written, cap, refusals: HashMap::new(), unlogged: 0, full: false }
    }

    /// Logs the line `line` makes (a request of `sandbox`), or counts it when the log or the
    /// sandbox's refusals are past their bound (the line is then not made).
    pub fn record(&mut self, sandbox: &str, refused: bool, line: impl FnOnce() -> serde_json::Value) {
        if refused {
            let seen = self.refusals.entry(sandbox.to_string()).or_default();
            *seen += 1;
            if *seen > REFUSALS_LOGGED {
                self.unlogged += 1;
                return;
            }
        }
        if self.full {
            self.unlogged += 1;
            return;
        }
        let mut text = line().to_string();
        text.push('\n');
        if self.full || self.written + text.len() as u64 > self.cap.saturating_sub(CLOSING_ROOM) {
            self.unlogged += 1;
            if !self.full {
                self.full = true;
                self.append(&serde_json::json!({ "log_full": true, "cap_bytes": self.cap }));
            }
            return;
        }
        if self.file.write_all(text.as_bytes()).is_ok() {
            self.written += text.len() as u64;
        } else {
            self.unlogged += 1;
        }
    }

    /// Requests counted but not logged.
    pub fn unlogged(&self) -> u64 {
        self.unlogged
    }

    fn append(&mut self, value: &serde_json::Value) {
        let text = format!("{value}\n");
        if self.file.write_all(text.as_bytes()).is_ok() {
            self.written += text.len() as u64;
        }
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        if self.unlogged > 0 {
            let why = format!(
                "past the log's cap ({} bytes) or {REFUSALS_LOGGED} refusals a sandbox: counted, not logged",
                self.cap
            );
            self.append(&serde_json::json!({ "unlogged": self.unlogged, "reason": why }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_cap_the_log_counts_and_says_so_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let file = std::fs::File::create(&path).unwrap();
        let mut log = RequestLog::with_cap(file, 0, 4096);
        let line = serde_json::json!({ "url": "x".repeat(100) });
        for _ in 0..100 {
            log.record("a", false, || line.clone());
        }
        for _ in 0..(REFUSALS_LOGGED + 5) {
            log.record("b", true, || serde_json::json!({}));
        }
        let unlogged = log.unlogged();
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() as u64 <= 4096, "{}", text.len());
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["unlogged"], unlogged);
        let logged = text.lines().filter(|l| l.contains("xxx")).count() as u64;
        assert_eq!(logged + unlogged, 100 + REFUSALS_LOGGED + 5);
        assert_eq!(text.lines().filter(|l| l.contains("log_full")).count(), 1);
    }
}
