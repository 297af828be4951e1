//! What a person (or a CI log) sees while a run goes: one line per event, with the time since the
//! start. Lines go to stderr so stdout stays for results.

use std::sync::Arc;
use std::time::Instant;

#[derive(Clone)]
pub struct Display {
    started: Arc<Instant>,
}

impl Default for Display {
    fn default() -> Self {
        Self::new()
    }
}

impl Display {
    pub fn new() -> Display {
        Display { started: Arc::new(Instant::now()) }
    }

    pub fn line(&self, text: &str) {
        let t = self.started.elapsed().as_secs_f64();
        eprintln!("[{:>3}:{:04.1}] {text}", (t / 60.0) as u64, t % 60.0);
    }
}
