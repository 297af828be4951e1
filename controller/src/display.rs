//! What a person sees while a run goes. On a terminal: one live line per sandbox (its phase and
//! trial, and the time it has been at it), with events and failures printed above as they
//! happen. Elsewhere (CI logs): plain lines with the time since the start. Always on stderr, so
//! stdout stays for results. Every text is shown through [`crate::sanitize::terminal`]: errors
//! and names may come from a sandbox, and must not drive the operator's terminal.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Clone)]
pub struct Display {
    started: Instant,
    live: Option<Arc<Live>>,
}

struct Live {
    multi: MultiProgress,
    bars: Mutex<BTreeMap<String, ProgressBar>>,
}

impl Default for Display {
    fn default() -> Self {
        Self::new()
    }
}

impl Display {
    /// Live lines when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Display {
        let live = std::io::stderr().is_terminal().then(|| {
            Arc::new(Live {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                bars: Mutex::default(),
            })
        });
        Display { started: Instant::now(), live }
    }

    /// Plain lines whatever stderr is (tests, logs).
    pub fn plain() -> Display {
        Display { started: Instant::now(), live: None }
    }

    fn stamp(&self) -> String {
        let t = self.started.elapsed().as_secs_f64();
        format!("[{:>3}:{:04.1}]", (t / 60.0) as u64, t % 60.0)
    }

    /// An event or a failure, kept in the scrollback.
    pub fn line(&self, text: &str) {
        self.note(&format!("{} {text}", self.stamp()));
    }

    /// A warning: a line that says so.
    pub fn warning(&self, text: &str) {
        self.line(&format!("warning: {text}"));
    }

    /// A command's result, on stdout (a path, a verdict, a list a script reads): unstamped,
    /// through [`crate::sanitize::terminal`] as every line.
    pub fn result(&self, text: &str) {
        self.output(&format!("{text}\n"));
    }

    /// What a sandbox printed, streamed to stdout as it comes (no newline added), through
    /// [`crate::sanitize::terminal`].
    pub fn output(&self, text: &str) {
        use std::io::Write;
        let text = crate::sanitize::terminal(text);
        let write = || {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        };
        match &self.live {
            Some(live) => live.multi.suspend(write),
            None => write(),
        }
    }

    /// A message to the person at the terminal (what to do next), on stderr and unstamped.
    pub fn note(&self, text: &str) {
        let text = crate::sanitize::terminal(text);
        match &self.live {
            Some(live) => {
                let _ = live.multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// What a sandbox is doing now.
    pub fn status(&self, sandbox: &str, doing: &str) {
        tracing::info!(sandbox, "{doing}");
        match &self.live {
            Some(live) => {
                let mut bars = live.bars.lock().unwrap_or_else(|e| e.into_inner());
                let bar = bars.entry(sandbox.to_string()).or_insert_with(|| {
                    let bar = live.multi.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("{spinner} {prefix:<8} {msg} ({elapsed})")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.set_prefix(crate::sanitize::terminal(sandbox).into_owned());
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bar
                });
                bar.reset_elapsed();
                bar.set_message(crate::sanitize::terminal(doing).replace('\n', " "));
            }
            None => self.line(&format!("[{sandbox}] {doing}")),
        }
    }

    /// The sandbox is gone: its live line ends with `last`.
    pub fn done(&self, sandbox: &str, last: &str) {
        match &self.live {
            Some(live) => {
                if let Some(bar) = live.bars.lock().unwrap_or_else(|e| e.into_inner()).remove(sandbox) {
                    bar.finish_with_message(crate::sanitize::terminal(last).replace('\n', " "));
                }
            }
            None => self.line(&format!("[{sandbox}] {last}")),
        }
    }
}
