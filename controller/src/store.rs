//! The run directory's event log: `observations.jsonl`, one JSON object per agent event,
//! append-only. Every batch is written and fdatasynced before the caller acknowledges it to the
//! agent; concurrent batches from several sandboxes share one fdatasync (group commit).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

pub const OBSERVATIONS_FILE: &str = "observations.jsonl";

/// One agent event as stored in `observations.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub sandbox: String,
    pub seq: u64,
    pub unix_ms: u64,
    #[serde(flatten)]
    pub body: StoredBody,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoredBody {
    Observation {
        command_id: String,
        metric: String,
        trial: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        unit: String,
    },
    Log {
        command_id: String,
        stream: String,
        #[serde(flatten)]
        data: Data,
    },
    PhaseStarted {
        command_id: String,
        phase: String,
        trial: u32,
    },
    PhaseDone {
        command_id: String,
        status: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        error: String,
    },
    /// A piece of a file the agent sent (a transcript); the bytes are in
    /// `sandboxes/<sandbox>/<path>` of the run directory.
    File {
        command_id: String,
        path: String,
        offset: u64,
        bytes: u64,
        last: bool,
    },
}

/// Bytes from the sandbox: kept as text when they are UTF-8, as hex otherwise, never altered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Data {
    Text { text: String },
    Hex { hex: String },
}

impl Data {
    pub fn from_bytes(bytes: Vec<u8>) -> Data {
        match String::from_utf8(bytes) {
            Ok(text) => Data::Text { text },
            Err(err) => Data::Hex { hex: err.into_bytes().iter().map(|b| format!("{b:02x}")).collect() },
        }
    }
}

/// Where a file sent by a sandbox's agent is kept in the run directory; None for a path that
/// would leave the sandbox's folder.
pub fn sandbox_file(run_dir: &Path, sandbox: &str, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    let safe = !path.is_empty()
        && relative.components().all(|c| matches!(c, std::path::Component::Normal(_)))
        && !sandbox.contains('/');
    safe.then(|| run_dir.join("sandboxes").join(sandbox).join(relative))
}

/// Writes a chunk of a sandbox's file at its offset, durably.
pub fn write_file_chunk(target: &Path, offset: u64, data: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(target)?;
    file.write_all_at(data, offset)?;
    file.sync_data()
}

/// Reads every event of a run directory's log, in file order.
pub fn read_events(path: &Path) -> anyhow::Result<Vec<StoredEvent>> {
    let file = File::open(path).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    let mut events = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        let event = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("{}:{}: not an event: {e}", path.display(), n + 1))?;
        events.push(event);
    }
    Ok(events)
}

struct WriteRequest {
    bytes: Vec<u8>,
    done: oneshot::Sender<io::Result<()>>,
}

/// The append-only writer of `observations.jsonl`.
pub struct EventLog {
    path: PathBuf,
    tx: Option<std_mpsc::Sender<WriteRequest>>,
    thread: Option<JoinHandle<()>>,
}

impl EventLog {
    /// Opens the log, cutting a torn last line, and returns the highest seq held per sandbox.
    pub fn open(path: &Path) -> io::Result<(EventLog, HashMap<String, u64>)> {
        let mut file = OpenOptions::new().create(true).truncate(false).read(true).append(true).open(path)?;
        let mut last_seq: HashMap<String, u64> = HashMap::new();
        let mut good_len = 0u64;
        {
            #[derive(Deserialize)]
            struct Key {
                sandbox: String,
                seq: u64,
            }
            let mut reader = BufReader::new(&mut file);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = reader.read_until(b'\n', &mut line)?;
                if n == 0 || line.last() != Some(&b'\n') {
                    break;
                }
                let Ok(key) = serde_json::from_slice::<Key>(&line) else { break };
                let seq = last_seq.entry(key.sandbox).or_default();
                *seq = (*seq).max(key.seq);
                good_len += n as u64;
            }
        }
        file.set_len(good_len)?;
        file.seek(SeekFrom::End(0))?;
        let (tx, rx) = std_mpsc::channel::<WriteRequest>();
        let thread = std::thread::Builder::new().name("event-log".into()).spawn(move || write_loop(file, rx))?;
        Ok((EventLog { path: path.to_path_buf(), tx: Some(tx), thread: Some(thread) }, last_seq))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends whole lines and returns once they are on disk.
    pub async fn append(&self, bytes: Vec<u8>) -> io::Result<()> {
        let (done, wait) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or_else(|| io::Error::other("event log closed"))?;
        tx.send(WriteRequest { bytes, done }).map_err(|_| io::Error::other("event log writer stopped"))?;
        wait.await.map_err(|_| io::Error::other("event log writer stopped"))?
    }

    /// Stops accepting writes and waits until everything already accepted is on disk.
    pub async fn close(mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

fn write_loop(mut file: File, rx: std_mpsc::Receiver<WriteRequest>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut result = Ok(());
        for request in &batch {
            if let Err(err) = file.write_all(&request.bytes) {
                result = Err(err);
                break;
            }
        }
        let result = result.and_then(|()| file.sync_data());
        for request in batch {
            let reply = match &result {
                Ok(()) => Ok(()),
                Err(err) => Err(io::Error::new(err.kind(), err.to_string())),
            };
            let _ = request.done.send(reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(sandbox: &str, seq: u64) -> Vec<u8> {
        let event = StoredEvent {
            sandbox: sandbox.into(),
            seq,
            unix_ms: 1,
            body: StoredBody::Observation {
                command_id: "c".into(),
                metric: "m".into(),
                trial: 0,
                value: Some(1.5),
                error: None,
                unit: "ms".into(),
            },
        };
        let mut bytes = serde_json::to_vec(&event).unwrap();
        bytes.push(b'\n');
        bytes
    }

    #[tokio::test]
    async fn recovers_last_seqs_and_cuts_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OBSERVATIONS_FILE);
        let (log, seqs) = EventLog::open(&path).unwrap();
        assert!(seqs.is_empty());
        let mut bytes = line("a", 1);
        bytes.extend(line("b", 1));
        bytes.extend(line("a", 2));
        log.append(bytes).await.unwrap();
        log.close().await;
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"sandbox\":\"a\",\"se").unwrap();

        let (log, seqs) = EventLog::open(&path).unwrap();
        assert_eq!(seqs, HashMap::from([("a".to_string(), 2), ("b".to_string(), 1)]));
        log.append(line("b", 2)).await.unwrap();
        log.close().await;
        let events = read_events(&path).unwrap();
        assert_eq!(
            events.iter().map(|e| (e.sandbox.as_str(), e.seq)).collect::<Vec<_>>(),
            [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
        );
    }

    #[test]
    fn bytes_round_trip_as_text_or_hex() {
        assert_eq!(Data::from_bytes(b"hi".to_vec()), Data::Text { text: "hi".into() });
        assert_eq!(Data::from_bytes(vec![0xff, 0x00]), Data::Hex { hex: "ff00".into() });
        let json = serde_json::to_string(&StoredBody::Log {
            command_id: "c".into(),
            stream: "stdout".into(),
            data: Data::from_bytes(vec![0xff]),
        })
        .unwrap();
        assert_eq!(json, r#"{"kind":"log","command_id":"c","stream":"stdout","hex":"ff"}"#);
    }
}
