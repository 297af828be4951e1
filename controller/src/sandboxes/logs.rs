//! `sandbench logs ID [-f]`: a sandbox's agent log, or following it, without the escape
//! sequences and control characters a workload may have put in it.

use std::io::Write;

use futures_util::StreamExt;

use super::find;
use crate::provision::DockerProvisioner;

/// Prints the agent's log; with `follow`, keeps printing until the sandbox is gone.
pub async fn logs(provisioner: &DockerProvisioner, id: &str, follow: bool) -> anyhow::Result<()> {
    let c = find(provisioner, id).await?;
    if !follow {
        print!("{}", crate::sanitize::terminal(&provisioner.logs(&c.name).await?));
        return Ok(());
    }
    let mut stream = std::pin::pin!(provisioner.logs_follow(&c.name));
    while let Some(chunk) = stream.next().await {
        print!("{}", crate::sanitize::terminal(&chunk?));
        let _ = std::io::stdout().flush();
    }
    Ok(())
}
