//! The validator's tools: where a spec's errors are collected, with their file, line and field,
//! and the checks of single values every section uses. The sections' checks are `impl`s of
//! [`Validator`] in their own files (`validate`, `phases`, `runtime`, `metrics`, …), which all
//! build on this one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sandbench_proto::metric::{Facet, MetricKey};
use sandbench_proto::plan::Step;
use toml::Spanned;

use super::SpecError;

pub(super) struct Validator<'a> {
    pub(super) file: PathBuf,
    pub(super) text: &'a str,
    pub(super) errors: Vec<SpecError>,
}

impl Validator<'_> {
    pub(super) fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].matches('\n').count() + 1
    }

    pub(super) fn error<T>(&mut self, at: &Spanned<T>, field: &str, message: impl Into<String>) {
        self.errors.push(SpecError {
            file: self.file.clone(),
            line: self.line(at.span().start),
            field: field.into(),
            message: message.into(),
        });
    }

    pub(super) fn error_at(&mut self, line: usize, field: &str, message: impl Into<String>) {
        self.errors.push(SpecError { file: self.file.clone(), line, field: field.into(), message: message.into() });
    }

    /// A number in (lo, hi], or the default.
    pub(super) fn number(&mut self, value: &Option<Spanned<f64>>, field: &str, lo: f64, hi: f64, default: f64) -> f64 {
        match value {
            None => default,
            Some(v) if v.get_ref().is_finite() && *v.get_ref() > lo && *v.get_ref() <= hi => *v.get_ref(),
            Some(v) => {
                self.error(
                    v,
                    field,
                    format!("expected a number greater than {lo} and at most {hi}, got {}", v.get_ref()),
                );
                default
            }
        }
    }

    /// A number in [0, hi], or the default.
    pub(super) fn non_negative(&mut self, value: &Option<Spanned<f64>>, field: &str, hi: f64, default: f64) -> f64 {
        match value {
            Some(v) if !(v.get_ref().is_finite() && *v.get_ref() >= 0.0 && *v.get_ref() <= hi) => {
                self.error(v, field, format!("expected a number from 0 to {hi}, got {}", v.get_ref()));
                default
            }
            Some(v) => *v.get_ref(),
            None => default,
        }
    }

    /// The line where `needle` first appears (to place errors about things without a span).
    pub(super) fn line_of(&self, needle: &str) -> usize {
        self.text.find(needle).map(|at| self.line(at)).unwrap_or(1)
    }

    pub(super) fn count(&mut self, value: &Option<Spanned<i64>>, field: &str, lo: i64, hi: i64, default: i64) -> i64 {
        match value {
            None => default,
            Some(v) if (lo..=hi).contains(v.get_ref()) => *v.get_ref(),
            Some(v) => {
                self.error(v, field, format!("expected a whole number from {lo} to {hi}, got {}", v.get_ref()));
                default
            }
        }
    }

    pub(super) fn metric_key(&mut self, key: &Spanned<String>, field: &str) -> String {
        let k = key.get_ref();
        // Dot-separated segments (a matrix's `store.sqlite.ops`), none of them empty, the last
        // no facet's name (`x.cpu` is the CPU time of `x`).
        let segment =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if k.is_empty() || !k.split('.').all(segment) {
            self.error(key, field, format!("expected a metric key of lowercase letters, digits and '_', got {k:?}"));
        } else if MetricKey::facet_of(k) != Facet::Wall {
            self.error(
                key,
                field,
                format!(
                    "{k:?} ends as a facet of {:?} does (`.cpu`, `.maxrss`, `.p95`, `.max`, …): name it otherwise",
                    MetricKey::stem_of(k)
                ),
            );
        }
        k.clone()
    }
}

pub(super) fn step(run: &str, timeout_s: f64) -> Step {
    Step { run: run.to_string(), cwd: None, timeout_s, env: BTreeMap::new() }
}

pub(super) fn json(table: &toml::Table) -> serde_json::Value {
    serde_json::to_value(table).unwrap_or(serde_json::Value::Null)
}

pub(super) fn json_map(table: Option<&toml::Table>) -> serde_json::Map<String, serde_json::Value> {
    match table.map(json) {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}
