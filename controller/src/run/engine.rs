//! The engine under a run: whether it answers, and waiting for it (up to a bound) when it does
//! not — a Docker engine restarting under the run, say. The first to find it unreachable says so
//! once and polls it; everyone else waits for that answer. Each outage it came back from is
//! counted, so a sandbox found dead afterwards is known to have been lost with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::display::Display;
use crate::provision::Provisioner;

/// How long a run waits for an unreachable engine by default (`--engine-wait`).
pub const DEFAULT_ENGINE_WAIT: Duration = Duration::from_secs(120);

/// How often an unreachable engine is asked again.
const POLL: Duration = Duration::from_millis(500);

pub(super) struct EngineHealth {
    provisioner: Arc<dyn Provisioner>,
    bound: Duration,
    /// Outages the engine came back from.
    outages: AtomicU64,
    /// Past the bound once: the run gives up on it.
    gone: AtomicBool,
    /// Held by whoever polls the engine during an outage.
    polling: tokio::sync::Mutex<()>,
}

impl EngineHealth {
    pub fn new(provisioner: Arc<dyn Provisioner>, bound: Duration) -> EngineHealth {
        EngineHealth {
            provisioner,
            bound,
            outages: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            polling: tokio::sync::Mutex::new(()),
        }
    }

    /// How many outages the engine came back from so far.
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::SeqCst)
    }

    /// Ok when the engine answers, at once or within the bound (saying so on `display`); past
    /// the bound, the reason the run fails, naming the engine.
    pub async fn reachable(&self, display: &Display) -> Result<(), String> {
        if self.gone.load(Ordering::SeqCst) {
            return Err(self.gave_up());
        }
        if self.provisioner.ping().await.is_ok() {
            return Ok(());
        }
        let _polling = self.polling.lock().await;
        if self.gone.load(Ordering::SeqCst) {
            return Err(self.gave_up());
        }
        let err = match self.provisioner.ping().await {
            // Back while another waited for it.
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        let endpoint = self.provisioner.endpoint();
        tracing::warn!("Docker engine unreachable at {endpoint}: {err:#}");
        display.line(&format!(
            "Docker engine unreachable at {endpoint}; waiting up to {} s",
            self.bound.as_secs_f64().round()
        ));
        let begun = Instant::now();
        loop {
            tokio::time::sleep(POLL).await;
            if self.provisioner.ping().await.is_ok() {
                self.outages.fetch_add(1, Ordering::SeqCst);
                display.line(&format!(
                    "Docker engine at {endpoint} answers again after {:.1} s",
                    begun.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            if begun.elapsed() >= self.bound {
                self.gone.store(true, Ordering::SeqCst);
                return Err(self.gave_up());
            }
        }
    }

    fn gave_up(&self) -> String {
        format!(
            "Docker engine unreachable at {} for {} s (--engine-wait): the run cannot go on",
            self.provisioner.endpoint(),
            self.bound.as_secs_f64().round()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::fake::{FakeProvisioner, Script};

    #[tokio::test]
    async fn an_engine_that_comes_back_within_the_bound_is_waited_for_and_counted() {
        let fake = Arc::new(FakeProvisioner::new(Script::default()));
        let engine = EngineHealth::new(fake.clone(), Duration::from_secs(10));
        let display = Display::plain();
        assert_eq!(engine.reachable(&display).await, Ok(()));
        assert_eq!(engine.outages(), 0);
        fake.engine_down_for(Duration::from_millis(1200));
        let begun = Instant::now();
        assert_eq!(engine.reachable(&display).await, Ok(()));
        assert!(begun.elapsed() >= Duration::from_millis(1100), "waited {:?}", begun.elapsed());
        assert_eq!(engine.outages(), 1);
        assert_eq!(engine.reachable(&display).await, Ok(()));
        assert_eq!(engine.outages(), 1);
    }

    #[tokio::test]
    async fn past_the_bound_the_run_gives_up_naming_docker_and_stays_given_up() {
        let fake = Arc::new(FakeProvisioner::new(Script::default()));
        let engine = EngineHealth::new(fake.clone(), Duration::from_secs(1));
        let display = Display::plain();
        fake.engine_down_for(Duration::from_secs(3));
        let err = engine.reachable(&display).await.unwrap_err();
        assert_eq!(err, "Docker engine unreachable at fake://engine for 1 s (--engine-wait): the run cannot go on");
        assert_eq!(engine.outages(), 0);
        // Later callers give up at once, even once the engine answers.
        fake.engine_down_for(Duration::ZERO);
        let begun = Instant::now();
        assert_eq!(engine.reachable(&display).await.unwrap_err(), err);
        assert!(begun.elapsed() < POLL);
    }
}
