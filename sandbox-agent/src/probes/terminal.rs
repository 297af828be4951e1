//! A program in a real pseudo-terminal (120×40): the screen as a VT100 model, answers to the
//! terminal queries programs send at start-up (even when a query is split across reads), the
//! synchronized-output mode (DEC 2026) tracked so half-drawn frames are never inspected, input
//! through a non-blocking queue capped at 64 KiB, the raw transcript capped at 8 MB, and what the
//! program drew since a mark (the output since then replayed onto a blank screen).

use std::collections::BTreeMap;
use std::num::NonZeroU16;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, ptsname, unlockpt};
use rustix::termios::{LocalModes, Winsize};

pub const ROWS: u16 = 40;
pub const COLS: u16 = 120;
pub const MAX_PENDING_INPUT: usize = 64 * 1024;
pub const MAX_TRANSCRIPT: usize = 8_000_000;
const READ_CHUNK: usize = 65_536;
/// ROWS×COLS as the screen model takes them (checked when the agent is compiled).
const SIZE: (NonZeroU16, NonZeroU16) = match (NonZeroU16::new(ROWS), NonZeroU16::new(COLS)) {
    (Some(rows), Some(cols)) => (rows, cols),
    _ => panic!("the terminal has rows and columns"),
};

const ESC: u8 = 0x1b;

/// Terminal queries and the replies a real terminal of this size would give (the reference
/// harness's table).
const QUERIES: &[(&[u8], &[u8])] = &[
    (b"\x1b[6n", b"\x1b[1;1R"),
    (b"\x1b[?6n", b"\x1b[?1;1R"),
    (b"\x1b[c", b"\x1b[?1;2c"),
    (b"\x1b[0c", b"\x1b[?1;2c"),
    (b"\x1b[>c", b"\x1b[>0;276;0c"),
    (b"\x1b[>0c", b"\x1b[>0;276;0c"),
    (b"\x1b[?u", b"\x1b[?0u"),
    (b"\x1b[?2026$p", b"\x1b[?2026;2$y"),
    (b"\x1b[14t", b"\x1b[4;640;960t"),
    (b"\x1b[16t", b"\x1b[6;16;8t"),
    (b"\x1b[18t", b"\x1b[8;40;120t"),
];
/// OSC colour queries, ended by BEL or ST.
const OSC_QUERIES: &[(&[u8], &[u8])] =
    &[(b"\x1b]11;?", b"\x1b]11;rgb:0000/0000/0000\x1b\\"), (b"\x1b]10;?", b"\x1b]10;rgb:eeee/eeee/eeee\x1b\\")];
const SYNC_ON: &[u8] = b"\x1b[?2026h";
const SYNC_OFF: &[u8] = b"\x1b[?2026l";

/// What the scanner made of a chunk of output.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Output for the screen, queries removed.
    pub text: Vec<u8>,
    /// Replies to write back to the program, in order.
    pub replies: Vec<u8>,
}

/// Finds terminal queries in a byte stream whose chunks may split them anywhere, and tracks the
/// synchronized-output mode.
#[derive(Debug, Default)]
pub struct QueryScanner {
    held: Vec<u8>,
    sync_output: bool,
}

enum Match {
    Query(usize, &'static [u8]),
    Mode(usize, bool),
    Partial,
    None,
}

impl QueryScanner {
    pub fn sync_output(&self) -> bool {
        self.sync_output
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Scanned {
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(chunk);
        let mut out = Scanned::default();
        let mut text_start = 0;
        let mut i = 0;
        while i < data.len() {
            if data[i] != ESC {
                i += 1;
                continue;
            }
            match classify(&data[i..]) {
                Match::Query(len, reply) => {
                    out.text.extend_from_slice(&data[text_start..i]);
                    out.replies.extend_from_slice(reply);
                    i += len;
                    text_start = i;
                }
                Match::Mode(len, on) => {
                    self.sync_output = on;
                    i += len;
                }
                Match::Partial => {
                    out.text.extend_from_slice(&data[text_start..i]);
                    self.held = data[i..].to_vec();
                    return out;
                }
                Match::None => i += 1,
            }
        }
        out.text.extend_from_slice(&data[text_start..]);
        out
    }
}

fn classify(rest: &[u8]) -> Match {
    for (query, reply) in QUERIES {
        if rest.starts_with(query) {
            return Match::Query(query.len(), reply);
        }
    }
    for (mode, on) in [(SYNC_ON, true), (SYNC_OFF, false)] {
        if rest.starts_with(mode) {
            return Match::Mode(mode.len(), on);
        }
    }
    for (prefix, reply) in OSC_QUERIES {
        if rest.starts_with(prefix) {
            return match &rest[prefix.len()..] {
                [] | [ESC] => Match::Partial,
                [0x07, ..] => Match::Query(prefix.len() + 1, reply),
                [ESC, b'\\', ..] => Match::Query(prefix.len() + 2, reply),
                _ => Match::None,
            };
        }
    }
    let all = QUERIES.iter().map(|q| q.0).chain([SYNC_ON, SYNC_OFF]).chain(OSC_QUERIES.iter().map(|q| q.0));
    if all.into_iter().any(|seq| seq.len() > rest.len() && seq.starts_with(rest)) {
        Match::Partial
    } else {
        Match::None
    }
}

/// A point in a terminal's output: the bytes written so far, and where the cursor was then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    pub output_bytes: usize,
    /// (row, column), from 0.
    pub cursor: (u16, u16),
    /// On the alternate screen.
    pub alternate: bool,
}

/// The output since a mark replayed onto a blank screen of the same size, its cursor where the
/// real one was (on the same grid): the text the program drew since, wherever it put it and
/// however the cursor moved between characters, without what was on the screen already. (The
/// reference harness matches the raw output since instead, where a cursor move between two
/// words hides them.)
struct Drawn {
    mark: Mark,
    /// Transcript bytes replayed so far.
    fed: usize,
    parser: vt100::Parser,
}

impl Drawn {
    fn start(mark: &Mark, transcript_len: usize) -> Drawn {
        let mut parser = vt100::Parser::new(SIZE.0, SIZE.1, 0);
        if mark.alternate {
            parser.process(b"\x1b[?47h");
        }
        parser.process(format!("\x1b[{};{}H", mark.cursor.0 + 1, mark.cursor.1 + 1).as_bytes());
        Drawn { mark: *mark, fed: mark.output_bytes.min(transcript_len), parser }
    }
}

/// How to start the program.
#[derive(Debug, Clone)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Run as this uid/gid (supplementary groups dropped); None keeps the agent's.
    pub user: Option<(u32, u32)>,
}

pub struct Terminal {
    master: OwnedFd,
    child: Child,
    screen: vt100::Parser,
    scanner: QueryScanner,
    pending: Vec<u8>,
    transcript: Vec<u8>,
    /// What was drawn since the last mark asked about.
    drawn: Option<Drawn>,
    /// Taken just before the program was spawned.
    pub started: Instant,
}

impl Terminal {
    pub fn spawn(launch: &Launch) -> anyhow::Result<Terminal> {
        let (master, slave) = open_pty().context("cannot open a pseudo-terminal")?;
        let mut command = Command::new(&launch.program);
        command
            .args(&launch.args)
            .env_clear()
            .envs(&launch.env)
            .current_dir(&launch.cwd)
            .stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave));
        if let Some((uid, gid)) = launch.user {
            command.uid(uid).gid(gid);
        }
        // SAFETY: between fork and exec only raw system calls run (rustix's are plain syscalls:
        // no allocation, no lock): a new session whose controlling terminal is the pty on stdin.
        unsafe {
            command.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
                Ok(())
            });
        }
        let started = Instant::now();
        let child = crate::reaper::spawn_owned(&mut command)
            .with_context(|| format!("cannot start {}", launch.program.display()))?;
        Ok(Terminal {
            master,
            child,
            screen: vt100::Parser::new(SIZE.0, SIZE.1, 0),
            scanner: QueryScanner::default(),
            pending: Vec::new(),
            transcript: Vec::new(),
            drawn: None,
            started,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the output and the cursor are now.
    pub fn mark(&self) -> Mark {
        let screen = self.screen();
        Mark {
            output_bytes: self.transcript.len(),
            cursor: screen.cursor_position(),
            alternate: screen.alternate_screen(),
        }
    }

    /// The text the program drew since `mark` (see [`Drawn`]), as [`Terminal::screen_text`]
    /// gives the screen. Kept between calls, so each call replays only the new output.
    pub fn drawn_since(&mut self, mark: &Mark) -> String {
        let mut drawn = match self.drawn.take() {
            Some(drawn) if drawn.mark == *mark => drawn,
            _ => Drawn::start(mark, self.transcript.len()),
        };
        drawn.parser.process(&self.transcript[drawn.fed..]);
        drawn.fed = self.transcript.len();
        let text = text_of(drawn.parser.screen());
        self.drawn = Some(drawn);
        text
    }

    /// Queues input for the program.
    pub fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        if self.pending.len() + bytes.len() > MAX_PENDING_INPUT {
            bail!("Terminal input queue exceeds 64 KiB");
        }
        self.pending.extend_from_slice(bytes);
        Ok(())
    }

    pub fn clear_pending(&mut self) {
        self.pending.clear();
    }

    pub fn pending_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn sync_output(&self) -> bool {
        self.scanner.sync_output()
    }

    /// True once the program switched its terminal to non-canonical, no-echo input.
    pub fn raw_noecho(&self) -> anyhow::Result<bool> {
        let termios = rustix::termios::tcgetattr(&self.master).context("cannot read the terminal mode")?;
        Ok(!termios.local_modes.intersects(LocalModes::ICANON | LocalModes::ECHO))
    }

    pub fn screen(&self) -> &vt100::Screen {
        self.screen.screen()
    }

    /// Writes what input it can, then waits up to `wait` for output and processes it.
    /// Returns whether anything was read.
    pub fn pump(&mut self, wait: Duration) -> anyhow::Result<bool> {
        self.flush_input()?;
        let timeout = Timespec::try_from(wait).unwrap_or(Timespec { tv_sec: i64::MAX, tv_nsec: 0 });
        let ready = match poll(&mut [PollFd::new(&self.master, PollFlags::IN)], Some(&timeout)) {
            Ok(ready) => ready,
            Err(Errno::INTR) => return Ok(false),
            Err(err) => return Err(err).context("poll on the terminal failed"),
        };
        if ready == 0 {
            return Ok(false);
        }
        let mut buf = vec![0u8; READ_CHUNK];
        let n = match rustix::io::read(&self.master, &mut buf) {
            Ok(n) => n,
            Err(Errno::AGAIN | Errno::INTR) => return Ok(false),
            Err(Errno::IO) => bail!("the program exited before the measurement completed"),
            Err(err) => return Err(err).context("cannot read the terminal"),
        };
        if n == 0 {
            bail!("the program exited before the measurement completed");
        }
        let chunk = &buf[..n];
        if self.transcript.len() + chunk.len() > MAX_TRANSCRIPT {
            bail!("Terminal transcript exceeds 8 MB");
        }
        self.transcript.extend_from_slice(chunk);
        let scanned = self.scanner.feed(chunk);
        self.screen.process(&scanned.text);
        if !scanned.replies.is_empty() {
            // Replies go ahead of queued keystrokes, as a terminal would answer at once.
            let mut replies = scanned.replies;
            replies.append(&mut self.pending);
            self.pending = replies;
            self.flush_input()?;
        }
        Ok(true)
    }

    /// Pumps for `duration`.
    pub fn settle(&mut self, duration: Duration) -> anyhow::Result<()> {
        let end = Instant::now() + duration;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            self.pump(left.min(Duration::from_millis(5)))?;
        }
        Ok(())
    }

    fn flush_input(&mut self) -> anyhow::Result<()> {
        while !self.pending.is_empty() {
            match rustix::io::write(&self.master, &self.pending) {
                Ok(n) => drop(self.pending.drain(..n)),
                Err(Errno::AGAIN | Errno::INTR) => return Ok(()),
                Err(Errno::IO) => bail!("the program exited before the measurement completed"),
                Err(err) => return Err(err).context("cannot write to the terminal"),
            }
        }
        Ok(())
    }

    /// The screen as text, trailing spaces removed.
    pub fn screen_text(&self) -> String {
        text_of(self.screen())
    }

    /// Stops the program (Ctrl-C, again after 150 ms, then SIGKILL) and writes
    /// `<prefix>.raw` (all output) and `<prefix>.txt` (the final screen).
    pub fn close(mut self, transcript_prefix: Option<&Path>) -> anyhow::Result<()> {
        self.pending.clear();
        for _ in 0..2 {
            if self.child.try_wait()?.is_some() {
                break;
            }
            let _ = self.send(b"\x03");
            let _ = self.flush_input();
            let _ = self.pump_briefly(Duration::from_millis(150));
        }
        if self.child.try_wait()?.is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        crate::reaper::disown(self.child.id());
        if let Some(prefix) = transcript_prefix {
            let raw = prefix.with_extension("raw");
            std::fs::write(&raw, &self.transcript).with_context(|| format!("cannot write {}", raw.display()))?;
            let txt = prefix.with_extension("txt");
            std::fs::write(&txt, self.screen_text() + "\n")
                .with_context(|| format!("cannot write {}", txt.display()))?;
        }
        Ok(())
    }

    fn pump_briefly(&mut self, duration: Duration) -> anyhow::Result<()> {
        let end = Instant::now() + duration;
        while Instant::now() < end {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            if self.pump(Duration::from_millis(5)).is_err() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// A screen as text: its rows, trailing spaces removed, and no trailing blank lines.
fn text_of(screen: &vt100::Screen) -> String {
    let rows: Vec<String> = screen.rows(0, COLS).map(|r| r.trim_end().to_string()).collect();
    let mut text = rows.join("\n");
    text.truncate(text.trim_end().len());
    text
}

/// A new pseudo-terminal of ROWS×COLS: the master (non-blocking, close-on-exec) and its slave
/// (close-on-exec; the child gets copies as its standard streams).
fn open_pty() -> rustix::io::Result<(OwnedFd, OwnedFd)> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    // The slave through the master (TIOCGPTPEER, Linux 4.13), else by its /dev/pts path.
    let slave = match ioctl_tiocgptpeer(&master, flags) {
        Ok(slave) => slave,
        Err(_) => {
            let path = ptsname(&master, Vec::new())?;
            rustix::fs::open(path.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?
        }
    };
    rustix::termios::tcsetwinsize(&master, Winsize { ws_row: ROWS, ws_col: COLS, ws_xpixel: 0, ws_ypixel: 0 })?;
    rustix::io::ioctl_fionbio(&master, true)?;
    Ok((master, slave))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_every_query_even_split_at_every_byte() {
        let mut all: Vec<(Vec<u8>, Vec<u8>)> = QUERIES.iter().map(|(q, r)| (q.to_vec(), r.to_vec())).collect();
        for (q, r) in OSC_QUERIES {
            all.push(([*q, b"\x07"].concat(), r.to_vec()));
            all.push(([*q, b"\x1b\\"].concat(), r.to_vec()));
        }
        for (query, reply) in all {
            let stream = [b"before".as_slice(), &query, b"after"].concat();
            for split in 0..=stream.len() {
                let mut scanner = QueryScanner::default();
                let a = scanner.feed(&stream[..split]);
                let b = scanner.feed(&stream[split..]);
                let text = [a.text, b.text].concat();
                let replies = [a.replies, b.replies].concat();
                assert_eq!(text, b"beforeafter", "query {query:?} split at {split}");
                assert_eq!(replies, reply, "query {query:?} split at {split}");
            }
        }
    }

    #[test]
    fn tracks_synchronized_output_across_splits_and_keeps_other_escapes() {
        let stream = b"\x1b[?2026h\x1b[2Kdraw\x1b[?2026l\x1b[1mbold";
        for split in 0..=stream.len() {
            let mut scanner = QueryScanner::default();
            let a = scanner.feed(&stream[..split]);
            let on_after_first = scanner.sync_output();
            let b = scanner.feed(&stream[split..]);
            assert_eq!([a.text, b.text].concat(), stream.to_vec());
            assert!(b.replies.is_empty() && a.replies.is_empty());
            assert!(!scanner.sync_output());
            if (8..stream.len() - 14).contains(&split) {
                assert!(on_after_first, "split {split}");
            }
        }
        // A lone escape that starts nothing known is passed through, not held forever.
        let mut scanner = QueryScanner::default();
        assert_eq!(scanner.feed(b"\x1b[31mred").text, b"\x1b[31mred");
    }
}
