//! The durable outbox: every event is appended to a file on the sandbox's disk before it is sent,
//! so an agent that is killed, or loses its controller, resends exactly what was not acknowledged.
//!
//! Record layout: `len: u32 LE | crc32(payload): u32 LE | payload` where the payload is a
//! protobuf-encoded `Event`. Sequence numbers are contiguous from 1. A torn or corrupt tail (a
//! crash in the middle of a write) is cut off when the journal is opened.
//!
//! The journal's size is bounded ([`MAX_JOURNAL_BYTES`]): past it, output and files are dropped
//! (after one note saying so) and only the small events (phases, observations) are still kept;
//! past a further margin appends fail, and the agent stops with an error rather than fill the
//! sandbox's disk.
//!
//! A full disk (the product filled the sandbox's bound) must not end the agent before it says
//! so: a reserve file ([`RESERVE_BYTES`]) is written beside the journal when it opens, and the
//! first append that fails for a full disk removes it, drops output and files from then on
//! (after a note saying why) and is tried again.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use sandbench_proto::v1::{Event, event};

const HEADER_BYTES: usize = 8;
/// Largest record accepted when reading back; anything bigger is corruption.
const MAX_RECORD_BYTES: usize = 2 * sandbench_proto::MAX_CHUNK_BYTES;
/// Journal size past which output and files are no longer recorded.
pub const MAX_JOURNAL_BYTES: u64 = 512 << 20;
/// Room past [`MAX_JOURNAL_BYTES`] for phase events and observations, after which appends fail.
const SMALL_EVENTS_ROOM: u64 = 64 << 20;

/// Room kept on the sandbox's disk for the journal, given back when the disk is full.
const RESERVE_BYTES: usize = 4 << 20;

/// One file offset is remembered for every this many events, to find a seq quickly on replay.
const INDEX_STRIDE: u64 = 1024;

/// What the journal holds about one command, so a restarted agent neither reruns a finished
/// command nor repeats the observations it already recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandProgress {
    pub started: bool,
    pub observations: u64,
    pub done: bool,
}

/// Progress of every command seen in the journal, shared with the command dispatcher.
pub type Progress = Arc<Mutex<HashMap<String, CommandProgress>>>;

/// Offsets of seq 1, 1 + STRIDE, 1 + 2·STRIDE, …
type SeqIndex = Arc<Mutex<Vec<u64>>>;

/// The writing end. Owned by one thread.
pub struct Journal {
    path: PathBuf,
    file: File,
    len: u64,
    last_seq: u64,
    index: SeqIndex,
    progress: Progress,
    buf: Vec<u8>,
    /// Size past which output and files are dropped.
    limit: u64,
    /// Output and file events dropped for the size bound.
    dropped: u64,
    /// The reserve file, until a full disk used it.
    reserve: Option<PathBuf>,
    /// The disk was full: output and files are dropped for that, not for the size bound.
    disk_full: bool,
}

impl Journal {
    /// Opens (or creates) the journal at `path`, recovering its state and cutting a torn tail.
    pub fn open(path: &Path) -> io::Result<Journal> {
        let mut file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
        let mut index = Vec::new();
        let mut progress = HashMap::new();
        let mut reader = BufReader::new(&mut file);
        let mut offset = 0u64;
        let mut last_seq = 0u64;
        // A torn record, or a broken sequence, ends the journal: the rest is corrupt.
        while let Record::Event(event, size) = read_record(&mut reader)? {
            if event.seq != last_seq + 1 {
                break;
            }
            if (event.seq - 1).is_multiple_of(INDEX_STRIDE) {
                index.push(offset);
            }
            track(&mut progress, &event);
            last_seq = event.seq;
            offset += size as u64;
        }
        drop(reader);
        file.set_len(offset)?;
        file.seek(SeekFrom::Start(offset))?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            len: offset,
            last_seq,
            index: Arc::new(Mutex::new(index)),
            progress: Arc::new(Mutex::new(progress)),
            buf: Vec::with_capacity(64 * 1024),
            limit: MAX_JOURNAL_BYTES,
            dropped: 0,
            reserve: make_reserve(&path.with_extension("reserve")),
            disk_full: false,
        })
    }

    /// Sets the size past which output and files are dropped (tests use a small one).
    pub fn with_limit(mut self, limit: u64) -> Journal {
        self.limit = limit;
        self
    }

    /// Past the size bound: drops output and files (noting it once), and refuses everything
    /// past the margin kept for the small events.
    fn bound(&mut self, bodies: Vec<event::Body>) -> io::Result<Vec<event::Body>> {
        if self.len < self.limit {
            return Ok(bodies);
        }
        if self.len >= self.limit + SMALL_EVENTS_ROOM {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!("the journal holds {} bytes, past its bound of {} bytes", self.len, self.limit),
            ));
        }
        let mut kept = Vec::with_capacity(bodies.len());
        for body in bodies {
            let command_id = match &body {
                event::Body::Log(log) => log.command_id.clone(),
                event::Body::File(file) => file.command_id.clone(),
                _ => {
                    kept.push(body);
                    continue;
                }
            };
            if self.dropped == 0 {
                let note = if self.disk_full {
                    "[sandbox-agent: the sandbox's disk is full; output and files are no longer recorded]\n".to_string()
                } else {
                    format!(
                        "[sandbox-agent: the journal passed {} bytes; output and files are no longer recorded]\n",
                        self.limit
                    )
                };
                kept.push(event::Body::Log(sandbench_proto::v1::Log {
                    command_id,
                    stream: sandbench_proto::v1::LogStream::Agent as i32,
                    chunk: note.into_bytes(),
                }));
            }
            self.dropped += 1;
        }
        Ok(kept)
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn progress(&self) -> Progress {
        self.progress.clone()
    }

    /// What readers need to find events in this journal; usable from any thread.
    pub fn source(&self) -> JournalSource {
        JournalSource { path: self.path.clone(), index: self.index.clone() }
    }

    /// Appends events, assigning consecutive seqs, and makes them durable (one fdatasync for the
    /// whole batch). Returns the last seq written.
    pub fn append(&mut self, bodies: Vec<event::Body>) -> io::Result<u64> {
        // A note about dropped output counts once it is written.
        let dropped_before = self.dropped;
        let bodies = self.bound(bodies)?;
        if bodies.is_empty() {
            return Ok(self.last_seq);
        }
        let unix_ms = now_unix_ms();
        self.buf.clear();
        let mut offsets = Vec::new();
        let mut events = Vec::with_capacity(bodies.len());
        let mut seq = self.last_seq;
        for body in bodies {
            seq += 1;
            if (seq - 1).is_multiple_of(INDEX_STRIDE) {
                offsets.push(self.len + self.buf.len() as u64);
            }
            let event = Event { seq, unix_ms, body: Some(body) };
            let payload_len = event.encoded_len();
            self.buf.extend_from_slice(&(payload_len as u32).to_le_bytes());
            let crc_at = self.buf.len();
            self.buf.extend_from_slice(&[0; 4]);
            event.encode(&mut self.buf).map_err(io::Error::other)?;
            let crc = crc32(&self.buf[crc_at + 4..]);
            self.buf[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
            events.push(event);
        }
        if let Err(err) = self.file.write_all(&self.buf).and_then(|()| self.file.sync_data()) {
            // Leave the file as it was, so seqs stay contiguous after a transient failure.
            let _ = self.file.set_len(self.len);
            let _ = self.file.seek(SeekFrom::Start(self.len));
            if is_disk_full(&err)
                && let Some(reserve) = self.reserve.take()
            {
                let _ = std::fs::remove_file(&reserve);
                self.disk_full = true;
                self.limit = self.limit.min(self.len);
                self.dropped = 0;
                return self.append(events.into_iter().filter_map(|e| e.body).collect());
            }
            self.dropped = dropped_before;
            return Err(err);
        }
        self.len += self.buf.len() as u64;
        self.last_seq = seq;
        if self.buf.capacity() > 1024 * 1024 {
            self.buf = Vec::with_capacity(64 * 1024);
        }
        lock(&self.index).extend(offsets);
        let mut progress = lock(&self.progress);
        for event in &events {
            track(&mut progress, event);
        }
        Ok(seq)
    }
}

/// Writes the reserve file at `path` (zeros: allocated, not a hole); None when it cannot.
fn make_reserve(path: &Path) -> Option<PathBuf> {
    let written = File::create(path)
        .and_then(|mut file| file.write_all(&vec![0u8; RESERVE_BYTES]).and_then(|()| file.sync_data()));
    match written {
        Ok(()) => Some(path.to_path_buf()),
        Err(err) => {
            tracing::warn!(
                "cannot keep {} bytes in reserve for the journal ({}): {err}",
                RESERVE_BYTES,
                path.display()
            );
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

/// Whether a write failed for a full disk or a used-up disk quota.
fn is_disk_full(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Opens readers on a journal whose writer lives on another thread.
#[derive(Clone)]
pub struct JournalSource {
    path: PathBuf,
    index: SeqIndex,
}

impl JournalSource {
    /// A reader positioned at `seq` (the first event it returns has that seq, if it exists).
    pub fn reader_at(&self, seq: u64) -> io::Result<JournalReader> {
        JournalReader::open(&self.path, &self.index, seq)
    }
}

/// Reads events back, in seq order, for sending.
pub struct JournalReader {
    reader: BufReader<File>,
    next_seq: u64,
}

impl JournalReader {
    fn open(path: &Path, index: &SeqIndex, seq: u64) -> io::Result<JournalReader> {
        let seq = seq.max(1);
        let slot = ((seq - 1) / INDEX_STRIDE) as usize;
        let (start_seq, offset) = {
            let index = lock(index);
            match index.get(slot) {
                Some(&offset) => (slot as u64 * INDEX_STRIDE + 1, offset),
                None => match index.last() {
                    Some(&offset) => ((index.len() as u64 - 1) * INDEX_STRIDE + 1, offset),
                    None => (1, 0),
                },
            }
        };
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut reader = JournalReader { reader: BufReader::with_capacity(64 * 1024, file), next_seq: start_seq };
        while reader.next_seq < seq {
            match read_record(&mut reader.reader)? {
                Record::Event(..) => reader.next_seq += 1,
                Record::End | Record::Torn => break,
            }
        }
        Ok(reader)
    }

    /// The seq of the next event this reader returns.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Reads events up to and including `durable_seq`, at most `max_events` or about `max_bytes`.
    /// Never reads past `durable_seq`, so it never meets a record still being written.
    pub fn read_batch(&mut self, durable_seq: u64, max_events: usize, max_bytes: usize) -> io::Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut bytes = 0;
        while self.next_seq <= durable_seq && events.len() < max_events && bytes < max_bytes {
            match read_record(&mut self.reader)? {
                Record::Event(event, size) => {
                    if event.seq != self.next_seq {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("journal holds seq {} where {} was expected", event.seq, self.next_seq),
                        ));
                    }
                    self.next_seq += 1;
                    bytes += size;
                    events.push(event);
                }
                Record::End | Record::Torn => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("journal ends before durable seq {durable_seq}"),
                    ));
                }
            }
        }
        Ok(events)
    }
}

enum Record {
    Event(Event, usize),
    End,
    Torn,
}

fn read_record(reader: &mut impl Read) -> io::Result<Record> {
    let mut header = [0u8; HEADER_BYTES];
    match read_full(reader, &mut header)? {
        0 => return Ok(Record::End),
        HEADER_BYTES => {}
        _ => return Ok(Record::Torn),
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_RECORD_BYTES {
        return Ok(Record::Torn);
    }
    let mut payload = vec![0; len];
    if read_full(reader, &mut payload)? != len || crc32(&payload) != crc {
        return Ok(Record::Torn);
    }
    match Event::decode(payload.as_slice()) {
        Ok(event) => Ok(Record::Event(event, HEADER_BYTES + len)),
        Err(_) => Ok(Record::Torn),
    }
}

/// Like `read_exact`, but reports how many bytes were read before the end of the file.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn track(progress: &mut HashMap<String, CommandProgress>, event: &Event) {
    match &event.body {
        Some(event::Body::PhaseStarted(started)) => {
            progress.entry(started.command_id.clone()).or_default().started = true;
        }
        Some(event::Body::Observation(observation)) => {
            progress.entry(observation.command_id.clone()).or_default().observations += 1;
        }
        Some(event::Body::PhaseDone(done)) => {
            progress.entry(done.command_id.clone()).or_default().done = true;
        }
        _ => {}
    }
}

pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), as used by zlib and gzip.
fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            }
            *slot = c;
        }
        table
    });
    let mut crc = !0u32;
    for &byte in data {
        crc = table[((crc ^ byte as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbench_proto::v1::{Observation, PhaseDone, observation};

    fn obs(command: &str, trial: u32) -> event::Body {
        event::Body::Observation(Observation {
            command_id: command.into(),
            metric: "m".into(),
            trial,
            outcome: Some(observation::Outcome::Value(trial as f64)),
            unit: String::new(),
            sample: 0,
        })
    }

    fn log(command: &str, bytes: usize) -> event::Body {
        event::Body::Log(sandbench_proto::v1::Log { command_id: command.into(), stream: 1, chunk: vec![b'y'; bytes] })
    }

    #[test]
    fn past_its_bound_the_journal_drops_output_with_a_note_and_keeps_observations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut journal = Journal::open(&path).unwrap().with_limit(10_000);
        for _ in 0..20 {
            journal.append(vec![log("c", 1000)]).unwrap();
        }
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len < 12_000, "{len} bytes");
        let seq = journal.append(vec![log("c", 1000), obs("c", 1), log("c", 10)]).unwrap();
        let events = journal.source().reader_at(1).unwrap().read_batch(seq, usize::MAX, usize::MAX).unwrap();
        let notes: Vec<_> = events
            .iter()
            .filter_map(|e| match &e.body {
                Some(event::Body::Log(l)) if l.stream == sandbench_proto::v1::LogStream::Agent as i32 => {
                    Some(String::from_utf8_lossy(&l.chunk).to_string())
                }
                _ => None,
            })
            .collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("no longer recorded"), "{notes:?}");
        assert!(matches!(events.last().unwrap().body, Some(event::Body::Observation(_))));
        // Past the margin for small events, appends fail instead of filling the disk.
        let mut journal = Journal::open(&path).unwrap().with_limit(0);
        journal.len = SMALL_EVENTS_ROOM;
        let err = journal.append(vec![obs("c", 2)]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
    }

    #[test]
    fn a_full_disk_gives_back_the_reserve_and_then_drops_output_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut journal = Journal::open(&path).unwrap();
        let reserve = dir.path().join("journal.reserve");
        assert_eq!(std::fs::metadata(&reserve).unwrap().len(), RESERVE_BYTES as u64);
        journal.append(vec![obs("c", 0)]).unwrap();
        // Every write fails with ENOSPC: the reserve goes, the append is tried again, then fails.
        let real = std::mem::replace(&mut journal.file, OpenOptions::new().write(true).open("/dev/full").unwrap());
        let err = journal.append(vec![log("c", 10), obs("c", 1)]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert!(!reserve.exists() && journal.disk_full);
        // Room again: observations are kept, output dropped after one note saying why.
        journal.file = real;
        let seq = journal.append(vec![log("c", 10), obs("c", 1)]).unwrap();
        assert_eq!(seq, 3);
        let events = journal.source().reader_at(2).unwrap().read_batch(seq, usize::MAX, usize::MAX).unwrap();
        let Some(event::Body::Log(note)) = &events[0].body else { panic!("{events:?}") };
        assert!(String::from_utf8_lossy(&note.chunk).contains("the sandbox's disk is full"), "{note:?}");
        assert!(matches!(events[1].body, Some(event::Body::Observation(_))));
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn appends_survive_reopen_and_replay_from_any_seq() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut journal = Journal::open(&path).unwrap();
        let bodies: Vec<_> = (0..5000).map(|i| obs("c1", i)).collect();
        assert_eq!(journal.append(bodies).unwrap(), 5000);
        drop(journal);

        let journal = Journal::open(&path).unwrap();
        assert_eq!(journal.last_seq(), 5000);
        assert_eq!(journal.progress().lock().unwrap()["c1"].observations, 5000);
        for start in [1, 2, 1024, 1025, 2049, 4999, 5000, 5001] {
            let mut reader = journal.source().reader_at(start).unwrap();
            assert_eq!(reader.next_seq(), start);
            let events = reader.read_batch(5000, usize::MAX, usize::MAX).unwrap();
            assert_eq!(events.len() as u64, 5001 - start);
            if let Some(first) = events.first() {
                assert_eq!(first.seq, start);
            }
        }
    }

    #[test]
    fn a_torn_tail_is_cut_and_seqs_continue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut journal = Journal::open(&path).unwrap();
        journal.append((0..10).map(|i| obs("c", i)).collect()).unwrap();
        drop(journal);
        // Half a record at the end, as a crash in the middle of write(2) would leave.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[40, 0, 0, 0, 1, 2, 3, 4, 9, 9]).unwrap();
        drop(file);

        let mut journal = Journal::open(&path).unwrap();
        assert_eq!(journal.last_seq(), 10);
        let done = event::Body::PhaseDone(PhaseDone { command_id: "c".into(), status: 1, error: String::new() });
        assert_eq!(journal.append(vec![done]).unwrap(), 11);
        let progress = journal.progress().lock().unwrap()["c"].clone();
        assert_eq!(progress, CommandProgress { started: false, observations: 10, done: true });
        let events = journal.source().reader_at(1).unwrap().read_batch(11, usize::MAX, usize::MAX).unwrap();
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=11).collect::<Vec<_>>());
    }

    #[test]
    fn a_corrupt_record_ends_the_journal_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut journal = Journal::open(&path).unwrap();
        journal.append((0..3).map(|i| obs("c", i)).collect()).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let journal = Journal::open(&path).unwrap();
        assert_eq!(journal.last_seq(), 2);
        assert!(std::fs::metadata(&path).unwrap().len() < len);
    }
}
