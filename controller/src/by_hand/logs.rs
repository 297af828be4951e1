//! `sandbench logs ID [-n N] [-f]`: a sandbox's log, each line with its time in RFC 3339: the
//! agent's own log (the container's output) and, for a sandbox kept by `sandbench debug --keep`,
//! what its phases did (their output, observations, starts and ends, from the debug directory's
//! event log), merged in time order; the last N lines, or following both.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;

use super::find;
use super::phase::describe_event;
use crate::observations::store::{Data, OBSERVATIONS_FILE, StoredBody, StoredEvent};
use crate::provision::{Provisioner, labels};

/// How the agent stamps its lines: `sandbox-agent SECONDS.MILLIS message`.
const AGENT_PREFIX: &str = "sandbox-agent ";

/// One line to show, with its time (Unix ms) for ordering.
type Line = (i64, String);

/// Prints the sandbox's log (the last `lines` lines when given); with `follow`, keeps printing
/// until the sandbox is gone.
pub async fn logs(provisioner: &dyn Provisioner, id: &str, lines: Option<usize>, follow: bool) -> anyhow::Result<()> {
    logs_to(provisioner, id, lines, follow, &mut std::io::stdout()).await
}

/// [`logs`], written to `out`.
pub(super) async fn logs_to(
    provisioner: &dyn Provisioner,
    id: &str,
    lines: Option<usize>,
    follow: bool,
    out: &mut (impl Write + Send),
) -> anyhow::Result<()> {
    let c = find(provisioner, id).await?;
    // A kept debug sandbox's events are in the directory of its debug session's control socket.
    let events = c
        .labels
        .get(labels::CONTROL)
        .and_then(|control| Path::new(control).parent())
        .map(|d| d.join(OBSERVATIONS_FILE));
    let mut events = EventTail { path: events, sandbox: c.name.clone(), offset: 0 };
    let mut container = Vec::new();
    let mut split = LineSplitter::default();
    let mut stream = std::pin::pin!(provisioner.log_lines(&c.name, None, false));
    while let Some(chunk) = stream.next().await {
        container.extend(split.push(&chunk?));
    }
    container.extend(split.finish());
    let seen = container.len();
    // The last N lines of the two merged are among the last N of each, once each is in order.
    let mut all: Vec<Line> = container.iter().map(|l| parse_line(l)).collect();
    all.sort_by_key(|(at, _)| *at);
    all.drain(..lines.map_or(0, |n| all.len().saturating_sub(n)));
    all.extend(events.read_new(lines));
    all.sort_by_key(|(at, _)| *at);
    let skip = lines.map_or(0, |n| all.len().saturating_sub(n));
    for (_, text) in &all[skip..] {
        let _ = writeln!(out, "{}", crate::sanitize::terminal(text));
    }
    let _ = out.flush();
    if follow {
        follow_both(provisioner, &c.name, seen, &mut events, out).await?;
    }
    Ok(())
}

/// Prints new lines of the container's log (after the `seen` first ones) and of the events as
/// they come, until the container stops.
async fn follow_both(
    provisioner: &dyn Provisioner,
    name: &str,
    seen: usize,
    events: &mut EventTail,
    out: &mut (impl Write + Send),
) -> anyhow::Result<()> {
    let mut stream = std::pin::pin!(provisioner.log_lines(name, None, true));
    let mut split = LineSplitter::default();
    let mut skip = seen;
    let mut poll = tokio::time::interval(Duration::from_millis(250));
    loop {
        let lines: Vec<Line> = tokio::select! {
            chunk = stream.next() => match chunk {
                Some(chunk) => {
                    let new = split.push(&chunk?);
                    let dropped = skip.min(new.len());
                    skip -= dropped;
                    new[dropped..].iter().map(|l| parse_line(l)).collect()
                }
                None => {
                    let mut last: Vec<Line> = split.finish().into_iter().skip(skip).map(|l| parse_line(&l)).collect();
                    last.extend(events.read_new(None));
                    for (_, text) in last {
                        let _ = writeln!(out, "{}", crate::sanitize::terminal(&text));
                    }
                    return Ok(());
                }
            },
            _ = poll.tick() => events.read_new(None),
        };
        for (_, text) in lines {
            let _ = writeln!(out, "{}", crate::sanitize::terminal(&text));
        }
        let _ = out.flush();
    }
}

/// The events of one sandbox in a run directory's event log, read as the log grows.
struct EventTail {
    path: Option<PathBuf>,
    sandbox: String,
    /// Bytes of the file read so far (whole lines only).
    offset: u64,
}

impl EventTail {
    /// The lines of the events appended since the last call (the last `keep` of them when
    /// given); nothing when there is no log. The log is read a line at a time, each line bounded
    /// ([`crate::observations::store::MAX_LINE_BYTES`]), never whole; a line still being written is left for
    /// the next call.
    fn read_new(&mut self, keep: Option<usize>) -> Vec<Line> {
        use std::io::BufRead;
        let Some(path) = &self.path else { return Vec::new() };
        let Ok(mut file) = std::fs::File::open(path) else { return Vec::new() };
        if file.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut reader = std::io::BufReader::new(file);
        let mut kept = std::collections::VecDeque::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            let limit = crate::observations::store::MAX_LINE_BYTES as u64 + 1;
            let Ok(n) = (&mut reader).take(limit).read_until(b'\n', &mut line) else { break };
            if n == 0 || (line.last() != Some(&b'\n') && (n as u64) < limit) {
                break; // the end, or a line not finished yet
            }
            if line.last() != Some(&b'\n') {
                // Longer than any line the server writes: skip the rest of it, keeping none of it.
                let Ok((skipped, whole)) = skip_line(&mut reader) else { break };
                if !whole {
                    break; // still being written: read it again from its start next time
                }
                self.offset += n as u64 + skipped;
                continue;
            }
            self.offset += n as u64;
            let Ok(event) = serde_json::from_slice::<StoredEvent>(&line) else { continue };
            if event.sandbox != self.sandbox {
                continue;
            }
            kept.extend(event_lines(&event));
            if let Some(keep) = keep {
                while kept.len() > keep {
                    kept.pop_front();
                }
            }
        }
        kept.into()
    }
}

/// Consumes the rest of a line without keeping it: the bytes consumed, and whether its newline
/// came (else the file ended first).
fn skip_line(reader: &mut impl std::io::BufRead) -> std::io::Result<(u64, bool)> {
    let mut skipped = 0u64;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok((skipped, false));
        }
        let (used, whole) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        reader.consume(used);
        skipped += used as u64;
        if whole {
            return Ok((skipped, true));
        }
    }
}

/// An event as log lines: output line by line with its stream, phases' starts and ends, and
/// observations.
pub fn event_lines(event: &StoredEvent) -> Vec<(i64, String)> {
    let at = i64::try_from(event.unix_ms).unwrap_or(i64::MAX);
    let time = jiff::Timestamp::from_millisecond(at).map(rfc3339).unwrap_or_default();
    match &event.body {
        StoredBody::Log { stream, data: Data::Text { text }, .. } => text
            .lines()
            .map(|line| match stream.as_str() {
                "agent" => (at, format!("{time} {line}")),
                stream => (at, format!("{time} {stream}: {line}")),
            })
            .collect(),
        StoredBody::Log { stream, data: Data::Hex { hex }, .. } => {
            vec![(at, format!("{time} {stream}: ({} bytes, not text)", hex.len() / 2))]
        }
        _ => describe_event(event)
            .map(|text| vec![(at, format!("{time} {}", text.trim_end().trim_start()))])
            .unwrap_or_default(),
    }
}

/// Whole lines out of chunks that may end mid-line.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: String,
}

impl LineSplitter {
    /// The lines `chunk` completes (without their line ends).
    pub fn push(&mut self, chunk: &str) -> Vec<String> {
        self.partial.push_str(chunk);
        let Some(end) = self.partial.rfind('\n') else { return Vec::new() };
        let rest = self.partial.split_off(end + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        done.lines().map(str::to_string).collect()
    }

    /// What is left without a line end.
    pub fn finish(self) -> Option<String> {
        (!self.partial.is_empty()).then_some(self.partial)
    }
}

/// One container log line as shown, `TIME message` (TIME in RFC 3339, UTC, milliseconds), and
/// its time (Unix ms; 0 when it has none). `line` starts with the engine's time; when the agent
/// stamped the line itself (Unix seconds), that stamp is the time shown. A line without the
/// engine's time is shown as it is.
fn parse_line(line: &str) -> Line {
    let Some((engine, message)) = line.split_once(' ') else { return (0, line.to_string()) };
    let Ok(engine) = engine.parse::<jiff::Timestamp>() else { return (0, line.to_string()) };
    let (time, message) = agent_stamp(message).unwrap_or((engine, message));
    (time.as_millisecond(), format!("{} {message}", rfc3339(time)))
}

/// The agent's own stamp, `sandbox-agent SECONDS.MILLIS `, and the message after it.
fn agent_stamp(message: &str) -> Option<(jiff::Timestamp, &str)> {
    let rest = message.strip_prefix(AGENT_PREFIX)?;
    let (stamp, message) = rest.split_once(' ').unwrap_or((rest, ""));
    // The agent's tracing format pads the level after the stamp (`  INFO message`).
    let message = message.trim_start();
    let (seconds, millis) = stamp.split_once('.')?;
    if millis.len() != 3 {
        return None;
    }
    let ms = seconds.parse::<i64>().ok()?.checked_mul(1000)?.checked_add(millis.parse::<i64>().ok()?)?;
    Some((jiff::Timestamp::from_millisecond(ms).ok()?, message))
}

fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_show_the_agents_time_in_rfc3339() {
        let format_line = |line: &str| parse_line(line).1;
        assert_eq!(
            format_line("2026-03-01T10:00:00.500000000Z sandbox-agent 1772359199.123 connected to the controller"),
            "2026-03-01T09:59:59.123Z connected to the controller"
        );
        // The agent's tracing lines: the level is kept, its padding is not.
        assert_eq!(
            format_line("2026-03-01T10:00:00.500000000Z sandbox-agent 1772359199.123  INFO starting: sandbox s"),
            "2026-03-01T09:59:59.123Z INFO starting: sandbox s"
        );
        // Another writer's line: the engine's time.
        assert_eq!(
            format_line("2026-03-01T10:00:00.500000000Z thread 'main' panicked"),
            "2026-03-01T10:00:00.500Z thread 'main' panicked"
        );
        // Not the agent's stamp after all.
        assert_eq!(
            format_line("2026-03-01T10:00:00.5Z sandbox-agent version 1"),
            "2026-03-01T10:00:00.500Z sandbox-agent version 1"
        );
        assert_eq!(format_line("no time here"), "no time here");
        assert_eq!(format_line(""), "");
    }

    #[test]
    fn events_become_lines_with_their_stream() {
        let event = |body: StoredBody| StoredEvent { sandbox: "s".into(), seq: 1, unix_ms: 1_772_359_200_250, body };
        let log = |stream: &str, text: &str| {
            event(StoredBody::Log {
                command_id: "install-1".into(),
                stream: stream.into(),
                data: Data::Text { text: text.into() },
                cut: None,
            })
        };
        let text = |e: &StoredEvent| event_lines(e).into_iter().map(|(_, l)| l).collect::<Vec<_>>();
        assert_eq!(
            text(&log("stdout", "added 1 package\nok\n")),
            ["2026-03-01T10:00:00.250Z stdout: added 1 package", "2026-03-01T10:00:00.250Z stdout: ok"]
        );
        assert_eq!(text(&log("agent", "$ npm install\n")), ["2026-03-01T10:00:00.250Z $ npm install"]);
        let started =
            event(StoredBody::PhaseStarted { command_id: "install-1".into(), phase: "install".into(), trial: 1 });
        assert_eq!(text(&started), ["2026-03-01T10:00:00.250Z --- install trial 1"]);
        let observed = event(StoredBody::Observation {
            command_id: "install-1".into(),
            metric: "install".into(),
            trial: 1,
            value: Some(1.5),
            error: None,
            unit: "s".into(),
            sample: 0,
        });
        assert_eq!(text(&observed), ["2026-03-01T10:00:00.250Z = install trial 1: 1.5 s"]);
        assert_eq!(event_lines(&observed)[0].0, 1_772_359_200_250);
        let file = event(StoredBody::File {
            command_id: "c".into(),
            path: "t".into(),
            offset: 0,
            bytes: 1,
            last: true,
            refused: None,
        });
        assert!(text(&file).is_empty());
    }

    #[test]
    fn the_event_log_is_read_as_it_grows_for_one_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OBSERVATIONS_FILE);
        let line = |sandbox: &str, seq: u64| {
            format!(
                r#"{{"sandbox":"{sandbox}","seq":{seq},"unix_ms":1772359200000,"kind":"phase_started","command_id":"c","phase":"install","trial":{seq}}}"#
            )
        };
        std::fs::write(&path, format!("{}\n{}\n{}", line("s", 1), line("other", 2), &line("s", 3)[..20])).unwrap();
        let mut tail = EventTail { path: Some(path.clone()), sandbox: "s".into(), offset: 0 };
        let first: Vec<String> = tail.read_new(None).into_iter().map(|(_, l)| l).collect();
        assert_eq!(first, ["2026-03-01T10:00:00.000Z --- install trial 1"]);
        // The torn last line is read once it is whole.
        std::fs::write(&path, format!("{}\n{}\n{}\n", line("s", 1), line("other", 2), line("s", 3))).unwrap();
        let next: Vec<String> = tail.read_new(None).into_iter().map(|(_, l)| l).collect();
        assert_eq!(next, ["2026-03-01T10:00:00.000Z --- install trial 3"]);
        assert!(tail.read_new(None).is_empty());
        assert!(EventTail { path: None, sandbox: "s".into(), offset: 0 }.read_new(None).is_empty());
        // `-n N` keeps the last N, read a line at a time.
        let many: String = (10..20).map(|seq| line("s", seq) + "\n").collect();
        std::fs::write(&path, many).unwrap();
        let mut tail = EventTail { path: Some(path.clone()), sandbox: "s".into(), offset: 0 };
        let last: Vec<String> = tail.read_new(Some(2)).into_iter().map(|(_, l)| l).collect();
        // A line past the bound is skipped whole, and the next one read.
        let huge = "x".repeat(crate::observations::store::MAX_LINE_BYTES + 10);
        std::fs::write(&path, format!("{huge}\n{}\n", line("s", 7))).unwrap();
        let mut skipping = EventTail { path: Some(path.clone()), sandbox: "s".into(), offset: 0 };
        let after: Vec<String> = skipping.read_new(None).into_iter().map(|(_, l)| l).collect();
        assert_eq!(after, ["2026-03-01T10:00:00.000Z --- install trial 7"]);
        assert_eq!(
            last,
            ["2026-03-01T10:00:00.000Z --- install trial 18", "2026-03-01T10:00:00.000Z --- install trial 19"]
        );
    }

    #[test]
    fn chunks_become_whole_lines() {
        let mut split = LineSplitter::default();
        assert!(split.push("first li").is_empty());
        assert_eq!(split.push("ne\nsecond\nthi"), ["first line", "second"]);
        assert_eq!(split.push("rd\n"), ["third"]);
        assert!(split.push("").is_empty());
        assert_eq!(split.push("last"), Vec::<String>::new());
        assert_eq!(split.finish().as_deref(), Some("last"));
    }
}
