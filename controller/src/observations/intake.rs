//! The bounds on what agents send, kept by the server before anything reaches the run
//! directory: a command's output is kept as its head and its tail up to a cap, with a marker
//! saying how much was cut between them ([`Outputs`]); file chunks must name a safe path, stay
//! contiguous and within sizes and counts ([`Files`]); texts are bounded ([`text`]); refused
//! Hellos are counted, a few kept, their logging and answers rate-limited ([`Refusals`]).
//!
//! The workload in a sandbox controls what its processes print, and an agent that misbehaves
//! must not fill the controller's disk or memory either.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use sandbench_proto::cap::{Cuts, HeadTail};

use crate::observations::store::{Data, OutputCut, StoredBody, StoredEvent};

pub use sandbench_proto::DEFAULT_OUTPUT_CAP_BYTES;
/// Commands of one sandbox whose output is followed at once; beyond, the oldest is closed.
const MAX_OPEN_COMMANDS: usize = 64;
/// Bytes the tails of one sandbox's open commands hold in all; beyond, the least recently used
/// other command is closed (its tail goes to the log). 16 MiB: the tails of 32 commands at the
/// default cap; a single command's tail (half its cap) is always kept whole.
const MAX_TAIL_BYTES_PER_SANDBOX: u64 = 16 << 20;
/// Ended commands remembered per sandbox: output they still send is not kept.
const MAX_ENDED_COMMANDS: usize = 4096;
/// Longest error text kept (a phase's or an observation's).
pub const MAX_ERROR_BYTES: usize = 16 << 10;
/// Longest name kept (metric, unit, command id, phase).
pub const MAX_NAME_BYTES: usize = 256;

/// A text from an agent, cut to `max` bytes with a note of what was cut.
pub fn text(value: String, max: usize) -> String {
    match crate::sanitize::bounded(&value, max) {
        std::borrow::Cow::Borrowed(_) => value,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

/// Bounds on the files one sandbox sends (transcripts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    pub max_files: usize,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
}

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits { max_files: 1024, max_file_bytes: 64 << 20, max_total_bytes: 512 << 20 }
    }
}

/// The files one sandbox sent: their sizes as written.
#[derive(Debug, Default)]
pub struct Files {
    sizes: HashMap<String, u64>,
    total: u64,
    refused: u64,
}

impl Files {
    pub fn recovered(sizes: impl IntoIterator<Item = (String, u64)>) -> Files {
        let sizes: HashMap<String, u64> = sizes.into_iter().collect();
        let total = sizes.values().sum();
        Files { sizes, total, refused: 0 }
    }

    /// Counts a refused chunk; returns how many were refused so far.
    pub fn note_refusal(&mut self) -> u64 {
        self.refused += 1;
        self.refused
    }

    /// Checks a chunk of `path` (already known to be a safe relative path) at `offset`; on
    /// success it is counted as written.
    pub fn admit(&mut self, limits: &FileLimits, path: &str, offset: u64, len: usize) -> Result<(), String> {
        if len > sandbench_proto::MAX_CHUNK_BYTES {
            return Err(format!("a chunk of {len} bytes, more than {}", sandbench_proto::MAX_CHUNK_BYTES));
        }
        let known = self.sizes.get(path).copied();
        if known.is_none() && self.sizes.len() >= limits.max_files {
            return Err(format!("more than {} files", limits.max_files));
        }
        let size = known.unwrap_or(0);
        if offset > size {
            return Err(format!("a chunk at offset {offset}, past the end of the file ({size} bytes)"));
        }
        let end = offset.checked_add(len as u64).ok_or("an offset past any file size")?;
        let grown = end.saturating_sub(size);
        if end > limits.max_file_bytes {
            return Err(format!("the file would pass {} bytes", limits.max_file_bytes));
        }
        if self.total + grown > limits.max_total_bytes {
            return Err(format!("the sandbox's files would pass {} bytes", limits.max_total_bytes));
        }
        self.sizes.insert(path.to_string(), size.max(end));
        self.total += grown;
        Ok(())
    }
}

/// Where a piece of output waiting in a command's tail came from: its last event's sequence
/// number, its first one's time, its stream.
#[derive(Debug, Clone)]
struct Piece {
    seq: u64,
    unix_ms: u64,
    stream: String,
}

impl Piece {
    /// Consecutive pieces of one stream are joined: a flood of tiny chunks costs no more than
    /// one.
    fn join(held: &mut Piece, new: &Piece) -> bool {
        let same = held.stream == new.stream;
        if same {
            held.seq = new.seq;
        }
        same
    }
}

/// One command's output as it comes: the head is let through, the rest waits in a tail that
/// keeps only its last bytes ([`HeadTail`], cut between UTF-8 characters).
#[derive(Debug)]
struct Output {
    kept: HeadTail<Piece>,
    /// Bytes let through (the head).
    head: u64,
    total: u64,
    last_used: u64,
}

/// The output of every command of one sandbox.
#[derive(Debug)]
pub struct Outputs {
    cap: u64,
    commands: HashMap<String, Output>,
    /// Commands whose output ended, latest last.
    ended: VecDeque<String>,
    uses: u64,
}

impl Outputs {
    /// `cap`: bytes kept per command; `kept`: what the log already holds per command (after a
    /// controller restart).
    pub fn new(cap: u64, kept: impl IntoIterator<Item = (String, u64)>) -> Outputs {
        let mut outputs = Outputs { cap, commands: HashMap::new(), ended: VecDeque::new(), uses: 0 };
        for (command, bytes) in kept {
            let output = outputs.output(&command);
            output.kept.passed(bytes);
            output.head = bytes;
            output.total = bytes;
        }
        outputs
    }

    fn output(&mut self, command: &str) -> &mut Output {
        self.uses += 1;
        let (head, tail) = (self.cap - self.cap / 2, self.cap / 2);
        let output = self.commands.entry(command.to_string()).or_insert_with(|| Output {
            kept: HeadTail::new(head, tail, Cuts::Utf8),
            head: 0,
            total: 0,
            last_used: 0,
        });
        output.last_used = self.uses;
        output
    }

    /// Takes a chunk of `command`'s output: returns the part to keep now (the head), and keeps
    /// the rest for the tail. Also returns the events of commands closed to make room.
    pub fn admit(
        &mut self,
        sandbox: &str,
        command: &str,
        (seq, unix_ms): (u64, u64),
        stream: &str,
        bytes: Vec<u8>,
    ) -> (Option<Vec<u8>>, Vec<StoredEvent>) {
        let mut closed = Vec::new();
        if !self.commands.contains_key(command) && self.ended.iter().any(|c| c == command) {
            // Output after the command's end (its marker and tail are written): not kept.
            return (None, closed);
        }
        if !self.commands.contains_key(command) && self.commands.len() >= MAX_OPEN_COMMANDS {
            let oldest = self.commands.iter().min_by_key(|(_, o)| o.last_used).map(|(c, _)| c.clone());
            if let Some(oldest) = oldest {
                closed = self.close(sandbox, &oldest);
            }
        }
        let output = self.output(command);
        output.total += bytes.len() as u64;
        let piece = Piece { seq, unix_ms, stream: stream.to_string() };
        let split = output.kept.admit(piece, &bytes, Piece::join);
        output.head += split as u64;
        if split == bytes.len() {
            return (Some(bytes), closed);
        }
        let mut head = bytes;
        head.truncate(split);
        closed.extend(self.make_room(sandbox, command));
        ((!head.is_empty()).then_some(head), closed)
    }

    /// Closes the least recently used commands but `keep` while the tails held pass
    /// [`MAX_TAIL_BYTES_PER_SANDBOX`]; their events.
    fn make_room(&mut self, sandbox: &str, keep: &str) -> Vec<StoredEvent> {
        let mut closed = Vec::new();
        while self.commands.values().map(|o| o.kept.tail_bytes()).sum::<u64>() > MAX_TAIL_BYTES_PER_SANDBOX {
            let oldest = self
                .commands
                .iter()
                .filter(|(c, _)| c.as_str() != keep)
                .min_by_key(|(_, o)| o.last_used)
                .map(|(c, _)| c.clone());
            let Some(oldest) = oldest else { break };
            closed.extend(self.close(sandbox, &oldest));
        }
        closed
    }

    /// Ends `command`'s output: the marker (when anything was cut) and the tail, as events to
    /// log where the command ends.
    pub fn close(&mut self, sandbox: &str, command: &str) -> Vec<StoredEvent> {
        let Some(mut output) = self.commands.remove(command) else { return Vec::new() };
        if self.ended.len() == MAX_ENDED_COMMANDS {
            self.ended.pop_front();
        }
        self.ended.push_back(command.to_string());
        let (head, dropped, tail_bytes) = (output.head, output.kept.cut(), output.kept.tail_bytes());
        let tail = output.kept.take_tail();
        let Some((first, _)) = tail.first() else { return Vec::new() };
        let mut events = Vec::new();
        if dropped > 0 {
            let note = format!(
                "\n[… {dropped} bytes of output not kept ({} in all): the first {head} and the last {tail_bytes} bytes are …]\n",
                output.total
            );
            events.push(StoredEvent {
                sandbox: sandbox.to_string(),
                seq: first.seq,
                unix_ms: first.unix_ms,
                body: StoredBody::Log {
                    command_id: command.to_string(),
                    stream: "agent".into(),
                    data: Data::Text { text: note },
                    cut: Some(OutputCut { dropped_bytes: dropped, total_bytes: output.total }),
                },
            });
        }
        events.extend(tail.into_iter().map(|(piece, bytes)| StoredEvent {
            sandbox: sandbox.to_string(),
            seq: piece.seq,
            unix_ms: piece.unix_ms,
            body: StoredBody::Log {
                command_id: command.to_string(),
                stream: piece.stream,
                data: Data::from_bytes(bytes),
                cut: None,
            },
        }));
        events
    }

    /// Ends every command's output (the hub is closing).
    pub fn close_all(&mut self, sandbox: &str) -> Vec<StoredEvent> {
        let mut commands: Vec<(u64, String)> = self.commands.iter().map(|(c, o)| (o.last_used, c.clone())).collect();
        commands.sort();
        commands.into_iter().flat_map(|(_, command)| self.close(sandbox, &command)).collect()
    }
}

/// A refused Hello, as kept for diagnosis (its sandbox id cut short).
#[derive(Debug, Clone)]
pub struct Refusal {
    pub sandbox_id: String,
    pub reason: String,
}

/// Refused Hellos: counted, the last few kept, logged and answered at a bounded rate.
#[derive(Debug)]
pub struct Refusals {
    total: u64,
    recent: VecDeque<Refusal>,
    window_start: Instant,
    in_window: u32,
    unlogged: u64,
}

/// Refusals kept for diagnosis.
const RECENT_REFUSALS: usize = 32;
/// Refusals logged (and answered at once) per window; beyond, they are only counted, and
/// answered after [`REFUSAL_DELAY`].
const REFUSALS_PER_WINDOW: u32 = 20;
const REFUSAL_WINDOW: Duration = Duration::from_secs(10);
pub const REFUSAL_DELAY: Duration = Duration::from_millis(250);
/// Characters of a refused sandbox id kept and shown.
const REFUSED_ID_CHARS: usize = 64;

impl Default for Refusals {
    fn default() -> Self {
        Refusals { total: 0, recent: VecDeque::new(), window_start: Instant::now(), in_window: 0, unlogged: 0 }
    }
}

/// A sandbox id as a refusal shows it: at most 64 characters, quoted and escaped.
pub fn shown_id(id: &str) -> String {
    let short = crate::sanitize::prefix(id, REFUSED_ID_CHARS);
    if short.len() < id.len() { format!("{short:?}… ({} bytes)", id.len()) } else { format!("{short:?}") }
}

impl Refusals {
    /// Counts a refusal; true when it is within the rate (log it, answer at once), false when
    /// the refusals come too fast (count only, answer late).
    pub fn record(&mut self, sandbox_id: &str, reason: &str) -> bool {
        self.total += 1;
        if self.recent.len() == RECENT_REFUSALS {
            self.recent.pop_front();
        }
        let id = crate::sanitize::prefix(sandbox_id, REFUSED_ID_CHARS).to_string();
        self.recent.push_back(Refusal { sandbox_id: id, reason: reason.to_string() });
        if self.window_start.elapsed() >= REFUSAL_WINDOW {
            if self.unlogged > 0 {
                tracing::warn!(
                    "{} more agents were refused in {:?} (not logged one by one)",
                    self.unlogged,
                    REFUSAL_WINDOW
                );
            }
            self.window_start = Instant::now();
            self.in_window = 0;
            self.unlogged = 0;
        }
        self.in_window += 1;
        let within = self.in_window <= REFUSALS_PER_WINDOW;
        if !within {
            self.unlogged += 1;
        }
        within
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn recent(&self) -> Vec<Refusal> {
        self.recent.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(events: &[StoredEvent]) -> Vec<(String, u64, String)> {
        events
            .iter()
            .map(|e| match &e.body {
                StoredBody::Log { stream, data: Data::Text { text }, .. } => (stream.clone(), e.seq, text.clone()),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn output_keeps_its_head_and_tail_and_says_what_it_cut() {
        let mut outputs = Outputs::new(10, []);
        let mut kept = Vec::new();
        for (seq, chunk) in ["abc", "defg", "hij", "klm", "nop"].iter().enumerate() {
            let (head, closed) = outputs.admit("s", "c", (seq as u64 + 1, 0), "stdout", chunk.as_bytes().to_vec());
            assert!(closed.is_empty());
            kept.extend(head);
        }
        assert_eq!(kept, [b"abc".to_vec(), b"de".to_vec()]);
        let events = outputs.close("s", "c");
        assert_eq!(
            texts(&events),
            [
                (
                    "agent".into(),
                    5,
                    "\n[… 6 bytes of output not kept (16 in all): the first 5 and the last 5 bytes are …]\n".into()
                ),
                ("stdout".into(), 5, "lmnop".into()),
            ]
        );
        let StoredBody::Log { cut, .. } = &events[0].body else { unreachable!() };
        assert_eq!(*cut, Some(OutputCut { dropped_bytes: 6, total_bytes: 16 }));
        // Closed: nothing more to say about it, and what it still sends is not kept.
        assert!(outputs.close("s", "c").is_empty());
        assert_eq!(outputs.admit("s", "c", (6, 0), "stdout", b"late".to_vec()).0, None);
        assert!(outputs.close("s", "c").is_empty());
    }

    #[test]
    fn output_under_the_cap_is_kept_whole_and_streams_stay_apart() {
        let mut outputs = Outputs::new(8, []);
        assert_eq!(outputs.admit("s", "c", (1, 0), "stdout", b"abc".to_vec()).0, Some(b"abc".to_vec()));
        assert_eq!(outputs.admit("s", "c", (2, 0), "stderr", b"de".to_vec()).0, Some(b"d".to_vec()));
        assert_eq!(outputs.admit("s", "c", (3, 0), "stderr", b"f".to_vec()).0, None);
        assert_eq!(outputs.admit("s", "c", (4, 0), "stdout", b"g".to_vec()).0, None);
        // The tail held everything past the head: no marker, the pieces of each stream in order.
        assert_eq!(
            texts(&outputs.close("s", "c")),
            [("stderr".into(), 3, "ef".into()), ("stdout".into(), 4, "g".into())]
        );
        assert!(outputs.close("s", "other").is_empty());
    }

    #[test]
    fn a_restart_remembers_the_head_already_kept() {
        let mut outputs = Outputs::new(10, [("c".to_string(), 5)]);
        assert_eq!(outputs.admit("s", "c", (9, 0), "stdout", b"xyz".to_vec()).0, None);
        let events = outputs.close("s", "c");
        assert_eq!(texts(&events).last().unwrap().2, "xyz");
    }

    #[test]
    fn cuts_do_not_split_characters() {
        let mut outputs = Outputs::new(8, []);
        let (head, _) = outputs.admit("s", "c", (1, 0), "stdout", "aé漢字".as_bytes().to_vec());
        assert_eq!(head.unwrap(), "aé".as_bytes());
        outputs.admit("s", "c", (2, 0), "stdout", "ééé".as_bytes().to_vec());
        let events = outputs.close("s", "c");
        assert_eq!(texts(&events).last().unwrap().2, "éé");
    }

    #[test]
    fn too_many_open_commands_close_the_oldest() {
        let mut outputs = Outputs::new(2, []);
        for n in 0..MAX_OPEN_COMMANDS {
            outputs.admit("s", &format!("c{n}"), (n as u64 + 1, 0), "stdout", b"abcd".to_vec());
        }
        let (_, closed) = outputs.admit("s", "new", (100, 0), "stdout", b"x".to_vec());
        assert!(!closed.is_empty());
        assert!(closed.iter().all(|e| matches!(&e.body, StoredBody::Log { command_id, .. } if command_id == "c0")));
        assert_eq!(outputs.commands.len(), MAX_OPEN_COMMANDS);
    }

    #[test]
    fn the_tails_of_a_sandbox_stay_within_their_bound() {
        // Commands at the largest cap (64 MiB) with 12 MiB in their tails each: without the
        // bound, 8 of them would hold 96 MiB.
        let cap = 64u64 << 20;
        let mut outputs = Outputs::new(cap, []);
        let chunk = vec![b'x'; 1 << 20];
        let mut closed_commands = std::collections::BTreeSet::new();
        for n in 0..8u64 {
            for k in 0..44u64 {
                let (_, closed) = outputs.admit("s", &format!("c{n}"), (n * 100 + k + 1, 0), "stdout", chunk.clone());
                for e in closed {
                    if let StoredBody::Log { command_id, .. } = e.body {
                        closed_commands.insert(command_id);
                    }
                }
                let held: u64 = outputs.commands.values().map(|o| o.kept.tail_bytes()).sum();
                assert!(held <= MAX_TAIL_BYTES_PER_SANDBOX, "{held} bytes held after c{n} chunk {k}");
            }
        }
        assert_eq!(closed_commands.len(), 7, "the oldest were closed to make room: {closed_commands:?}");
        assert!(outputs.commands.contains_key("c7"));
    }

    #[test]
    fn file_chunks_stay_contiguous_and_bounded() {
        let limits = FileLimits { max_files: 2, max_file_bytes: 10, max_total_bytes: 15 };
        let mut files = Files::default();
        assert_eq!(files.admit(&limits, "a", 0, 4), Ok(()));
        assert_eq!(files.admit(&limits, "a", 4, 4), Ok(()));
        // A replay of a chunk already written is fine; a hole is not.
        assert_eq!(files.admit(&limits, "a", 0, 4), Ok(()));
        assert!(files.admit(&limits, "a", 9, 1).unwrap_err().contains("past the end"));
        assert!(files.admit(&limits, "a", u64::MAX, 0).unwrap_err().contains("past the end"));
        assert!(files.admit(&limits, "a", 8, 3).unwrap_err().contains("pass 10 bytes"));
        assert_eq!(files.admit(&limits, "b", 0, 7), Ok(()));
        assert!(files.admit(&limits, "b", 7, 1).unwrap_err().contains("would pass 15"));
        assert!(files.admit(&limits, "c", 0, 0).unwrap_err().contains("more than 2 files"));
        assert!(files.admit(&limits, "b", 0, sandbench_proto::MAX_CHUNK_BYTES + 1).is_err());
        let files = Files::recovered([("a".to_string(), 8)]);
        assert_eq!(files.total, 8);
    }

    #[test]
    fn refusals_are_counted_kept_few_and_rate_limited() {
        let mut refusals = Refusals::default();
        let long = "x".repeat(8 << 20);
        let within: Vec<bool> = (0..100).map(|_| refusals.record(&long, "unknown sandbox")).collect();
        assert_eq!(refusals.total(), 100);
        assert_eq!(within.iter().filter(|w| **w).count(), REFUSALS_PER_WINDOW as usize);
        let recent = refusals.recent();
        assert_eq!(recent.len(), RECENT_REFUSALS);
        assert!(recent.iter().all(|r| r.sandbox_id.len() == REFUSED_ID_CHARS));
        assert_eq!(shown_id("ab"), "\"ab\"");
        assert!(shown_id(&long).ends_with(&format!("… ({} bytes)", 8 << 20)));
        assert!(shown_id("é\u{1b}").contains("\\u{1b}"));
    }

    #[test]
    fn texts_are_bounded() {
        assert_eq!(text("short".into(), 10), "short");
        assert!(text("x".repeat(100), 10).starts_with("xxxxxxxxxx … [90 more bytes"));
    }
}
