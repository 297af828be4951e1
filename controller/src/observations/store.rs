//! The run directory's event log: `observations.jsonl`, one JSON object per agent event,
//! append-only. Every batch is written and fdatasynced before the caller acknowledges it to the
//! agent; concurrent batches from several sandboxes share one fdatasync (group commit). A batch
//! that fails part-way (a full disk) is cut off again before anything else is written.
//!
//! The log is read back as a stream ([`events`]), one bounded line at a time, never whole. When
//! it is reopened ([`EventLog::open`]) what bounds the server keeps is recovered with the
//! sequence numbers: output kept per command, and the size of every file a sandbox sent.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
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
        /// Which run of the trial (from 0) of a metric measured several times a trial.
        #[serde(default, skip_serializing_if = "is_zero")]
        sample: u32,
    },
    Log {
        command_id: String,
        stream: String,
        #[serde(flatten)]
        data: Data,
        /// Set on the marker that stands where a command's output was cut (its text says so).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut: Option<OutputCut>,
    },
    PhaseStarted {
        command_id: String,
        phase: String,
        trial: u32,
    },
    /// A stepwise command ended its segment `index` (from 1) and waits for its next turn; with
    /// `untimed`, nothing timed follows in it.
    Yielded {
        command_id: String,
        index: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        untimed: bool,
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
        /// Why the chunk was not written (a path, offset, size or count out of bounds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
}

/// Output of one command that was not kept: the head and the tail of it are in the log, this
/// many bytes between them are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputCut {
    pub dropped_bytes: u64,
    pub total_bytes: u64,
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
/// would leave the sandbox's folder, or that no file system takes (too long, too deep, NUL).
pub fn sandbox_file(run_dir: &Path, sandbox: &str, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    let parts: Vec<std::path::Component> = relative.components().collect();
    let safe = !path.is_empty()
        && path.len() <= 512
        && !path.contains('\0')
        && parts.len() <= 16
        && parts.iter().all(|c| matches!(c, std::path::Component::Normal(n) if n.len() <= 255))
        && !sandbox.contains('/')
        && !sandbox.is_empty()
        && sandbox != ".."
        && sandbox != ".";
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

/// Longest line the log is read with. The server bounds every event far below it (output is cut
/// per command, texts are bounded); a longer line is not one it wrote.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Reads every event of a run directory's log, in file order. Holds them all: for tests and
/// small logs; the controller folds over [`events`] instead.
pub fn read_events(path: &Path) -> anyhow::Result<Vec<StoredEvent>> {
    events(path)?.collect()
}

/// The events of a log, one line at a time, in file order.
pub fn events(path: &Path) -> anyhow::Result<Events<BufReader<File>>> {
    let file = File::open(path).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    Ok(Events::new(BufReader::new(file), path))
}

/// An iterator over the events of a log; an error (a line that is not an event, or too long)
/// names the file and line, and ends the iteration.
pub struct Events<R> {
    reader: R,
    path: PathBuf,
    line: usize,
    buf: Vec<u8>,
    done: bool,
}

impl<R: BufRead> Events<R> {
    pub fn new(reader: R, path: &Path) -> Events<R> {
        Events { reader, path: path.to_path_buf(), line: 0, buf: Vec::new(), done: false }
    }
}

impl<R: BufRead> Iterator for Events<R> {
    type Item = anyhow::Result<StoredEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.line += 1;
        let at = format!("{}:{}", self.path.display(), self.line);
        let result = match read_line(&mut self.reader, &mut self.buf, MAX_LINE_BYTES) {
            Ok(false) => {
                self.done = true;
                return None;
            }
            Ok(true) => serde_json::from_slice(&self.buf).map_err(|e| anyhow::anyhow!("{at}: not an event: {e}")),
            Err(e) => Err(anyhow::anyhow!("{at}: {e}")),
        };
        self.done = result.is_err();
        Some(result)
    }
}

/// Reads one line (without its newline) into `buf`; false at the end. A line longer than `max`
/// is an error, read no further than `max` into memory.
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<bool> {
    buf.clear();
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (used, found) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let take = if found { used - 1 } else { used };
        if buf.len() + take > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a line longer than {max} bytes")));
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(used);
        if found {
            return Ok(true);
        }
    }
}

/// What the log holds, recovered when it is reopened.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The highest seq held per sandbox.
    pub last_seqs: HashMap<String, u64>,
    /// Output bytes kept per (sandbox, command).
    pub output_bytes: HashMap<(String, String), u64>,
    /// The size of every file a sandbox sent, per (sandbox, path), as written.
    pub file_sizes: HashMap<(String, String), u64>,
    /// Commands finished per (sandbox, command): the status and error of their `phase_done`.
    pub done: HashMap<(String, String), (String, String)>,
}

impl Recovered {
    fn track(&mut self, line: &[u8]) -> bool {
        #[derive(Deserialize)]
        struct Key {
            sandbox: String,
            seq: u64,
            #[serde(default)]
            kind: String,
            #[serde(default)]
            command_id: String,
            text: Option<String>,
            hex: Option<String>,
            path: Option<String>,
            #[serde(default)]
            offset: u64,
            #[serde(default)]
            bytes: u64,
            refused: Option<String>,
            status: Option<String>,
            error: Option<String>,
        }
        let Ok(key) = serde_json::from_slice::<Key>(line) else { return false };
        let seq = self.last_seqs.entry(key.sandbox.clone()).or_default();
        *seq = (*seq).max(key.seq);
        match key.kind.as_str() {
            "log" => {
                let n = key.text.map_or(0, |t| t.len()) + key.hex.map_or(0, |h| h.len() / 2);
                *self.output_bytes.entry((key.sandbox, key.command_id)).or_default() += n as u64;
            }
            "file" if key.refused.is_none() => {
                let size = self.file_sizes.entry((key.sandbox, key.path.unwrap_or_default())).or_default();
                *size = (*size).max(key.offset.saturating_add(key.bytes));
            }
            "phase_done" => {
                let outcome = (key.status.unwrap_or_default(), key.error.unwrap_or_default());
                self.done.insert((key.sandbox, key.command_id), outcome);
            }
            _ => {}
        }
        true
    }
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
    /// Opens the log, cutting a torn last line, and returns what it holds.
    pub fn open(path: &Path) -> io::Result<(EventLog, Recovered)> {
        EventLog::open_on(path, |file| file)
    }

    /// [`EventLog::open`], the writes going through `wrap(file)` (a file whose disk fills, in tests).
    fn open_on<F: LogFile>(path: &Path, wrap: impl FnOnce(File) -> F) -> io::Result<(EventLog, Recovered)> {
        let mut file = OpenOptions::new().create(true).truncate(false).read(true).append(true).open(path)?;
        let mut recovered = Recovered::default();
        let mut good_len = 0u64;
        {
            let mut reader = BufReader::new(&mut file);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = (&mut reader).take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut line)?;
                if n == 0 || line.last() != Some(&b'\n') || !recovered.track(&line) {
                    break;
                }
                good_len += n as u64;
            }
        }
        file.set_len(good_len)?;
        file.seek(SeekFrom::End(0))?;
        let file = wrap(file);
        let (tx, rx) = std_mpsc::channel::<WriteRequest>();
        let thread =
            std::thread::Builder::new().name("event-log".into()).spawn(move || write_loop(file, good_len, rx))?;
        Ok((EventLog { path: path.to_path_buf(), tx: Some(tx), thread: Some(thread) }, recovered))
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

/// What the writer needs of the log's file (opened to append): a seam for a disk that fills.
trait LogFile: Send + 'static {
    fn append_bytes(&mut self, bytes: &[u8]) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

impl LogFile for File {
    fn append_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        Write::write_all(self, bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
}

/// Writes the batches as they come, each made durable before it is acknowledged. A batch that
/// fails part-way (a full disk) is cut off again, back to the end of the last batch written
/// (`good_len`), so the log never holds a partial line that later lines would follow: it stays
/// readable to its end and a resume keeps every event acknowledged. While that cut cannot be
/// made, no batch is written.
fn write_loop(mut file: impl LogFile, mut good_len: u64, rx: std_mpsc::Receiver<WriteRequest>) {
    let mut torn = false;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut result = if torn { file.truncate(good_len) } else { Ok(()) };
        torn = false;
        let mut written = 0u64;
        for request in &batch {
            if result.is_err() {
                break;
            }
            result = file.append_bytes(&request.bytes);
            written += request.bytes.len() as u64;
        }
        let result = result.and_then(|()| file.sync());
        match &result {
            Ok(()) => good_len += written,
            Err(_) => torn = file.truncate(good_len).and_then(|()| file.sync()).is_err(),
        }
        for request in batch {
            let reply = match &result {
                Ok(()) => Ok(()),
                Err(err) => Err(io::Error::new(err.kind(), err.to_string())),
            };
            let _ = request.done.send(reply);
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
                sample: 0,
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
        let (log, recovered) = EventLog::open(&path).unwrap();
        assert_eq!(recovered, Recovered::default());
        let mut bytes = line("a", 1);
        bytes.extend(line("b", 1));
        bytes.extend(line("a", 2));
        log.append(bytes).await.unwrap();
        log.close().await;
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"sandbox\":\"a\",\"se").unwrap();

        let (log, recovered) = EventLog::open(&path).unwrap();
        assert_eq!(recovered.last_seqs, HashMap::from([("a".to_string(), 2), ("b".to_string(), 1)]));
        log.append(line("b", 2)).await.unwrap();
        log.close().await;
        let events = read_events(&path).unwrap();
        assert_eq!(
            events.iter().map(|e| (e.sandbox.as_str(), e.seq)).collect::<Vec<_>>(),
            [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
        );
    }

    /// A log file on a disk with `room` bytes left: a write past it writes what fits, then fails
    /// as a full disk does.
    struct Filling {
        file: File,
        room: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl LogFile for Filling {
        fn append_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
            use std::sync::atomic::Ordering;
            let room = self.room.load(Ordering::SeqCst);
            let fits = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            Write::write_all(&mut self.file, &bytes[..fits])?;
            self.room.fetch_sub(fits as u64, Ordering::SeqCst);
            if fits < bytes.len() {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            Ok(())
        }

        fn sync(&mut self) -> io::Result<()> {
            self.file.sync_data()
        }

        fn truncate(&mut self, len: u64) -> io::Result<()> {
            self.file.set_len(len)
        }
    }

    #[tokio::test]
    async fn an_append_that_fails_part_way_leaves_the_log_readable_and_loses_nothing_acknowledged() {
        use std::sync::atomic::Ordering;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OBSERVATIONS_FILE);
        let room = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
        let (log, _) = EventLog::open_on(&path, |file| Filling { file, room: room.clone() }).unwrap();
        let mut first = line("a", 1);
        first.extend(line("a", 2));
        log.append(first).await.unwrap();
        // The disk fills in the middle of the next batch: it is refused (never acknowledged).
        room.store(30, Ordering::SeqCst);
        let mut torn = line("a", 3);
        torn.extend(line("b", 1));
        assert!(log.append(torn).await.is_err());
        // Room again: the agents send the refused events again, and more; all acknowledged.
        room.store(u64::MAX, Ordering::SeqCst);
        let mut again = line("a", 3);
        again.extend(line("b", 1));
        log.append(again).await.unwrap();
        log.append(line("a", 4)).await.unwrap();
        log.close().await;
        let seqs = |events: Vec<StoredEvent>| events.iter().map(|e| (e.sandbox.clone(), e.seq)).collect::<Vec<_>>();
        let acknowledged = ["a1", "a2", "a3", "b1", "a4"].map(|s| (s[..1].to_string(), s[1..].parse::<u64>().unwrap()));
        // Rendering reads every acknowledged event, and a resume keeps them all.
        assert_eq!(seqs(read_events(&path).unwrap()), acknowledged);
        let (log, recovered) = EventLog::open(&path).unwrap();
        log.close().await;
        assert_eq!(recovered.last_seqs, HashMap::from([("a".to_string(), 4), ("b".to_string(), 1)]));
        assert_eq!(seqs(read_events(&path).unwrap()), acknowledged);
    }

    #[test]
    fn the_log_is_read_line_by_line_and_a_bad_or_huge_line_is_named() {
        let mut text = line("a", 1);
        text.extend(line("a", 2));
        let events: Vec<StoredEvent> =
            Events::new(text.as_slice(), Path::new("log")).collect::<anyhow::Result<_>>().unwrap();
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        // Without a final newline, the last line still counts.
        let trimmed = &text[..text.len() - 1];
        assert_eq!(Events::new(trimmed, Path::new("log")).count(), 2);
        let mut bad = line("a", 1);
        bad.extend(b"{not json}\n");
        bad.extend(line("a", 3));
        let results: Vec<_> = Events::new(bad.as_slice(), Path::new("log")).collect();
        assert_eq!(results.len(), 2, "an error ends the reading");
        assert!(results[1].as_ref().unwrap_err().to_string().starts_with("log:2: not an event"));
        // A line longer than the bound is refused without being read whole.
        let mut reader = std::io::BufReader::new(std::io::repeat(b'x').take(10_000));
        let mut buf = Vec::new();
        let err = read_line(&mut reader, &mut buf, 1000).unwrap_err();
        assert!(err.to_string().contains("longer than 1000 bytes") && buf.len() <= 1000);
    }

    #[tokio::test]
    async fn reopening_recovers_output_kept_and_file_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OBSERVATIONS_FILE);
        let event = |seq, body| StoredEvent { sandbox: "s".into(), seq, unix_ms: 1, body };
        let log = |data: Data| StoredBody::Log { command_id: "c".into(), stream: "stdout".into(), data, cut: None };
        let file = |offset, bytes, refused: Option<&str>| StoredBody::File {
            command_id: "c".into(),
            path: "t/a".into(),
            offset,
            bytes,
            last: false,
            refused: refused.map(String::from),
        };
        let mut bytes = Vec::new();
        for e in [
            event(1, log(Data::from_bytes(b"hello".to_vec()))),
            event(2, log(Data::from_bytes(vec![0xff, 0xfe]))),
            event(3, file(0, 10, None)),
            event(4, file(10, 5, None)),
            event(5, file(1000, 5, Some("past the end"))),
        ] {
            serde_json::to_writer(&mut bytes, &e).unwrap();
            bytes.push(b'\n');
        }
        std::fs::write(&path, bytes).unwrap();
        let (log, recovered) = EventLog::open(&path).unwrap();
        log.close().await;
        assert_eq!(recovered.last_seqs["s"], 5);
        assert_eq!(recovered.output_bytes[&("s".to_string(), "c".to_string())], 7);
        assert_eq!(recovered.file_sizes[&("s".to_string(), "t/a".to_string())], 15);
    }

    #[test]
    fn bytes_round_trip_as_text_or_hex() {
        assert_eq!(Data::from_bytes(b"hi".to_vec()), Data::Text { text: "hi".into() });
        assert_eq!(Data::from_bytes(vec![0xff, 0x00]), Data::Hex { hex: "ff00".into() });
        let json = serde_json::to_string(&StoredBody::Log {
            command_id: "c".into(),
            stream: "stdout".into(),
            data: Data::from_bytes(vec![0xff]),
            cut: None,
        })
        .unwrap();
        assert_eq!(json, r#"{"kind":"log","command_id":"c","stream":"stdout","hex":"ff"}"#);
    }
}
