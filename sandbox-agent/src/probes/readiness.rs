//! Start-up readiness by typed probes (the reference harness's algorithm): the clock stops the
//! first time a probe typed into the program is rendered on its screen. Nothing is assumed from
//! labels, placeholders or process creation; Enter is never sent.
//!
//! 1. Wait until the terminal is in non-canonical, no-echo mode (the editor took the input).
//! 2. Every 20 ms, while nothing is echoed and no input is pending, erase the previous probe and
//!    type a new one: `b` + 8 random hex digits + `r` (never CR or LF).
//! 3. Only frames read while synchronized output (DEC 2026) is off are inspected.
//! 4. At the first probe on screen, record the time; locate the latest probe, erase it
//!    (10 × DEL), and wait until no probe is visible, no input is pending and the cursor is back
//!    where the probe began. Cleanup is untimed but must finish before the deadline.

use std::time::{Duration, Instant};

use anyhow::bail;
use rand::Rng;

use super::terminal::{COLS, Terminal};

pub const PROBE_INTERVAL: Duration = Duration::from_millis(20);
const ERASE: &[u8] = &[0x7f; 10];

/// A new probe: `b`, 8 lowercase hex digits, `r`.
pub fn new_probe() -> String {
    let n: u32 = rand::rng().random();
    format!("b{n:08x}r")
}

/// Where `probe` starts on the screen (row, column), if it is visible on one row.
pub fn locate(screen: &vt100::Screen, probe: &str) -> Option<(u16, u16)> {
    let (rows, _) = screen.size();
    let probe: Vec<char> = probe.chars().collect();
    for row in 0..rows.get() {
        let cells: Vec<String> =
            (0..COLS).map(|col| screen.cell(row, col).map(|c| c.contents().to_string()).unwrap_or_default()).collect();
        'start: for col in 0..cells.len().saturating_sub(probe.len() - 1) {
            for (k, ch) in probe.iter().enumerate() {
                let mut buf = [0u8; 4];
                if cells[col + k].as_str() != &*ch.encode_utf8(&mut buf) {
                    continue 'start;
                }
            }
            return Some((row, col as u16));
        }
    }
    None
}

/// Waits until the program in `term` is ready for input; returns the time from just before the
/// program was spawned to the first rendered probe.
pub fn ready(term: &mut Terminal, timeout: Duration) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + timeout;
    let mut probes: Vec<String> = Vec::new();
    let mut echoed: Option<Instant> = None;
    let mut origin: Option<(u16, u16)> = None;
    let mut next_probe = Instant::now();
    let mut erase_owed = false;
    let mut stage = "noncanonical, no-echo terminal input";
    let result = loop {
        if Instant::now() >= deadline {
            break Err(anyhow::anyhow!("Timed out waiting for {stage}"));
        }
        let read = match term.pump(Duration::from_millis(5)) {
            Ok(read) => read,
            Err(err) => break Err(err),
        };
        let now = Instant::now();
        let updated = read && !term.sync_output();
        match term.raw_noecho() {
            Ok(true) => {}
            Ok(false) => {
                stage = "noncanonical, no-echo terminal input";
                continue;
            }
            Err(err) => break Err(err),
        }
        if let Some(origin) = origin {
            stage = "editor probe cleanup";
            let visible = probes.iter().any(|p| locate(term.screen(), p).is_some());
            if updated && term.pending_empty() && term.screen().cursor_position() == origin && !visible {
                let echoed = echoed.unwrap_or(now);
                break Ok(echoed.saturating_duration_since(term.started));
            }
            continue;
        }
        if updated && !probes.is_empty() {
            if echoed.is_none() && probes.iter().any(|p| locate(term.screen(), p).is_some()) {
                echoed = Some(now);
            }
            if echoed.is_some() {
                let latest = probes.last().map(String::as_str).unwrap_or_default();
                match locate(term.screen(), latest) {
                    Some(position) => {
                        origin = Some(position);
                        if let Err(err) = term.send(ERASE) {
                            break Err(err);
                        }
                        erase_owed = false;
                        continue;
                    }
                    None => stage = "latest editor probe rendering",
                }
            }
        }
        if echoed.is_none() && term.pending_empty() && now >= next_probe {
            let probe = new_probe();
            let sent = if erase_owed { term.send(ERASE) } else { Ok(()) }.and_then(|()| term.send(probe.as_bytes()));
            if let Err(err) = sent {
                break Err(err);
            }
            probes.push(probe);
            erase_owed = true;
            next_probe = now + PROBE_INTERVAL;
            stage = "editor input rendering";
        }
    };
    if result.is_err() && erase_owed {
        term.clear_pending();
        let _ = term.send(ERASE);
        let _ = term.pump(Duration::ZERO);
    }
    match result {
        Ok(elapsed) => Ok(elapsed),
        Err(err) => bail!("{err:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_have_the_reference_shape() {
        for _ in 0..100 {
            let p = new_probe();
            assert_eq!(p.len(), 10);
            assert!(p.starts_with('b') && p.ends_with('r'));
            assert!(p[1..9].chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        }
    }

    #[test]
    fn locates_probes_on_the_screen() {
        let mut parser =
            vt100::Parser::new(std::num::NonZeroU16::new(40).unwrap(), std::num::NonZeroU16::new(120).unwrap(), 0);
        parser.process(b"header\r\n> b0123abcdr");
        assert_eq!(locate(parser.screen(), "b0123abcdr"), Some((1, 2)));
        assert_eq!(locate(parser.screen(), "b0123abcd0"), None);
        parser.process(b"\x1b[2;3H\x1b[K");
        assert_eq!(locate(parser.screen(), "b0123abcdr"), None);
    }
}
