//! The sticky comment's markers: how a comment is recognised as ours, which spec and which run
//! generation (head, attempt, time) it carries, and the order between generations.
//!
//! `report.md` starts with HTML comments (see `report/markdown.rs`):
//!
//! ```text
//! <!-- sandbench:v1 -->
//! <!-- run:<run-id>:<attempt> head:<sha> [key:value …] -->
//! <!-- comparison:<fingerprint> status:<status> -->
//! ### <spec> performance — <status>
//! ```
//!
//! Everything that reads those lines is [`parse`]; it is tolerant (unknown keys, missing
//! optional fields, a missing or non-numeric attempt) so the renderer can grow fields without
//! breaking comments already posted. Values are compared as written: both sides of a comparison
//! come through this function, so any escaping the renderer applies is applied to both.

use std::cmp::Ordering;

/// The first line of every sandbench comment.
pub const STICKY: &str = "<!-- sandbench:";
/// How many leading lines may hold markers and the title.
const HEADER_LINES: usize = 12;

/// What a sticky comment says about the run that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub run_id: String,
    /// The CI attempt of that run (1 when the renderer wrote none).
    pub attempt: u32,
    pub head: String,
    /// When the run started, as 14 digits (YYYYMMDDhhmmss, UTC): from a `time:` field, else from
    /// a run id of the form `YYYYMMDD-hhmmss-…`.
    pub time: Option<String>,
    /// From a `spec:` field, else from the title line.
    pub spec: Option<String>,
    pub status: Option<String>,
}

/// The run id a notice carries (`ci-<time>`): a comment without a report.
pub const NOTICE_RUN_PREFIX: &str = "ci-";

impl Marker {
    /// Whether the comment is a notice (running, pending-trust, failed), not a run's report.
    pub fn is_notice(&self) -> bool {
        self.run_id.starts_with(NOTICE_RUN_PREFIX)
    }
}

/// Whether `body` is a sandbench comment at all.
pub fn is_sticky(body: &str) -> bool {
    body.trim_start().starts_with(STICKY)
}

/// Reads the markers of a sandbench comment; `None` when it is not one or names no run and head.
pub fn parse(body: &str) -> Option<Marker> {
    if !is_sticky(body) {
        return None;
    }
    let (mut run, mut head, mut time, mut spec, mut status) = (None, None, None, None, None);
    for line in body.trim_start().lines().take(HEADER_LINES) {
        let line = line.trim();
        if let Some(inner) = line.strip_prefix("<!--").and_then(|l| l.strip_suffix("-->")) {
            for token in inner.split_whitespace() {
                let Some((key, value)) = token.split_once(':') else { continue };
                match key {
                    "run" => run = Some(value.to_string()),
                    "head" => head = Some(value.to_string()),
                    "time" => time = digits(value),
                    "spec" => spec = Some(value.to_string()),
                    "status" => status = Some(value.to_string()),
                    _ => {}
                }
            }
        } else if let Some(title) = line.strip_prefix("### ") {
            if let Some((name, state)) = title.rsplit_once(" performance — ") {
                spec.get_or_insert_with(|| name.to_string());
                status.get_or_insert_with(|| state.trim().to_string());
            }
            break;
        }
    }
    let run = run?;
    let head = head.filter(|h| !h.is_empty())?;
    let (run_id, attempt) = match run.rsplit_once(':') {
        Some((id, attempt)) => (id.to_string(), attempt.parse().unwrap_or(1)),
        None => (run, 1),
    };
    let time = time.or_else(|| time_of_run_id(&run_id));
    Some(Marker { run_id, attempt, head, time, spec, status })
}

/// The 14 digits of a run id `YYYYMMDD-hhmmss-…` (the controller's ids).
fn time_of_run_id(id: &str) -> Option<String> {
    let b = id.as_bytes();
    let shaped = b.len() >= 15
        && b[8] == b'-'
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[9..15].iter().all(u8::is_ascii_digit);
    shaped.then(|| format!("{}{}", &id[..8], &id[9..15]))
}

/// The first 14 digits of a time such as `2026-11-29T10:00:00Z` or `20261129100000`.
fn digits(value: &str) -> Option<String> {
    let d: String = value.chars().filter(char::is_ascii_digit).take(14).collect();
    (d.len() == 14).then_some(d)
}

/// Which generation is newer, for two runs of the same head: the later start, then the higher
/// attempt. When either start is unknown, the attempt alone decides.
pub fn order(a: &Marker, b: &Marker) -> Ordering {
    match (&a.time, &b.time) {
        (Some(ta), Some(tb)) => ta.cmp(tb).then(a.attempt.cmp(&b.attempt)),
        _ => a.attempt.cmp(&b.attempt),
    }
}

/// `body` with the attempt of its run marker set to `attempt` (the renderer writes 1 when it
/// does not know the CI attempt).
pub fn with_attempt(body: &str, attempt: u32) -> String {
    let mut out = String::with_capacity(body.len() + 4);
    let mut done = false;
    for (i, line) in body.split_inclusive('\n').enumerate() {
        if !done && i < HEADER_LINES && line.trim_start().starts_with("<!-- run:") {
            let start = line.find("run:").unwrap_or(0) + 4;
            let end = line[start..].find(char::is_whitespace).map_or(line.len(), |e| start + e);
            let id = line[start..end].rsplit_once(':').map_or(&line[start..end], |(id, _)| id);
            out.push_str(&line[..start]);
            out.push_str(&format!("{id}:{attempt}"));
            out.push_str(&line[end..]);
            done = true;
        } else {
            out.push_str(line);
        }
    }
    out
}

/// A short comment for a run that has not produced a report: `running` (the head is being
/// measured) or `pending-trust` (the trust gate refused it; `message` says why). It carries the
/// same markers as a report so a later run replaces it.
pub fn notice(spec: &str, status: &str, run_id: &str, attempt: u32, time: &str, head: &str, base: &str) -> String {
    use crate::report::format::escape;
    let short = |c: &str| c.chars().take(8).collect::<String>();
    let clean = |s: &str| s.chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).collect::<String>();
    format!(
        "<!-- sandbench:v1 -->\n<!-- run:{}:{attempt} head:{} time:{} -->\n<!-- comparison:- status:{} -->\n\
         ### {} performance — {}\n\nHead `{}` compared with base `{}`.\n\n",
        clean(run_id),
        clean(head),
        time.chars().filter(char::is_ascii_digit).collect::<String>(),
        clean(status),
        escape(spec),
        clean(status),
        short(&clean(head)),
        short(&clean(base)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TODAY: &str = "<!-- sandbench:v1 -->\n<!-- run:20261129-101500-abcd:1 head:2222 -->\n\
        <!-- comparison:ff status:completed -->\n### Demo performance — completed\n\nbody\n";

    #[test]
    fn reads_the_markers_the_renderer_writes_today() {
        let m = parse(TODAY).unwrap();
        assert_eq!(m.run_id, "20261129-101500-abcd");
        assert_eq!(m.attempt, 1);
        assert_eq!(m.head, "2222");
        assert_eq!(m.time.as_deref(), Some("20261129101500"));
        assert_eq!(m.spec.as_deref(), Some("Demo"));
        assert_eq!(m.status.as_deref(), Some("completed"));
    }

    #[test]
    fn tolerates_new_fields_and_odd_attempts() {
        let m =
            parse("<!-- sandbench:v2 -->\n<!-- run:gh-77:3 head:abc time:2026-11-29T10:00:00Z spec:x%20y new:1 -->\n")
                .unwrap();
        assert_eq!((m.run_id.as_str(), m.attempt), ("gh-77", 3));
        assert_eq!(m.time.as_deref(), Some("20261129100000"));
        assert_eq!(m.spec.as_deref(), Some("x%20y"));
        let m = parse("<!-- sandbench:v1 -->\n<!-- run:plain head:abc -->\n").unwrap();
        assert_eq!((m.run_id.as_str(), m.attempt, m.time), ("plain", 1, None));
        let m = parse("<!-- sandbench:v1 -->\n<!-- run:id:x head:abc -->\n").unwrap();
        assert_eq!(m.attempt, 1);
    }

    #[test]
    fn refuses_what_is_not_ours_or_names_no_run() {
        assert!(parse("hello\n<!-- run:1:1 head:abc -->").is_none());
        assert!(parse("<!-- sandbench:v1 -->\n<!-- run:1:1 -->\n").is_none());
        assert!(parse("<!-- sandbench:v1 -->\n").is_none());
        // A marker below the title is text, not a marker.
        assert!(parse("<!-- sandbench:v1 -->\n### T performance — x\n<!-- run:1:1 head:a -->\n").is_none());
    }

    #[test]
    fn later_start_wins_then_higher_attempt() {
        let m = |time: Option<&str>, attempt| Marker {
            run_id: "r".into(),
            attempt,
            head: "h".into(),
            time: time.map(str::to_string),
            spec: None,
            status: None,
        };
        assert_eq!(order(&m(Some("20260101000001"), 1), &m(Some("20260101000000"), 2)), Ordering::Greater);
        assert_eq!(order(&m(Some("20260101000000"), 2), &m(Some("20260101000000"), 1)), Ordering::Greater);
        assert_eq!(order(&m(None, 2), &m(Some("20260101000000"), 1)), Ordering::Greater);
        assert_eq!(order(&m(None, 1), &m(None, 1)), Ordering::Equal);
    }

    #[test]
    fn the_attempt_is_restamped_in_place() {
        let body = with_attempt(TODAY, 4);
        assert!(body.contains("<!-- run:20261129-101500-abcd:4 head:2222 -->\n"), "{body}");
        assert_eq!(body.len(), TODAY.len());
        assert_eq!(parse(&body).unwrap().attempt, 4);
        let plain = with_attempt("<!-- sandbench:v1 -->\n<!-- run:x head:a -->\n", 2);
        assert_eq!(parse(&plain).unwrap().attempt, 2);
        assert_eq!(with_attempt("no markers\n", 3), "no markers\n");
    }

    #[test]
    fn a_notice_parses_like_a_report() {
        let body = notice("Demo <b>", "pending-trust", "gh-9", 2, "2026-11-29T10:00:00Z", "abc123def", "0011");
        let m = parse(&body).unwrap();
        assert_eq!((m.run_id.as_str(), m.attempt, m.head.as_str()), ("gh-9", 2, "abc123def"));
        assert_eq!(m.time.as_deref(), Some("20261129100000"));
        assert_eq!(m.status.as_deref(), Some("pending-trust"));
        assert_eq!(m.spec, parse(&notice("Demo <b>", "running", "x", 1, "", "h", "b")).unwrap().spec);
        assert!(!body.contains("<b>"));
        // Hostile fields cannot close the marker early.
        let evil = notice("s", "running", "a -->x", 1, "t", "h --> <!-- run:z:9 head:q", "b");
        assert_eq!(parse(&evil).unwrap().attempt, 1);
        assert_eq!(evil.matches("-->").count(), 3);
    }
}
