//! `sandbench rm ID|--run R|--all` and `sandbench gc`: removing sandboxes by hand, and those
//! that expired or whose controller is gone.

use anyhow::bail;

use super::find;
use crate::provision::{ContainerInfo, Provisioner, labels};

/// Removes one sandbox, a run's, or all; returns the names removed.
pub async fn rm(
    provisioner: &dyn Provisioner,
    id: Option<&str>,
    run: Option<&str>,
    all: bool,
) -> anyhow::Result<Vec<String>> {
    let targets: Vec<ContainerInfo> = match (id, run, all) {
        (Some(id), None, false) => vec![find(provisioner, id).await?],
        (None, Some(run), false) => {
            let found = provisioner.list(Some((labels::RUN, run))).await?;
            if found.is_empty() {
                bail!("no sandbox of run {run:?}; `sandbench ls` shows the runs");
            }
            found
        }
        (None, None, true) => provisioner.list(None).await?,
        _ => bail!("give one of: a sandbox id, --run RUN, or --all"),
    };
    let mut removed = Vec::new();
    for c in targets {
        provisioner.remove(&c.id).await?;
        removed.push(c.name);
    }
    Ok(removed)
}

/// `sandbench gc`: removes what the reaper finds (expired, or its controller gone); returns a
/// line per sandbox removed.
pub async fn gc(provisioner: &dyn Provisioner) -> anyhow::Result<Vec<String>> {
    Ok(provisioner.reap().await?.into_iter().map(|r| format!("{} ({})", r.name, r.reason)).collect())
}
