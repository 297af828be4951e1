//! Each sandbox's life as cost sees it: the phases it went through (marks) and samples of its
//! cgroup's CPU time and memory, taken every second by a background task through the
//! provisioner.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::cost::{self, PhaseUsage};
use crate::provision::{Provisioner, Usage};

pub struct Meter {
    /// The create request (start of the lifetime).
    pub start: Instant,
    marks: Mutex<Vec<(f64, String)>>,
    samples: Mutex<Vec<(f64, u64, u64)>>,
    peak_memory_bytes: AtomicU64,
    stop: watch::Sender<bool>,
    /// A new phase began: sample at once, so short phases get their share.
    nudge: tokio::sync::Notify,
}

impl Meter {
    pub fn new() -> Arc<Meter> {
        Arc::new(Meter {
            start: Instant::now(),
            marks: Mutex::new(vec![(0.0, "provision".to_string())]),
            samples: Mutex::default(),
            peak_memory_bytes: AtomicU64::new(0),
            stop: watch::Sender::new(false),
            nudge: tokio::sync::Notify::new(),
        })
    }

    /// From now on, time and use count toward `phase`.
    pub fn mark(&self, phase: &str) {
        let at = self.start.elapsed().as_secs_f64();
        self.marks.lock().unwrap_or_else(PoisonError::into_inner).push((at, phase.to_string()));
        self.nudge.notify_one();
    }

    /// Samples the container every second until `stop_sampling` or it is gone.
    pub fn sample(self: &Arc<Self>, provisioner: Arc<dyn Provisioner>, container: String) {
        let meter = self.clone();
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = meter.nudge.notified() => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                match provisioner.usage(&container).await {
                    Ok(Some(Usage { cpu_ns, memory_bytes: memory })) => {
                        let at = meter.start.elapsed().as_secs_f64();
                        meter.samples.lock().unwrap_or_else(PoisonError::into_inner).push((at, cpu_ns, memory));
                        meter.peak_memory_bytes.fetch_max(memory, Ordering::Relaxed);
                    }
                    Ok(None) => return,
                    Err(err) => tracing::debug!("usage of {container}: {err}"),
                }
            }
        });
    }

    pub fn stop_sampling(&self) {
        self.stop.send_replace(true);
    }

    pub fn peak_memory_bytes(&self) -> u64 {
        self.peak_memory_bytes.load(Ordering::Relaxed)
    }

    /// The phases up to now (the end of the lifetime when called after removal).
    pub fn phases(&self) -> Vec<PhaseUsage> {
        let end = self.start.elapsed().as_secs_f64();
        let marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner).clone();
        cost::attribute(&marks, &samples, end)
    }
}
