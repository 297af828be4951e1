//! What a phase works with ([`PhaseContext`]): its command, plan and trial, the way its events
//! go out (held until a trial's window proved clean), and its output against the controller's
//! cap: the first half as it comes, then only its last bytes are held and sent when the command
//! ends, after a marker saying how many were cut ([`OutputCap`]). A flood fills neither the
//! journal nor the stream.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sandbench_proto::cap::{Cuts, HeadTail};
use sandbench_proto::v1::{FileChunk, Log, LogStream, Observation, PhaseYielded, event, observation};
use tokio::sync::mpsc;

use crate::journal::lock;
use crate::turns::Turns;

/// Where phases put their events: the journal writer's queue.
pub type Emit = mpsc::Sender<event::Body>;

/// Room kept in the controller's tail for the agent's own marker.
const MARKER_ROOM: u64 = 256;

/// One command's output against the cap: the head passes, the tail waits, the middle is counted
/// ([`HeadTail`], cut anywhere, each piece held apart).
#[derive(Debug)]
pub struct OutputCap {
    cap: u64,
    kept: HeadTail<LogStream>,
}

impl OutputCap {
    pub fn new(cap: u64) -> OutputCap {
        let tail_cap = (cap / 2).saturating_sub(MARKER_ROOM);
        OutputCap { cap, kept: HeadTail::new(cap - cap / 2, tail_cap, Cuts::Anywhere) }
    }

    /// The part of `bytes` to send now; the rest is held in the tail (whose oldest bytes are cut).
    pub fn admit<'a>(&mut self, stream: LogStream, bytes: &'a [u8]) -> &'a [u8] {
        if self.cap == 0 {
            return bytes;
        }
        &bytes[..self.kept.admit(stream, bytes, |_, _| false)]
    }

    /// What is still to send when the command ends: a marker when bytes were cut, then the tail.
    pub fn finish(&mut self) -> Vec<(LogStream, Vec<u8>)> {
        let mut out = Vec::new();
        if self.kept.cut() > 0 {
            let marker = format!(
                "\n[sandbox-agent: {} bytes of output cut here (cap {} bytes); the last {} bytes follow]\n",
                self.kept.cut(),
                self.cap,
                self.kept.tail_bytes()
            );
            out.push((LogStream::Agent, marker.into_bytes()));
        }
        out.extend(self.kept.take_tail());
        out
    }

    /// The cap in bytes (0: none).
    pub fn cap(&self) -> u64 {
        self.cap
    }
}

/// A file (from where it is now to its end) as a command's output is kept against `cap` (0: the
/// controller's default): its head, then [`OutputCap`]'s marker saying how many bytes were cut,
/// then its tail. Only those bytes are read (the middle is skipped with a seek), so a file a
/// workload flooded is never loaded whole.
pub fn capped_file(file: &mut std::fs::File, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let cap = if cap == 0 { sandbench_proto::DEFAULT_OUTPUT_CAP_BYTES } else { cap };
    let start = file.stream_position()?;
    let len = file.metadata()?.len().saturating_sub(start);
    let mut kept = OutputCap::new(cap);
    let mut out = Vec::new();
    file.by_ref().take(len.min(kept.kept.head_left())).read_to_end(&mut out)?;
    kept.admit(LogStream::Stdout, &out);
    let rest = len - out.len() as u64;
    if rest > 0 {
        // The head is full: skip the middle, counted as cut, then the tail.
        let tail_len = rest.min(kept.kept.tail_cap());
        kept.kept.skipped(rest - tail_len);
        file.seek(SeekFrom::Start(start + len - tail_len))?;
        let mut tail = Vec::new();
        file.by_ref().take(tail_len).read_to_end(&mut tail)?;
        kept.admit(LogStream::Stdout, &tail);
        out.extend(kept.finish().into_iter().flat_map(|(_, bytes)| bytes));
    }
    Ok(out)
}

/// What a phase gets to do its work.
pub struct PhaseContext {
    pub command_id: String,
    pub trial: u32,
    pub plan: Vec<u8>,
    /// Observations of this command already in the journal (non-zero after a restart).
    pub resume_observations: u64,
    pub cancel: Arc<AtomicBool>,
    pub emit: Emit,
    /// The agent's state folder (journal, phase state, transcripts).
    pub state_dir: PathBuf,
    /// Observations held back until the trial's window proved clean ([`PhaseContext::hold`]).
    pub held: std::sync::Mutex<Option<Vec<Observation>>>,
    /// This command's output against the controller's cap.
    pub output: Mutex<OutputCap>,
    /// When the controller runs the command stepwise, its turns ([`Turns`]).
    pub turns: Arc<Turns>,
}

impl PhaseContext {
    /// Records a measured value.
    pub fn value(&self, metric: &str, trial: u32, value: f64, unit: &str) -> bool {
        self.observation(metric, trial, 0, observation::Outcome::Value(value), unit)
    }

    /// Records the value of run `sample` (from 0) of a metric measured several times a trial.
    pub fn sample(&self, metric: &str, trial: u32, sample: u32, value: f64, unit: &str) -> bool {
        self.observation(metric, trial, sample, observation::Outcome::Value(value), unit)
    }

    /// Records why a metric could not be measured (at most 500 characters, as the reference).
    pub fn error(&self, metric: &str, trial: u32, error: &anyhow::Error, unit: &str) -> bool {
        self.sample_error(metric, trial, 0, error, unit)
    }

    /// Records why run `sample` of a metric could not be measured.
    pub fn sample_error(&self, metric: &str, trial: u32, sample: u32, error: &anyhow::Error, unit: &str) -> bool {
        let text: String = format!("{error:#}").chars().take(500).collect();
        self.observation(metric, trial, sample, observation::Outcome::Error(text), unit)
    }

    fn observation(&self, metric: &str, trial: u32, sample: u32, outcome: observation::Outcome, unit: &str) -> bool {
        let observation = Observation {
            command_id: self.command_id.clone(),
            metric: metric.to_string(),
            trial,
            outcome: Some(outcome),
            unit: unit.to_string(),
            sample,
        };
        if let Some(held) = lock(&self.held).as_mut() {
            held.push(observation);
            return true;
        }
        self.emit(event::Body::Observation(observation))
    }

    /// Holds every observation back until [`PhaseContext::release`]: a sample counts only once
    /// the check after its timed window found no foreign process of the user.
    pub fn hold(&self) {
        lock(&self.held).get_or_insert_with(Vec::new);
    }

    /// Sends the held observations; when the check after the window failed (`survivors`), each
    /// held metric gets that error instead of its samples.
    pub fn release(&self, survivors: Option<&anyhow::Error>) {
        let Some(held) = lock(&self.held).take() else { return };
        for mut observation in discard_if(held, survivors) {
            observation.command_id = self.command_id.clone();
            self.emit(event::Body::Observation(observation));
        }
    }

    /// Streams process output (or the agent's own notes) to the controller, up to the cap.
    pub fn log(&self, stream: LogStream, bytes: &[u8]) {
        if stream == LogStream::Agent {
            return self.send_log(stream, bytes);
        }
        let mut output = lock(&self.output);
        let now = output.admit(stream, bytes);
        if !now.is_empty() {
            self.send_log(stream, now);
        }
    }

    /// Sends the output held back by the cap (the command is ending).
    pub fn finish_output(&self) {
        let held = lock(&self.output).finish();
        for (stream, bytes) in held {
            self.send_log(stream, &bytes);
        }
    }

    fn send_log(&self, stream: LogStream, bytes: &[u8]) {
        for chunk in bytes.chunks(sandbench_proto::MAX_CHUNK_BYTES) {
            self.emit(event::Body::Log(Log {
                command_id: self.command_id.clone(),
                stream: stream as i32,
                chunk: chunk.to_vec(),
            }));
        }
    }

    pub fn note(&self, text: &str) {
        self.log(LogStream::Agent, format!("{text}\n").as_bytes());
    }

    /// Sends a file (a transcript) to the controller in chunks.
    pub fn file(&self, path: &str, bytes: &[u8]) {
        let chunks: Vec<&[u8]> =
            if bytes.is_empty() { vec![&[]] } else { bytes.chunks(sandbench_proto::MAX_CHUNK_BYTES).collect() };
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            self.emit(event::Body::File(FileChunk {
                command_id: self.command_id.clone(),
                path: path.to_string(),
                offset: (i * sandbench_proto::MAX_CHUNK_BYTES) as u64,
                data: chunk.to_vec(),
                last: i == last,
            }));
        }
    }

    /// Hands an event to the journal; false when the agent is shutting down.
    pub fn emit(&self, body: event::Body) -> bool {
        self.emit.blocking_send(body).is_ok()
    }

    pub fn canceled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// A stepwise command's first segment: waits for the controller's first turn. False when
    /// canceled meanwhile.
    pub fn first_turn(&self) -> bool {
        self.turns.wait(1, &self.cancel)
    }

    /// A yield point, after a timed run of a repeated step: a stepwise command ends its segment
    /// here, says so, and waits for its next turn. Nothing for one that is not stepwise. False
    /// when canceled meanwhile.
    pub fn yield_turn(&self) -> bool {
        if !self.turns.stepwise() {
            return true;
        }
        let index = self.turns.end_segment();
        let yielded = PhaseYielded { command_id: self.command_id.clone(), index, untimed_rest: false };
        self.emit(event::Body::Yielded(yielded)) && self.turns.wait(index + 1, &self.cancel)
    }

    /// Ends the timed part of a stepwise command before an untimed rest (the lens, the
    /// footprint) and waits for the turn of that rest, which the controller grants to every
    /// sandbox of the round at once when none has a timed segment left: one side's lens never
    /// runs beside the other's timed runs, and the two sides' lens runs go at once. False when
    /// canceled first; true at once when not stepwise.
    pub fn untimed_turn(&self) -> bool {
        if !self.turns.stepwise() {
            return true;
        }
        let index = self.turns.end_segment();
        let yielded = PhaseYielded { command_id: self.command_id.clone(), index, untimed_rest: true };
        self.emit(event::Body::Yielded(yielded)) && self.turns.wait(index + 1, &self.cancel)
    }
}

/// The held observations as sent: unchanged, or, when processes survived the window, one
/// error per metric and trial saying why its samples were discarded.
pub fn discard_if(held: Vec<Observation>, survivors: Option<&anyhow::Error>) -> Vec<Observation> {
    let Some(err) = survivors else { return held };
    let reason: String = format!("discarded: processes of the user were present during the timed window ({err:#})")
        .chars()
        .take(500)
        .collect();
    let mut out: Vec<Observation> = Vec::new();
    for observation in held {
        if !out.iter().any(|o| o.metric == observation.metric && o.trial == observation.trial) {
            out.push(Observation { outcome: Some(observation::Outcome::Error(reason.clone())), ..observation });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(metric: &str, trial: u32, v: f64) -> Observation {
        Observation {
            command_id: "c".into(),
            metric: metric.into(),
            trial,
            outcome: Some(observation::Outcome::Value(v)),
            unit: "s".into(),
            sample: 0,
        }
    }

    #[test]
    fn held_samples_pass_or_become_one_error_per_metric() {
        let held = vec![value("cold", 0, 0.5), value("rss", 0, 1e6), value("cold", 0, 0.6)];
        assert_eq!(discard_if(held.clone(), None), held);
        let err = anyhow::anyhow!("Processes remain for benchmark1: 12 (sleep)");
        let out = discard_if(held, Some(&err));
        assert_eq!(out.iter().map(|o| o.metric.as_str()).collect::<Vec<_>>(), ["cold", "rss"]);
        assert_eq!(
            out[0].outcome,
            Some(observation::Outcome::Error(
                "discarded: processes of the user were present during the timed window (Processes remain for \
                 benchmark1: 12 (sleep))"
                    .into()
            ))
        );
        assert_eq!(out[1].unit, "s");
    }

    #[test]
    fn a_held_context_sends_nothing_until_released() {
        let (tx, mut rx) = mpsc::channel(16);
        let ctx = PhaseContext {
            command_id: "c".into(),
            trial: 0,
            plan: Vec::new(),
            resume_observations: 0,
            cancel: Default::default(),
            emit: tx,
            state_dir: PathBuf::new(),
            held: Default::default(),
            output: Mutex::new(OutputCap::new(1 << 20)),
            turns: Default::default(),
        };
        ctx.hold();
        ctx.value("cold", 0, 0.5, "s");
        assert!(rx.try_recv().is_err(), "held back");
        ctx.release(Some(&anyhow::anyhow!("survivors")));
        let Ok(event::Body::Observation(o)) = rx.try_recv() else { panic!("no observation") };
        assert!(matches!(o.outcome, Some(observation::Outcome::Error(ref e)) if e.contains("survivors")));
        ctx.value("warm", 0, 0.1, "s");
        assert!(matches!(rx.try_recv(), Ok(event::Body::Observation(o)) if o.metric == "warm"), "no longer held");
    }

    fn sent(cap: &mut OutputCap, pieces: &[&[u8]]) -> (Vec<u8>, Vec<(LogStream, Vec<u8>)>) {
        let mut now = Vec::new();
        for piece in pieces {
            now.extend_from_slice(cap.admit(LogStream::Stdout, piece));
        }
        (now, cap.finish())
    }

    #[test]
    fn output_past_the_cap_keeps_head_and_tail_with_a_marker() {
        let mut cap = OutputCap::new(2 * 1024);
        let flood: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (head, rest) = sent(&mut cap, &[&flood[..3000], &flood[3000..3001], &flood[3001..]]);
        assert_eq!(head, &flood[..1024]);
        let tail_cap = 1024 - MARKER_ROOM as usize;
        let marker = String::from_utf8(rest[0].1.clone()).unwrap();
        assert_eq!(rest[0].0, LogStream::Agent);
        let cut = 10_000 - 1024 - tail_cap;
        assert!(marker.contains(&format!("{cut} bytes of output cut")), "{marker}");
        let tail: Vec<u8> = rest[1..].iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(tail, &flood[10_000 - tail_cap..]);
        assert!(marker.len() as u64 <= MARKER_ROOM);
    }

    #[test]
    fn output_under_the_cap_or_uncapped_passes_whole() {
        let mut cap = OutputCap::new(2 * 1024);
        let (now, rest) = sent(&mut cap, &[b"hello", b" world"]);
        assert_eq!((now.as_slice(), rest.len()), (&b"hello world"[..], 0));
        let mut cap = OutputCap::new(0);
        let big = vec![b'y'; 1 << 20];
        let (now, rest) = sent(&mut cap, &[&big]);
        assert_eq!((now.len(), rest.len()), (1 << 20, 0));
        // Between head and cap: the rest comes at the end, with no marker.
        let mut cap = OutputCap::new(2 * 1024);
        let (now, rest) = sent(&mut cap, &[&[b'a'; 1500]]);
        assert_eq!(now.len(), 1024);
        assert_eq!(rest.iter().map(|(_, b)| b.len()).sum::<usize>(), 476);
        assert!(rest.iter().all(|(s, _)| *s == LogStream::Stdout));
    }

    #[test]
    fn a_file_is_kept_as_output_is_without_reading_it_whole() {
        use std::io::{Seek, SeekFrom, Write};
        let flood: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&flood).unwrap();
        // The same bytes as the output of a command: head, marker, tail.
        let mut cap = OutputCap::new(2 * 1024);
        let (head, rest) = sent(&mut cap, &[&flood]);
        let expected: Vec<u8> = head.into_iter().chain(rest.into_iter().flat_map(|(_, b)| b)).collect();
        file.seek(SeekFrom::Start(0)).unwrap();
        assert_eq!(capped_file(&mut file, 2 * 1024).unwrap(), expected);
        // Under the cap, whole.
        file.seek(SeekFrom::Start(9_000)).unwrap();
        assert_eq!(capped_file(&mut file, 2 * 1024).unwrap(), &flood[9_000..]);
        // A sparse 64 GiB file (a flood) is read in a moment, the middle skipped; no cap: the default.
        let mut sparse = tempfile::tempfile().unwrap();
        sparse.write_all(b"first line\n").unwrap();
        sparse.set_len(64 << 30).unwrap();
        sparse.seek(SeekFrom::End(0)).unwrap();
        sparse.write_all(b"last line\n").unwrap();
        sparse.seek(SeekFrom::Start(0)).unwrap();
        let kept = capped_file(&mut sparse, 0).unwrap();
        assert!(kept.len() as u64 <= sandbench_proto::DEFAULT_OUTPUT_CAP_BYTES, "{}", kept.len());
        assert!(kept.starts_with(b"first line\n") && kept.ends_with(b"last line\n"));
        let cut = (64u64 << 30) + 10 - (sandbench_proto::DEFAULT_OUTPUT_CAP_BYTES - MARKER_ROOM);
        let text = String::from_utf8_lossy(&kept);
        assert!(text.contains(&format!("[sandbox-agent: {cut} bytes of output cut here")), "no marker");
    }
}
