//! What prepare releases and install verifies beyond the commands: the optional steps of the
//! revisions that have the files they need (`[[prepare.optional]]`, the reference's compiled
//! build), the path the origin serves the release under, the runtime facts the spec names, and
//! the entry point whose format install records (and `expect_format` checks).

use std::collections::BTreeMap;

use sandbench_proto::plan::{Check, Install, OptionalStep, Prepare, Step};
use toml::Spanned;

use super::bounds;
use super::raw::{RawInstall, RawOptional};
use super::validator::{Validator, step};

/// Seconds the inventory command may take.
const INVENTORY_TIMEOUT_S: f64 = 120.0;
/// Facts the agent and the controller record themselves: a spec's `versions` may not name them.
const RECORDED_FACTS: [&str; 11] = [
    "kernel",
    "cpu",
    "cpus",
    "memory_bytes",
    "os",
    "agent",
    sandbench_proto::plan::fact::MACHINE,
    sandbench_proto::plan::fact::ARTIFACT_FORMAT,
    sandbench_proto::plan::fact::OPTIONAL_STEPS,
    sandbench_proto::plan::fact::INSTALLATION_FORMAT,
    sandbench_proto::plan::fact::DEPENDENCY_INVENTORY,
];

impl Validator<'_> {
    /// `[[prepare.optional]]`: each with a name of its own, the files it needs, its commands.
    /// `has_source`: the files are looked for in the source, so there must be one.
    pub(super) fn optional_steps(
        &mut self,
        raw: &[Spanned<RawOptional>],
        timeout_s: f64,
        has_source: bool,
    ) -> Vec<OptionalStep> {
        let mut names = Vec::new();
        let mut steps = Vec::new();
        for (i, spanned) in raw.iter().enumerate() {
            let o = spanned.get_ref();
            let field = format!("prepare.optional[{i}]");
            let name = o.name.get_ref().clone();
            if let Err(why) = bounds::file_name(&name) {
                self.error(&o.name, &format!("{field}.name"), why);
            }
            if names.contains(&name) {
                self.error(&o.name, &format!("{field}.name"), format!("another optional step is named {name:?}"));
            }
            names.push(name.clone());
            if !has_source {
                self.error(
                    spanned,
                    &field,
                    "an optional step looks for files in the source, but the spec has no [source]",
                );
            }
            let when = o.when.get_ref().paths();
            if when.is_empty() {
                self.error(
                    &o.when,
                    &format!("{field}.when"),
                    "expected the files the step needs, e.g. \"scripts/build.js\"",
                );
            }
            for path in &when {
                if let Err(why) = bounds::relative_path(path) {
                    self.error(
                        &o.when,
                        &format!("{field}.when"),
                        format!("expected a file inside the source folder: {why}"),
                    );
                }
            }
            if o.commands.is_empty() {
                self.error(spanned, &format!("{field}.commands"), "expected the commands the step runs");
            }
            for (n, a) in o.artifacts.iter().enumerate() {
                if let Err(why) = bounds::relative_path(a.get_ref()) {
                    self.error(
                        a,
                        &format!("{field}.artifacts[{n}]"),
                        format!("expected a path inside the source folder: {why}"),
                    );
                }
            }
            if o.compiled && o.artifacts.is_empty() {
                self.error(
                    spanned,
                    &format!("{field}.compiled"),
                    "a compiled installation needs the artifacts it is made of",
                );
            }
            let timeout_s = self.number(&o.timeout_s, &format!("{field}.timeout_s"), 0.0, 86_400.0, timeout_s);
            let incomplete = o.incomplete.as_ref().map(|m| m.get_ref().trim().to_string());
            if let Some(message) = o.incomplete.as_ref().filter(|m| m.get_ref().trim().is_empty()) {
                self.error(message, &format!("{field}.incomplete"), "expected the error to fail with");
            }
            steps.push(OptionalStep {
                incomplete: incomplete
                    .unwrap_or_else(|| format!("the optional step {name:?} needs all of {}", when.join(", "))),
                name,
                when,
                commands: o.commands.iter().map(|c| step(c.get_ref(), timeout_s)).collect(),
                artifacts: o.artifacts.iter().map(|a| a.get_ref().clone()).collect(),
                artifact_format: self.format_name(&o.artifact_format, &format!("{field}.artifact_format")),
                compiled: o.compiled,
                versions: self.versions(&o.versions, &format!("{field}.versions")),
            });
        }
        steps
    }

    /// A format's name (`npm-tarballs`): the artifact_format fact joins them with `+`.
    pub(super) fn format_name(&mut self, raw: &Option<Spanned<String>>, field: &str) -> Option<String> {
        let name = raw.as_ref()?;
        let text = name.get_ref();
        let plain = text.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if text.is_empty() || text.len() > 64 || !plain {
            self.error(
                name,
                field,
                format!("expected a name of 1 to 64 letters, digits, '.', '_' or '-', got {text:?}"),
            );
        }
        Some(text.clone())
    }

    /// `versions`: fact name → the command that prints it.
    pub(super) fn versions(
        &mut self,
        raw: &BTreeMap<String, Spanned<String>>,
        table: &str,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (name, run) in raw {
            let field = format!("{table}.{name}");
            if bounds::file_name(name).is_err() || RECORDED_FACTS.contains(&name.as_str()) {
                self.error(
                    run,
                    &field,
                    format!("expected a fact name of letters, digits, '.', '_' or '-', not one sandbench records ({}), got {name:?}", RECORDED_FACTS.join(", ")),
                );
            }
            if run.get_ref().trim().is_empty() {
                self.error(run, &field, "expected the command that prints it, e.g. \"bun --version\"");
            }
            out.insert(name.clone(), run.get_ref().clone());
        }
        out
    }

    /// `origin_path`: a folder path the origin serves the release under; it needs the origin.
    pub(super) fn origin_path(&mut self, raw: &Option<Spanned<String>>, has_origin: bool) -> String {
        let Some(path) = raw else { return String::new() };
        let text = path.get_ref().trim_matches('/');
        if let Err(why) = bounds::relative_path(text) {
            self.error(path, "prepare.origin_path", format!("expected a path such as \"releases/v1.0.0\": {why}"));
        }
        if !has_origin {
            self.error(
                path,
                "prepare.origin_path",
                "the origin serves the release under it: it needs prepare.origin_port",
            );
        }
        text.to_string()
    }

    /// `install.entry_point` and `install.inventory`.
    pub(super) fn entry_and_inventory(&mut self, i: &RawInstall) -> (Option<String>, Option<Step>) {
        let entry_point = i.entry_point.as_ref().map(|path| {
            if let Err(why) = bounds::cwd(path.get_ref()) {
                self.error(
                    path,
                    "install.entry_point",
                    format!("expected the installed program inside the home: {why}"),
                );
            }
            path.get_ref().clone()
        });
        let inventory = i.inventory.as_ref().map(|run| {
            if run.get_ref().trim().is_empty() {
                self.error(run, "install.inventory", "expected a command, e.g. \"npm ls --global --all --json\"");
            }
            step(run.get_ref(), INVENTORY_TIMEOUT_S)
        });
        (entry_point, inventory)
    }

    /// An `expect_format` check needs the entry point it looks at, and a compiled optional step
    /// that makes it apply.
    pub(super) fn formats(&mut self, prepare: &Prepare, install: &Install) {
        if !install.checks.iter().any(|c| matches!(c, Check::ExpectFormat { .. })) {
            return;
        }
        let line = self.line_of("expect_format");
        if install.entry_point.is_none() {
            self.error_at(
                line,
                "install.checks",
                "an expect_format check looks at install.entry_point, which is not set",
            );
        }
        if !prepare.optional.iter().any(|o| o.compiled) {
            self.error_at(
                line,
                "install.checks",
                "an expect_format check applies to a side that built a compiled artifact: no [[prepare.optional]] has compiled = true",
            );
        }
    }
}
