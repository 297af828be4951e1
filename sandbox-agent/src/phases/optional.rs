//! prepare's optional steps (`[[prepare.optional]]`): a step runs on a revision whose source has
//! every file of its `when`, is skipped on one that has none of them, and fails the side's
//! prepare with the spec's `incomplete` message on one that has only some (the reference's
//! "Compiled release build scripts are incomplete"). Also the runtime facts prepare records: the
//! machine, the artifacts' format, the optional steps that ran and the versions the spec names.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;
use sandbench_proto::plan::{AgentPlan, OptionalStep, Prepare, fact};

use super::common;
use crate::context::PhaseContext;
use crate::users::User;

/// Whether a revision has what an optional step needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Readiness {
    /// Every file is there: the step runs.
    Ready,
    /// None is: the step is skipped.
    Absent,
    /// Some are: the side's prepare fails.
    Incomplete { missing: Vec<String> },
}

/// Whether `step` runs, from which of its files `exists` finds.
pub fn readiness(step: &OptionalStep, exists: impl Fn(&str) -> anyhow::Result<bool>) -> anyhow::Result<Readiness> {
    let mut missing = Vec::new();
    for path in &step.when {
        if !exists(path)? {
            missing.push(path.clone());
        }
    }
    Ok(match missing.len() {
        0 => Readiness::Ready,
        n if n == step.when.len() => Readiness::Absent,
        _ => Readiness::Incomplete { missing },
    })
}

/// The optional steps this revision runs, decided for all of them before any runs (an incomplete
/// one fails the side before a long build): looked for as the builder sees the source.
pub fn decide<'a>(
    ctx: &PhaseContext,
    plan: &'a AgentPlan,
    builder: &User,
    source: &Path,
) -> anyhow::Result<Vec<&'a OptionalStep>> {
    let mut ready = Vec::new();
    for step in &plan.prepare.optional {
        let exists = |path: &str| Ok(crate::as_user::exists(&source.join(path), builder.uid, builder.gid)?);
        match readiness(step, exists)? {
            Readiness::Ready => ready.push(step),
            Readiness::Absent => ctx.note(&format!(
                "optional step {}: skipped, the source has none of {}",
                step.name,
                step.when.join(", ")
            )),
            Readiness::Incomplete { missing } => bail!("{} (missing: {})", step.incomplete, missing.join(", ")),
        }
    }
    Ok(ready)
}

/// Runs the steps decided, as the builder in the source folder.
pub fn run(
    ctx: &PhaseContext,
    steps: &[&OptionalStep],
    builder: &User,
    source: &Path,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    for step in steps {
        ctx.note(&format!("optional step {}: the source has {}", step.name, step.when.join(", ")));
        for command in &step.commands {
            ctx.note(&format!("$ {}", command.run));
            common::run_step(ctx, command, builder, source, env)?.success(&format!("`{}`", command.run))?;
        }
    }
    Ok(())
}

/// The facts prepare adds to the tool versions: the machine, the artifacts' format (the
/// prepare's own joined with each step's by `+`), the optional steps that ran (comma-separated,
/// empty for none), and the versions the spec names for the prepare and for the steps that ran.
pub fn facts(
    prepare: &Prepare,
    ran: &[&OptionalStep],
    versions: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut facts = BTreeMap::new();
    facts.insert(fact::MACHINE.to_string(), machine());
    let formats: Vec<&str> = prepare
        .artifact_format
        .iter()
        .chain(ran.iter().filter_map(|s| s.artifact_format.as_ref()))
        .map(String::as_str)
        .collect();
    if !formats.is_empty() {
        facts.insert(fact::ARTIFACT_FORMAT.to_string(), formats.join("+"));
    }
    if !prepare.optional.is_empty() {
        let names: Vec<&str> = ran.iter().map(|s| s.name.as_str()).collect();
        facts.insert(fact::OPTIONAL_STEPS.to_string(), names.join(","));
    }
    let named = prepare.versions.iter().chain(ran.iter().flat_map(|s| s.versions.iter()));
    for (name, run) in named {
        facts.insert(name.clone(), versions(run).unwrap_or_else(|| "unavailable".to_string()));
    }
    facts
}

/// `uname -m`: the machine the kernel runs on.
fn machine() -> String {
    rustix::system::uname().machine().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, when: &[&str], format: Option<&str>) -> OptionalStep {
        OptionalStep {
            name: name.into(),
            when: when.iter().map(|s| s.to_string()).collect(),
            incomplete: "Compiled release build scripts are incomplete".into(),
            commands: Vec::new(),
            artifacts: vec!["release/*.tar.gz".into()],
            artifact_format: format.map(str::to_string),
            compiled: true,
            versions: [("bun".to_string(), "bun --version".to_string())].into(),
        }
    }

    #[test]
    fn a_step_runs_with_all_its_files_is_skipped_with_none_and_refused_with_some() {
        let s = step("compiled", &["scripts/build-binary.js", "scripts/assemble.js"], None);
        let has = |present: &'static [&'static str]| move |p: &str| Ok(present.contains(&p));
        assert_eq!(readiness(&s, has(&["scripts/build-binary.js", "scripts/assemble.js"])).unwrap(), Readiness::Ready);
        assert_eq!(readiness(&s, has(&[])).unwrap(), Readiness::Absent);
        assert_eq!(
            readiness(&s, has(&["scripts/build-binary.js"])).unwrap(),
            Readiness::Incomplete { missing: vec!["scripts/assemble.js".into()] }
        );
        assert!(readiness(&s, |_| anyhow::bail!("unreadable")).is_err(), "a failed look is no answer");
    }

    #[test]
    fn facts_join_the_formats_and_name_the_steps_that_ran() {
        let prepare = Prepare {
            commands: Vec::new(),
            artifacts: vec!["release/*.tgz".into()],
            release_dir: None,
            origin_port: None,
            origin_path: String::new(),
            artifact_format: Some("npm-tarballs".into()),
            versions: BTreeMap::new(),
            optional: vec![step("compiled", &["a"], Some("linux-x64-native"))],
        };
        let version = |run: &str| (run == "bun --version").then(|| "1.4.0".to_string());
        let skipped = facts(&prepare, &[], version);
        assert_eq!(skipped[fact::ARTIFACT_FORMAT], "npm-tarballs");
        assert_eq!(skipped[fact::OPTIONAL_STEPS], "");
        assert!(!skipped.contains_key("bun"), "a step that did not run names no version");
        let ran = facts(&prepare, &[&prepare.optional[0]], version);
        assert_eq!(ran[fact::ARTIFACT_FORMAT], "npm-tarballs+linux-x64-native");
        assert_eq!(ran[fact::OPTIONAL_STEPS], "compiled");
        assert_eq!(ran["bun"], "1.4.0");
        assert_eq!(ran[fact::MACHINE], std::env::consts::ARCH);
    }
}
