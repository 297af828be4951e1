//! The Docker engine of one command: the one provisioner the command line builds, with the
//! limits its options set, connected when a command first needs a sandbox (a command that ends
//! before that, such as `history --bisect` with nothing to bisect, never connects).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::OnceCell;

use super::{DockerProvisioner, ProvisionError, Provisioner};

/// How many sandboxes the engine is asked to create at once, unless the command line says
/// (`--max-creates`): a run's two sides, or four pairs' worth of one side.
pub const DEFAULT_MAX_CREATES: usize = 4;

/// The engine every sandbox of a command is made on: cheap to clone (the clones share one
/// connection), connected once, on first use.
#[derive(Clone)]
pub struct Engine {
    max_creates: usize,
    docker: Arc<OnceCell<Arc<DockerProvisioner>>>,
    /// Whether anything asked for it (connected since, or tried to).
    asked: Arc<AtomicBool>,
}

impl Default for Engine {
    fn default() -> Engine {
        Engine::new(DEFAULT_MAX_CREATES)
    }
}

impl Engine {
    /// An engine that creates at most `max_creates` sandboxes at once (at least one).
    pub fn new(max_creates: usize) -> Engine {
        Engine {
            max_creates: max_creates.max(1),
            docker: Arc::new(OnceCell::new()),
            asked: Arc::new(AtomicBool::new(false)),
        }
    }

    /// How many sandboxes it creates at once.
    pub fn max_creates(&self) -> usize {
        self.max_creates
    }

    /// The Docker backend itself (for the figures only Docker has), connected on first use.
    pub async fn docker(&self) -> Result<Arc<DockerProvisioner>, ProvisionError> {
        self.asked.store(true, Ordering::Relaxed);
        let docker =
            self.docker.get_or_try_init(|| async { DockerProvisioner::connect(self.max_creates).await.map(Arc::new) });
        docker.await.cloned()
    }

    /// The engine as the run logic sees it ([`Provisioner`]), connected on first use.
    pub async fn provisioner(&self) -> anyhow::Result<Arc<dyn Provisioner>> {
        Ok(self.docker().await? as Arc<dyn Provisioner>)
    }

    /// Whether anything asked for it, whether or not the engine answered (a command that
    /// needed no sandbox did not).
    pub fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_is_not_connected_until_a_sandbox_is_needed_and_creates_at_least_one_at_a_time() {
        let engine = Engine::new(0);
        assert_eq!(engine.max_creates(), 1);
        assert_eq!(Engine::default().max_creates(), DEFAULT_MAX_CREATES);
        let clone = engine.clone();
        assert!(!engine.asked() && !clone.asked());
        assert!(Arc::ptr_eq(&engine.docker, &clone.docker), "clones share one connection");
    }
}
