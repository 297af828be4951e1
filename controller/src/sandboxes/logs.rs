//! `sandbench logs ID [-n N] [-f]`: a sandbox's agent log, each line with its time in RFC 3339,
//! the last N lines, or following it.

use std::io::Write;

use futures_util::StreamExt;

use super::find;
use crate::provision::DockerProvisioner;

/// How the agent stamps its lines: `sandbox-agent SECONDS.MILLIS message`.
const AGENT_PREFIX: &str = "sandbox-agent ";

/// Prints the agent's log (the last `lines` lines when given); with `follow`, keeps printing
/// until the sandbox is gone.
pub async fn logs(provisioner: &DockerProvisioner, id: &str, lines: Option<usize>, follow: bool) -> anyhow::Result<()> {
    let c = find(provisioner, id).await?;
    let mut stream = std::pin::pin!(provisioner.log_lines(&c.name, lines, follow));
    let mut split = LineSplitter::default();
    let mut stdout = std::io::stdout();
    while let Some(chunk) = stream.next().await {
        for line in split.push(&chunk?) {
            let _ = writeln!(stdout, "{}", format_line(&line));
        }
        let _ = stdout.flush();
    }
    if let Some(rest) = split.finish() {
        let _ = writeln!(stdout, "{}", format_line(&rest));
    }
    Ok(())
}

/// Whole lines out of chunks that may end mid-line.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: String,
}

impl LineSplitter {
    /// The lines `chunk` completes (without their line ends).
    pub fn push(&mut self, chunk: &str) -> Vec<String> {
        self.partial.push_str(chunk);
        let Some(end) = self.partial.rfind('\n') else { return Vec::new() };
        let rest = self.partial.split_off(end + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        done.lines().map(str::to_string).collect()
    }

    /// What is left without a line end.
    pub fn finish(self) -> Option<String> {
        (!self.partial.is_empty()).then_some(self.partial)
    }
}

/// One log line as shown: `TIME message`, TIME in RFC 3339 (UTC, milliseconds). `line` starts
/// with the engine's time; when the agent stamped the line itself (Unix seconds), that stamp is
/// the time shown. A line without the engine's time is shown as it is.
pub fn format_line(line: &str) -> String {
    let Some((engine, message)) = line.split_once(' ') else { return line.to_string() };
    let Ok(engine) = engine.parse::<jiff::Timestamp>() else { return line.to_string() };
    let (time, message) = agent_stamp(message).unwrap_or((engine, message));
    format!("{} {message}", rfc3339(time))
}

/// The agent's own stamp, `sandbox-agent SECONDS.MILLIS `, and the message after it.
fn agent_stamp(message: &str) -> Option<(jiff::Timestamp, &str)> {
    let rest = message.strip_prefix(AGENT_PREFIX)?;
    let (stamp, message) = rest.split_once(' ').unwrap_or((rest, ""));
    let (seconds, millis) = stamp.split_once('.')?;
    if millis.len() != 3 {
        return None;
    }
    let ms = seconds.parse::<i64>().ok()?.checked_mul(1000)?.checked_add(millis.parse::<i64>().ok()?)?;
    Some((jiff::Timestamp::from_millisecond(ms).ok()?, message))
}

fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_show_the_agents_time_in_rfc3339() {
        assert_eq!(
            format_line("2026-03-01T10:00:00.500000000Z sandbox-agent 1772359199.123 connected to the controller"),
            "2026-03-01T09:59:59.123Z connected to the controller"
        );
        // Another writer's line: the engine's time.
        assert_eq!(
            format_line("2026-03-01T10:00:00.500000000Z thread 'main' panicked"),
            "2026-03-01T10:00:00.500Z thread 'main' panicked"
        );
        // Not the agent's stamp after all.
        assert_eq!(
            format_line("2026-03-01T10:00:00.5Z sandbox-agent version 1"),
            "2026-03-01T10:00:00.500Z sandbox-agent version 1"
        );
        assert_eq!(format_line("no time here"), "no time here");
        assert_eq!(format_line(""), "");
    }

    #[test]
    fn chunks_become_whole_lines() {
        let mut split = LineSplitter::default();
        assert!(split.push("first li").is_empty());
        assert_eq!(split.push("ne\nsecond\nthi"), ["first line", "second"]);
        assert_eq!(split.push("rd\n"), ["third"]);
        assert!(split.push("").is_empty());
        assert_eq!(split.push("last"), Vec::<String>::new());
        assert_eq!(split.finish().as_deref(), Some("last"));
    }
}
