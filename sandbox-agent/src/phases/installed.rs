//! What an installation turned out to be, looked at untimed after the install command: the
//! format of its entry point (compiled when it starts with the ELF magic, else a script), the
//! reference's guard against a compiled candidate whose installer fell back to Node, and the
//! dependency inventory (`npm ls --global --all --json`), whose non-zero exit is a note, never a
//! failure. Each trial's facts go to the controller as `install-facts/<trial>.json`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;
use sandbench_proto::plan::{AgentPlan, InstallationFormat, Step, fact};
use sandbench_proto::v1::LogStream;

use super::common;
use crate::context::PhaseContext;
use crate::users::User;

/// The reference's message for a compiled candidate installed through Node.
pub const NODE_FALLBACK: &str = "Expected the compiled installation, but the installer selected Node";
/// Most of the inventory's output kept, in bytes.
const MAX_INVENTORY_BYTES: usize = 16 << 20;

/// What install learned of one installation.
#[derive(Debug, Default)]
pub struct Installed {
    /// The entry point's format, when the plan names one (or why it could not be read).
    pub format: Option<Result<InstallationFormat, String>>,
    /// The side's prepare built a compiled artifact.
    pub compiled_artifacts: bool,
}

impl Installed {
    /// Looks at the plan's entry point as the user sees it (links followed as far as the user may).
    pub fn look(plan: &AgentPlan, user: &User, compiled_artifacts: bool) -> Installed {
        let format = plan.install.entry_point.as_deref().map(|entry| {
            let path = check_path(user, entry).map_err(|e| format!("{e:#}"))?;
            let head = crate::as_user::head(&path, user.uid, user.gid, InstallationFormat::ELF_MAGIC.len())
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            Ok(InstallationFormat::of(&head))
        });
        Installed { format, compiled_artifacts }
    }

    /// The check `expect_format = want`: it applies only when the side built a compiled artifact
    /// (else it passes, saying so).
    pub fn expect(&self, want: InstallationFormat) -> anyhow::Result<Option<&'static str>> {
        if !self.compiled_artifacts {
            return Ok(Some("expect_format: this side built no compiled artifact, so any installation format will do"));
        }
        match &self.format {
            Some(Ok(found)) if *found == want => Ok(None),
            Some(Ok(InstallationFormat::Script)) => bail!(NODE_FALLBACK),
            Some(Ok(found)) => {
                bail!("check failed: expected the {} installation, got {}", want.as_str(), found.as_str())
            }
            Some(Err(why)) => bail!("check failed: cannot tell the installation format: {why}"),
            None => bail!("check failed: expect_format needs install.entry_point"),
        }
    }

    /// The trial's facts: the installation format (`unknown` when unreadable).
    pub fn facts(&self) -> BTreeMap<String, String> {
        let mut facts = BTreeMap::new();
        if let Some(format) = &self.format {
            let shown = format.as_ref().map_or("unknown", |f| f.as_str());
            facts.insert(fact::INSTALLATION_FORMAT.to_string(), shown.to_string());
        }
        facts
    }
}

/// Runs the inventory as `user` in its home and sends its standard output as
/// [`fact::INVENTORY_FILE`] (its standard error goes to the log); returns the fact: `ok`, or
/// what its failure was. Never an error: the installation counts whatever it says.
pub fn inventory(ctx: &PhaseContext, plan: &AgentPlan, user: &User, step: &Step) -> String {
    ctx.note(&format!("$ {}  (as {}, untimed: the dependency inventory)", step.run, user.name));
    let shell = crate::probes::command::ShellCommand {
        run: step.run.clone(),
        env: common::user_env(user, &plan.env, &step.env),
        cwd: user.home.clone(),
        user: Some((user.uid, user.gid)),
        timeout: std::time::Duration::from_secs_f64(step.timeout_s),
    };
    let mut kept = Vec::new();
    let mut cut = false;
    let done = crate::probes::command::run(&shell, &mut |stream: LogStream, chunk: &[u8]| match stream {
        LogStream::Stdout if kept.len() + chunk.len() <= MAX_INVENTORY_BYTES => kept.extend_from_slice(chunk),
        LogStream::Stdout => cut = true,
        other => ctx.log(other, chunk),
    });
    ctx.file(fact::INVENTORY_FILE, &kept);
    let cut = if cut { format!(", cut at {} MiB", MAX_INVENTORY_BYTES >> 20) } else { String::new() };
    let fact = match done {
        Ok(done) if done.status.success() && cut.is_empty() => return "ok".to_string(),
        Ok(done) if done.status.success() => format!("ok{cut}"),
        Ok(done) => format!(
            "{} (a note, not a failure; see {}{cut})",
            crate::probes::command::describe(done.status),
            fact::INVENTORY_FILE
        ),
        Err(err) => format!("could not run: {err:#}"),
    };
    ctx.note(&format!("dependency inventory: {fact}"));
    fact
}

/// Sends a trial's facts to the controller.
pub fn send_facts(ctx: &PhaseContext, trial: u32, facts: &BTreeMap<String, String>) {
    if facts.is_empty() {
        return;
    }
    let path = format!("{}/{trial}.json", fact::INSTALL_DIR);
    ctx.file(&path, &serde_json::to_vec_pretty(facts).unwrap_or_default());
}

/// Where a file check looks: `~`, `~/PATH` or a `PATH` relative to the home, never above it (the
/// controller checks the spec too). The file is then looked at as the user sees it
/// ([`crate::as_user`]): the install's links may be followed (a venv's `python`, an npm bin),
/// but only as far as the user could go, so a planted link to root's files learns nothing and a
/// FIFO stalls nothing.
pub(super) fn check_path(user: &User, path: &str) -> anyhow::Result<std::path::PathBuf> {
    let relative = Path::new(path.strip_prefix("~/").unwrap_or(if path == "~" { "" } else { path }));
    let plain = relative.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain || path.contains('\0') {
        bail!("the check path {path:?} is not inside the home (expected `~`, `~/PATH` or a relative PATH)");
    }
    Ok(user.home.join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compiled_candidate_installed_through_node_is_refused_with_the_reference_message() {
        use InstallationFormat::{Compiled, Script};
        let installed = |format: Option<Result<InstallationFormat, String>>, compiled_artifacts| Installed {
            format,
            compiled_artifacts,
        };
        let err = installed(Some(Ok(Script)), true).expect(Compiled).unwrap_err();
        assert_eq!(err.to_string(), "Expected the compiled installation, but the installer selected Node");
        assert_eq!(installed(Some(Ok(Compiled)), true).expect(Compiled).unwrap(), None);
        // A side that built no compiled artifact may install either way.
        assert!(installed(Some(Ok(Script)), false).expect(Compiled).unwrap().is_some());
        let err = installed(Some(Err("cannot read ~/.local/bin/demo".into())), true).expect(Compiled).unwrap_err();
        assert!(err.to_string().contains("cannot tell the installation format"), "{err}");
        assert_eq!(installed(Some(Ok(Compiled)), true).facts()[fact::INSTALLATION_FORMAT], "compiled");
        assert_eq!(installed(Some(Err("gone".into())), true).facts()[fact::INSTALLATION_FORMAT], "unknown");
        assert!(installed(None, true).facts().is_empty(), "no entry point, no format");
    }
}
