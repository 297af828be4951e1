//! Driving a terminal program by name: named keys (with a settle after each, as a person's
//! keystrokes arrive one by one), and waits on the screen — for text, or for text drawn since the
//! last keys (what was on the screen already does not count), for more occurrences of text than
//! there were then, or for a number a regex captures to reach a bound and hold still. Only frames
//! drawn while synchronized output is off are inspected.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use regex_lite::Regex;
use sandbench_proto::plan::{CountRule, keys};

use super::terminal::{Mark, Terminal};

/// The terminal when the last keys were sent, to tell fresh output and growing counts.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Where the output since the keys starts.
    pub mark: Mark,
    pub screen: String,
}

impl Snapshot {
    pub fn of(term: &Terminal) -> Snapshot {
        Snapshot { mark: term.mark(), screen: term.screen_text() }
    }
}

/// Presses `names` in turn (`backspace*24` is 24 presses), settling `settle` after each press.
pub fn press(term: &mut Terminal, names: &[String], settle: Duration) -> anyhow::Result<()> {
    for name in names {
        let (bytes, times) = keys::parse(name).map_err(anyhow::Error::msg)?;
        for _ in 0..times {
            term.send(&bytes)?;
            if settle.is_zero() {
                term.pump(Duration::ZERO)?;
            } else {
                term.settle(settle)?;
            }
        }
    }
    Ok(())
}

/// What a wait looks for.
#[derive(Debug)]
pub enum Wait<'a> {
    Text { text: &'a str, fresh: bool, more: bool },
    Pattern { regex: Regex, count: Option<&'a CountRule> },
}

impl Wait<'_> {
    fn describe(&self) -> String {
        match self {
            Wait::Text { text, fresh: true, .. } => format!("{text:?} drawn since the last keys"),
            Wait::Text { text, more: true, .. } => format!("more {text:?} on the screen"),
            Wait::Text { text, .. } => format!("{text:?} on the screen"),
            Wait::Pattern { regex, count: Some(c) } => {
                format!("/{}/ group {} to reach {} and hold {} s", regex.as_str(), c.group, c.at_least, c.stable_s)
            }
            Wait::Pattern { regex, .. } => format!("/{}/ on the screen", regex.as_str()),
        }
    }
}

/// Occurrences of `text` in `screen`.
pub fn occurrences(screen: &str, text: &str) -> usize {
    if text.is_empty() { 0 } else { screen.matches(text).count() }
}

/// The number group `group` of `regex` captures on `screen`.
pub fn captured(regex: &Regex, group: u32, screen: &str) -> Option<u64> {
    regex.captures(screen)?.get(group as usize)?.as_str().trim().parse().ok()
}

/// Waits until the screen satisfies `wait` (relative to `before`, the screen at the last keys),
/// or fails at `timeout` quoting the end of the screen. Returns the count, for counting waits.
pub fn wait(term: &mut Terminal, wait: &Wait, before: &Snapshot, timeout: Duration) -> anyhow::Result<Option<u64>> {
    let deadline = Instant::now() + timeout;
    let mut held: Option<(u64, Instant)> = None;
    loop {
        if let Wait::Pattern { regex, count: Some(rule) } = wait {
            term.settle(Duration::from_secs_f64(rule.poll_s))?;
            if !term.sync_output() {
                let now = Instant::now();
                match captured(regex, rule.group, &term.screen_text()) {
                    Some(n) if n >= rule.at_least => match held {
                        Some((m, since)) if m == n => {
                            if now.duration_since(since).as_secs_f64() >= rule.stable_s {
                                return Ok(Some(n));
                            }
                        }
                        _ => held = Some((n, now)),
                    },
                    _ => held = None,
                }
            }
        } else if !term.sync_output() {
            let screen = term.screen_text();
            let done = match wait {
                Wait::Text { text, fresh, more } => {
                    // Fresh: in the output since the keys (as the reference's `until_output`),
                    // replayed onto a blank screen so cursor moves between characters still match.
                    let shown =
                        if *fresh { term.drawn_since(&before.mark).contains(text) } else { screen.contains(text) };
                    shown && (!more || occurrences(&screen, text) > occurrences(&before.screen, text))
                }
                Wait::Pattern { regex, .. } => regex.is_match(&screen),
            };
            if done {
                return Ok(None);
            }
        }
        if Instant::now() >= deadline {
            let screen = term.screen_text();
            let tail: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).rev().take(3).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "Timed out after {:.1} s waiting for {}; the screen ends with: {}",
                timeout.as_secs_f64(),
                wait.describe(),
                tail.join(" | ")
            );
        }
        if !matches!(wait, Wait::Pattern { count: Some(_), .. }) {
            term.pump(Duration::from_millis(5)).context("while waiting on the screen")?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::probes::terminal::Launch;

    /// `script` run by /bin/sh in a real pseudo-terminal.
    fn shell(script: &str) -> Terminal {
        Terminal::spawn(&Launch {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            cwd: "/".into(),
            user: None,
        })
        .unwrap()
    }

    #[test]
    fn fresh_text_is_text_drawn_after_the_keys() {
        // Each Enter lets the next line out; the last draws "new" first, then "Ctrl+N" before it.
        let mut term = shell(
            "printf 'Ctrl+N new\\r\\n'; read a; printf 'unrelated\\r\\n'; read b; \
             printf '\\033[8Gnew\\033[1GCtrl+N\\r\\n'; read c",
        );
        let (short, long) = (Duration::from_millis(500), Duration::from_secs(20));
        let footer = |fresh| Wait::Text { text: "Ctrl+N new", fresh, more: false };
        wait(&mut term, &footer(false), &Snapshot::default(), long).unwrap();
        // Keys, then output that is not the text: the text is on the screen from before, output
        // did come, but the text was not drawn since.
        let before = Snapshot::of(&term);
        press(&mut term, &["enter".into()], Duration::ZERO).unwrap();
        wait(&mut term, &Wait::Text { text: "unrelated", fresh: true, more: false }, &before, long).unwrap();
        assert!(term.screen_text().contains("Ctrl+N new"));
        let err = wait(&mut term, &footer(true), &before, short).unwrap_err().to_string();
        assert!(err.contains("\"Ctrl+N new\" drawn since the last keys"), "{err}");
        // Keys, then the text drawn with the cursor moving back between its words: it counts.
        let before = Snapshot::of(&term);
        press(&mut term, &["enter".into()], Duration::ZERO).unwrap();
        wait(&mut term, &footer(true), &before, long).unwrap();
        assert!(term.drawn_since(&before.mark).ends_with("Ctrl+N new"), "{:?}", term.drawn_since(&before.mark));
        assert_eq!(term.screen_text().matches("Ctrl+N new").count(), 2);
        term.close(None).unwrap();
    }

    #[test]
    fn counts_and_captures_read_off_a_screen() {
        let screen = "▾ root\n  ▸ child\n  ▾ other\nagents   12 running, 3 idle, 153 inactive";
        assert_eq!(occurrences(screen, "▾"), 2);
        assert_eq!(occurrences(screen, ""), 0);
        let re = Regex::new(r"agents\s+(\d+) running, (\d+) idle, (\d+) inactive").unwrap();
        assert_eq!(captured(&re, 3, screen), Some(153));
        assert_eq!(captured(&re, 1, screen), Some(12));
        assert_eq!(captured(&re, 4, screen), None);
        assert_eq!(captured(&re, 1, "no roster yet"), None);
    }
}
