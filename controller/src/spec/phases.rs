//! The sections of the phases before the runtime: `[prepare]`, `[install]` (with its checks
//! and fixture) and `[measure]`.

use std::collections::BTreeMap;

use sandbench_proto::plan::{Check, Fixture, Install, InstallationFormat, Measure, Prepare, Startup, Step};
use toml::Spanned;

use super::SourceSettings;
use super::bounds;
use super::raw::*;
use super::validator::{Validator, step};

impl Validator<'_> {
    /// `source`: artifacts are collected from it, so there must be one.
    pub(super) fn prepare(&mut self, p: &RawPrepare, source: &SourceSettings) -> Prepare {
        let prepare_timeout = self.number(&p.timeout_s, "prepare.timeout_s", 0.0, 86_400.0, 1800.0);
        let origin_port = p.origin_port.as_ref().map(|port| {
            if !(1..=65_535).contains(port.get_ref()) {
                self.error(
                    port,
                    "prepare.origin_port",
                    format!("expected a TCP port from 1 to 65535, got {}", port.get_ref()),
                );
            }
            *port.get_ref() as u16
        });
        for (i, a) in p.artifacts.iter().enumerate() {
            if let Err(why) = bounds::relative_path(a.get_ref()) {
                self.error(
                    a,
                    &format!("prepare.artifacts[{i}]"),
                    format!("expected a path inside the source folder: {why}"),
                );
            }
        }
        let release_dir = p.release_dir.as_ref().map(|d| {
            if let Err(why) = bounds::relative_path(d.get_ref()) {
                self.error(d, "prepare.release_dir", format!("expected a folder inside the source folder: {why}"));
            }
            d.get_ref().clone()
        });
        if !p.artifacts.is_empty() && matches!(source, SourceSettings::None) {
            self.error(
                &p.artifacts[0],
                "prepare.artifacts",
                "artifacts are collected from the source, but the spec has no [source]",
            );
        }
        let has_source = !matches!(source, SourceSettings::None);
        if p.artifacts.is_empty()
            && let Some(o) = p.optional.iter().find(|o| !o.get_ref().artifacts.is_empty())
        {
            self.error(
                &o.get_ref().artifacts[0],
                "prepare.optional.artifacts",
                "an optional step's artifacts are released beside prepare.artifacts, which has none",
            );
        }
        Prepare {
            commands: p.commands.iter().map(|c| step(c.get_ref(), prepare_timeout)).collect(),
            artifacts: p.artifacts.iter().map(|a| a.get_ref().clone()).collect(),
            release_dir,
            origin_port,
            origin_path: self.origin_path(&p.origin_path, origin_port.is_some()),
            artifact_format: self.format_name(&p.artifact_format, "prepare.artifact_format"),
            versions: self.versions(&p.versions, "prepare.versions"),
            optional: self.optional_steps(&p.optional, prepare_timeout, has_source),
        }
    }

    pub(super) fn install(&mut self, raw: &Spanned<RawInstall>) -> Install {
        let i = raw.get_ref();
        let install_timeout = self.number(&i.timeout_s, "install.timeout_s", 0.0, 86_400.0, 240.0);
        if i.command.get_ref().trim().is_empty() {
            self.error(&i.command, "install.command", "expected the command that installs the product");
        }
        let checks = self.checks(&i.checks);
        self.environment(&i.env, "install.env", self.line(raw.span().start));
        let footprint_excludes = i.footprint_excludes.clone().unwrap_or_else(|| {
            [".cache", ".npm", "*.log", "sessions", "session-artifacts", "workspace"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        });
        let fixture = i.fixture.as_ref().map(|f| self.install_fixture(f, self.line(raw.span().start)));
        let (entry_point, inventory) = self.entry_and_inventory(i);
        Install {
            command: Step {
                run: i.command.get_ref().clone(),
                cwd: None,
                timeout_s: install_timeout,
                env: i.env.clone(),
            },
            checks,
            fixture,
            footprint_excludes,
            entry_point,
            inventory,
        }
    }

    fn checks(&mut self, raw: &[Spanned<RawCheck>]) -> Vec<Check> {
        let mut checks = Vec::new();
        for (n, c) in raw.iter().enumerate() {
            let field = format!("install.checks[{n}]");
            let raw_check = c.get_ref();
            let kinds = [
                raw_check.output.is_some(),
                raw_check.file_exists.is_some(),
                raw_check.file_starts_with.is_some(),
                raw_check.expect_format.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                self.error(
                    c,
                    &field,
                    "expected exactly one of output (with contains), file_exists, file_starts_with (with prefix), expect_format",
                );
                continue;
            }
            if let Some(format) = &raw_check.expect_format {
                match format.as_str() {
                    "compiled" => checks.push(Check::ExpectFormat { format: InstallationFormat::Compiled }),
                    other => self.error(
                        c,
                        &format!("{field}.expect_format"),
                        format!(
                            "expected \"compiled\" (it applies when the side built a compiled artifact), got {other:?}"
                        ),
                    ),
                }
            } else if let Some(run) = &raw_check.output {
                match &raw_check.contains {
                    Some(contains) => checks.push(Check::Output { run: run.clone(), contains: contains.clone() }),
                    None => self.error(c, &field, "an output check needs `contains`"),
                }
            } else if let Some(path) = &raw_check.file_exists {
                self.check_path(c, &format!("{field}.file_exists"), path);
                checks.push(Check::FileExists { path: path.clone() });
            } else if let Some(path) = &raw_check.file_starts_with {
                self.check_path(c, &format!("{field}.file_starts_with"), path);
                match raw_check.prefix.as_deref().map(unescape) {
                    Some(Ok(prefix)) if !prefix.is_empty() => {
                        checks.push(Check::FileStartsWith { path: path.clone(), prefix })
                    }
                    Some(Err(why)) => self.error(c, &format!("{field}.prefix"), why),
                    _ => self.error(c, &field, "a file_starts_with check needs a non-empty `prefix`"),
                }
            }
        }
        checks
    }

    /// A file check's path: `~`, `~/PATH` or a PATH inside the home (the agent looks at it as
    /// the user, but a path outside the home is no install's to check).
    fn check_path(&mut self, check: &Spanned<RawCheck>, field: &str, path: &str) {
        if let Err(why) = bounds::cwd(path) {
            self.error(check, field, format!("expected a file inside the home: {why}"));
        }
    }

    /// `install_line`: where `[install]` starts (the fixture's paths have no position of their own).
    fn install_fixture(&mut self, f: &RawFixture, install_line: usize) -> Fixture {
        let named = [("install.fixture.dir", &f.dir)].into_iter();
        let files = f.files.keys().map(|k| ("install.fixture.files", k));
        let home_files = f.home_files.keys().map(|k| ("install.fixture.home_files", k));
        for (field, path) in named.chain(files).chain(home_files) {
            if let Err(why) = bounds::relative_path(path) {
                let key = if field.ends_with(".dir") { "dir" } else { path.as_str() };
                let line = self.line_of_key(key).unwrap_or(install_line);
                self.error_at(line, field, format!("expected a path inside the home: {why}"));
            }
        }
        Fixture { dir: f.dir.clone(), files: f.files.clone(), git: f.git, home_files: f.home_files.clone() }
    }

    pub(super) fn measure(&mut self, raw: Option<&RawMeasure>) -> Measure {
        match raw {
            None => Measure { startup: None, between: None, settle_s: 1.0, footprint: false, instructions: false },
            Some(m) => {
                let timeout_s = self.number(&m.timeout_s, "measure.timeout_s", 0.0, 3600.0, 30.0);
                let settle_s = self.non_negative(&m.settle_s, "measure.settle_s", 600.0, 1.0);
                let startup = m.startup.as_ref().and_then(|cmd| {
                    if cmd.get_ref().is_empty() || cmd.get_ref()[0].trim().is_empty() {
                        self.error(cmd, "measure.startup", "expected the command line of the program, e.g. [\"demo\"]");
                        None
                    } else {
                        let cwd = self.bounded_opt(&m.cwd, "measure.cwd", bounds::cwd);
                        Some(Startup { command: cmd.get_ref().clone(), cwd, timeout_s })
                    }
                });
                if let Some(between) = &m.between
                    && startup.is_none()
                {
                    self.error(
                        between,
                        "measure.between",
                        "runs between the cold and warm start, so it needs measure.startup",
                    );
                }
                let between = m.between.as_ref().map(|b| Step {
                    run: b.get_ref().clone(),
                    cwd: None,
                    timeout_s: 120.0,
                    env: BTreeMap::new(),
                });
                if m.instructions && startup.is_none() {
                    let line = self.line_of("instructions");
                    self.error_at(line, "measure.instructions", "counts the cold start, so it needs measure.startup");
                }
                Measure { startup, between, settle_s, footprint: m.footprint, instructions: m.instructions }
            }
        }
    }
}

/// Text with `\xNN` escapes into bytes.
pub(super) fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'x') {
            let hex = text.get(i + 2..i + 4).ok_or("expected two hex digits after \\x")?;
            out.push(
                u8::from_str_radix(hex, 16).map_err(|_| format!("expected two hex digits after \\x, got {hex:?}"))?,
            );
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}
