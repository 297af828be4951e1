//! Fuzzing the event intake (proptest): whatever bytes or messages an agent sends, decoding and
//! persisting them never panics, the log stays readable line by line, a command's output stays
//! within its cap, and no file lands outside the sandbox's own folder. Any line in
//! `observations.jsonl` is read without panicking. Cases: `PROPTEST_CASES` (256 by default) per
//! target.

use std::path::Path;

use proptest::prelude::*;
use prost::Message;
use sandbench_proto::v1::{
    AgentMessage, Event, FileChunk, Log, Observation, PhaseDone, PhaseStarted, agent_message, event, observation,
};

use super::{Hub, HubConfig};
use crate::observations::intake::FileLimits;
use crate::observations::store::{Data, EventLog, StoredBody};

const CAP: u64 = 4096;

fn config() -> HubConfig {
    HubConfig {
        output_cap_bytes: CAP,
        files: FileLimits { max_files: 3, max_file_bytes: 8192, max_total_bytes: 12_000 },
        ..HubConfig::default()
    }
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,8}",
        prop::sample::select(vec!["c1", "c2", "../x", "-->", "<script>", "\u{1b}[2J", "é", ""]).prop_map(String::from),
        any::<String>(),
        (any::<char>(), 0..20_000usize).prop_map(|(c, n)| c.to_string().repeat(n)),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "t/a.cast",
            "t/b.cast",
            "c",
            "../../escape",
            "/etc/passwd",
            "a/../../b",
            "",
            ".",
            "a\0b",
            "a//b",
        ])
        .prop_map(String::from),
        "[a-z/.]{0,30}",
        any::<String>(),
    ]
}

fn body() -> impl Strategy<Value = Option<event::Body>> {
    let command = prop::sample::select(vec!["c1", "c2", "c3"]).prop_map(String::from);
    prop_oneof![
        (command.clone(), text(), any::<u32>(), any::<f64>(), text()).prop_map(|(c, metric, trial, v, unit)| Some(
            event::Body::Observation(Observation {
                command_id: c,
                metric,
                trial,
                outcome: Some(observation::Outcome::Value(v)),
                unit,
                sample: trial % 3,
            })
        )),
        (command.clone(), text()).prop_map(|(c, e)| Some(event::Body::Observation(Observation {
            command_id: c,
            outcome: Some(observation::Outcome::Error(e)),
            ..Default::default()
        }))),
        (command.clone(), any::<i32>(), prop::collection::vec(any::<u8>(), 0..3000))
            .prop_map(|(c, stream, chunk)| Some(event::Body::Log(Log { command_id: c, stream, chunk }))),
        (command.clone(), text(), any::<u32>()).prop_map(|(c, phase, trial)| Some(event::Body::PhaseStarted(
            PhaseStarted { command_id: c, phase, trial }
        ))),
        (command.clone(), any::<i32>(), text())
            .prop_map(|(c, status, error)| Some(event::Body::PhaseDone(PhaseDone { command_id: c, status, error }))),
        (
            command,
            path(),
            prop_oneof![0..5000u64, any::<u64>()],
            prop::collection::vec(any::<u8>(), 0..2000),
            any::<bool>()
        )
            .prop_map(|(c, path, offset, data, last)| Some(event::Body::File(FileChunk {
                command_id: c,
                path,
                offset,
                data,
                last
            }))),
        Just(None),
    ]
}

/// Events numbered from 1, now and then one with a seq of any value.
fn events() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((body(), prop::option::weighted(0.05, any::<u64>()), any::<u64>()), 0..40).prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (body, seq, unix_ms))| Event { seq: seq.unwrap_or(i as u64 + 1), unix_ms, body })
            .collect()
    })
}

/// Persists `batches` into a fresh run directory and checks what it holds afterwards.
fn persist_and_check(batches: Vec<Vec<Event>>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let hub = Hub::open(dir.path(), config()).unwrap();
        hub.register("sb").unwrap();
        for batch in batches {
            // A gap is an error (the session ends); nothing may panic.
            let _ = hub.persist("sb", batch).await;
        }
        hub.close().await;
    });
    let mut output: std::collections::HashMap<String, usize> = Default::default();
    for event in
        crate::observations::store::events(&dir.path().join(crate::observations::store::OBSERVATIONS_FILE)).unwrap()
    {
        let event = event.map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
        if let StoredBody::Log { command_id, data, cut: None, .. } = event.body {
            let n = match data {
                Data::Text { text } => text.len(),
                Data::Hex { hex } => hex.len() / 2,
            };
            *output.entry(command_id).or_default() += n;
        }
    }
    for (command, kept) in output {
        prop_assert!(kept as u64 <= CAP, "{kept} bytes kept of {command}, cap {CAP}");
    }
    for entry in walk(dir.path()) {
        let relative = entry.strip_prefix(dir.path()).unwrap().to_string_lossy().to_string();
        let allowed = relative.starts_with("sandboxes/sb")
            || relative == "sandboxes"
            || relative == crate::observations::store::OBSERVATIONS_FILE
            || relative.starts_with(".agent-tokens.json");
        prop_assert!(allowed, "a file outside the sandbox's folder: {relative}");
    }
    Ok(())
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

proptest! {
    #[test]
    fn arbitrary_events_are_persisted_within_bounds(batches in prop::collection::vec(events(), 1..4)) {
        // Later batches continue the numbering of the first, with overlaps (resends).
        let mut next: u64 = 1;
        let batches = batches
            .into_iter()
            .map(|batch| {
                let start = next.saturating_sub(2).max(1);
                let renumbered: Vec<Event> = batch
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| Event { seq: if e.seq == i as u64 + 1 { start + i as u64 } else { e.seq }, ..e })
                    .collect();
                next = start + renumbered.len() as u64;
                renumbered
            })
            .collect();
        persist_and_check(batches)?;
    }

    #[test]
    fn arbitrary_bytes_decode_or_fail_and_what_decodes_is_persisted(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = Event::decode(bytes.as_slice());
        if let Ok(AgentMessage { body: Some(agent_message::Body::Events(batch)) }) = AgentMessage::decode(bytes.as_slice()) {
            persist_and_check(vec![batch.events])?;
        }
    }

    #[test]
    fn any_log_line_is_read_or_refused(lines in prop::collection::vec(prop_oneof![
        any::<String>(),
        "\\{\"sandbox\":\"[a-z]{0,3}\",\"seq\":[0-9]{1,20},\"unix_ms\":[0-9]{1,3},\"kind\":\"(log|file|observation|phase_done|x)\"[ -~]{0,60}\\}",
        Just("{\"sandbox\":\"s\",\"seq\":1,\"unix_ms\":1,\"kind\":\"log\",\"command_id\":\"c\",\"stream\":\"stdout\",\"hex\":\"zz\"}".to_string()),
        Just("{\"sandbox\":\"s\",\"seq\":18446744073709551615,\"unix_ms\":1,\"kind\":\"file\",\"command_id\":\"c\",\"path\":\"p\",\"offset\":18446744073709551615,\"bytes\":18446744073709551615,\"last\":true}".to_string()),
    ], 0..20)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(crate::observations::store::OBSERVATIONS_FILE);
        std::fs::write(&path, lines.join("\n")).unwrap();
        for event in crate::observations::store::events(&path).unwrap() {
            let _ = event;
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (log, _) = EventLog::open(&path).unwrap();
            log.close().await;
        });
        // Reopening a hub on it works too (what could not be read was cut off as torn).
        let hub = Hub::open(dir.path(), config());
        prop_assert!(hub.is_ok(), "{:?}", hub.err());
    }
}
