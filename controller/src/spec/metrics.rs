//! The metrics a plan judges: the reference harness's metrics are built in (`metric_defs`), so a
//! spec only defines what it adds or changes; its `[metrics]` section is validated here, and the
//! lens's and a distribution's keys get their definitions.

use std::collections::{BTreeMap, BTreeSet};

use sandbench_proto::Phase;
use sandbench_proto::metric::{Facet, MetricKey};
use toml::Spanned;

use super::Plan;
use super::metrics_families::{self, Block, Definitions};
use super::raw::RawMetric;
use super::validator::Validator;
use crate::stats::Better;

pub use super::metric_defs::{MetricDef, SECTIONS, built_in, report_order};

/// The floor of a lens metric when no A/A calibration says otherwise: counts are deterministic,
/// so a change of 0.5 % is real.
pub const LENS_RELATIVE: f64 = 0.005;

/// The definition of a lens metric (`<stem>.instructions`, `<stem>.cycles`): millions of counts,
/// titled and grouped as its step.
fn lens_def(plan: &Plan, stem: &str, facet: Facet, defs: &[MetricDef]) -> MetricDef {
    let step = match stem.strip_prefix("script.") {
        Some(name) => {
            let first = Phase::ALL
                .into_iter()
                .filter_map(|p| plan.section(p))
                .flat_map(|s| &s.scripts)
                .find(|s| s.name == name)
                .and_then(|s| s.metrics.first().cloned());
            let group = first.and_then(|m| defs.iter().find(|d| d.key == m).map(|d| d.group.clone()));
            (format!("Script {name}"), group.unwrap_or_else(|| "Product script".into()))
        }
        None => match stem.strip_prefix(sandbench_proto::plan::BenchStep::PREFIX) {
            // A bench step's suite, whole: in its benchmarks' group.
            Some(name) => (format!("Bench suite {name}, whole"), format!("Benchmarks ({name})")),
            None => defs
                .iter()
                .find(|d| d.key == stem)
                .map(|d| (d.title.clone(), d.group.clone()))
                .unwrap_or_else(|| (stem.to_string(), "CLI".into())),
        },
    };
    let what = if facet == Facet::Cycles { "cycles" } else { "instructions" };
    MetricDef {
        key: MetricKey::new(stem, facet).to_string(),
        title: format!("{} ({what})", step.0),
        unit: format!("M {what}"),
        scale: 1e-6,
        absolute: 0.0,
        relative: LENS_RELATIVE,
        group: step.1,
        better: Better::Lower,
    }
}

impl Validator<'_> {
    /// Definitions for every metric the plan records (a distribution's facets in place of its
    /// stem, and the peak RSS of every script), and the spec's blocks for the keys only a run
    /// names. A key nothing defines is an error naming it.
    pub(super) fn metric_definitions(
        &mut self,
        plan: &Plan,
        raw: &BTreeMap<String, Spanned<RawMetric>>,
    ) -> (Vec<MetricDef>, Definitions) {
        let mut produced: Vec<String> = Vec::new();
        for phase in Phase::ALL {
            for m in plan.metrics_of_phase(phase).into_iter().chain(plan.peak_rss_keys(phase)) {
                if produced.contains(&m) {
                    let line = self.line_of(&format!("\"{m}\""));
                    self.error_at(line, &format!("metrics.{m}"), "two steps record this metric; give each its own key");
                } else {
                    produced.push(m);
                }
            }
        }
        let definitions = self.blocks(raw);
        let mut defs: Vec<MetricDef> = Vec::new();
        let mut used: BTreeSet<String> = BTreeSet::new();
        for key in &produced {
            if definitions.ignored(key).is_some() {
                // Recorded, never judged: no definition, so no row.
                used.insert(key.clone());
                continue;
            }
            let Some(def) = self.define(plan, &definitions, key, &defs) else { continue };
            used.insert(key.clone());
            match distribution_of(plan, key) {
                None => defs.push(def),
                Some(facets) => {
                    // The stem is no judged row: its facets are, each defined from it.
                    let stem = [def];
                    for facet in facets {
                        let facet_key = MetricKey::new(key.as_str(), facet).to_string();
                        if definitions.ignored(&facet_key).is_some() {
                            used.insert(facet_key);
                            continue;
                        }
                        match definitions.resolve(&facet_key, &stem) {
                            Ok(Some(d)) => defs.push(self.reconcile_unit(d, plan.observed_unit(key), &definitions)),
                            Ok(None) => {}
                            Err(why) => self.block_error(&definitions, &facet_key, why),
                        }
                        used.insert(facet_key);
                    }
                }
            }
        }
        // A bench step's benchmarks are named by its run only: an exact block may wait for one.
        let of_bench = |key: &str| plan.bench_step_of(key).is_some();
        for block in
            definitions.blocks.iter().filter(|b| !b.is_pattern() && !used.contains(&b.key) && !of_bench(&b.key))
        {
            self.error_at(block.line, &format!("metrics.{}", block.key), "defined, but no phase records it");
        }
        (report_order(defs), definitions)
    }

    /// The definition of one recorded key, its unit reconciled with what the agent records.
    fn define(&mut self, plan: &Plan, definitions: &Definitions, key: &str, defs: &[MetricDef]) -> Option<MetricDef> {
        let (stem, facet) = MetricKey::split(key);
        if facet.is_lens() && definitions.block_of(key).is_none() {
            return Some(lens_def(plan, stem, facet, defs));
        }
        match definitions.resolve(key, defs) {
            Ok(Some(mut def)) => {
                // A script's peak RSS sits in its script's group, as its lens counts do.
                if def.group == metrics_families::PEAK_RSS_GROUP && facet == Facet::MaxRss {
                    def.group = lens_def(plan, stem, Facet::Instructions, defs).group;
                }
                Some(self.reconcile_unit(def, plan.observed_unit(key), definitions))
            }
            Ok(None) => {
                let line = self.line_of(&format!("\"{key}\""));
                self.error_at(line, &format!("metrics.{key}"), "this metric is recorded but not defined: add [metrics.KEY] with title, unit, scale, absolute and relative");
                None
            }
            Err(why) => {
                self.block_error(definitions, key, why);
                None
            }
        }
    }

    fn block_error(&mut self, definitions: &Definitions, key: &str, why: String) {
        let line = definitions.block_of(key).map_or_else(|| self.line_of(&format!("\"{key}\"")), |(b, _)| b.line);
        let field = definitions.block_of(key).map_or_else(|| key.to_string(), |(b, _)| b.key.clone());
        self.error_at(line, &format!("metrics.{field}"), why);
    }

    /// The spec's `[metrics]` blocks, their fields checked; a malformed pattern, a placeholder
    /// beyond its `*`, or two patterns that can match one key with as many `*` are errors.
    fn blocks(&mut self, raw: &BTreeMap<String, Spanned<RawMetric>>) -> Definitions {
        let mut blocks: Vec<Block> = Vec::new();
        for (key, r) in raw {
            let field = format!("metrics.{key}");
            if key.contains('*')
                && let Some(why) = metrics_families::pattern_error(key)
            {
                self.error(r, &field, why);
                continue;
            }
            let m = r.get_ref();
            let block = Block {
                key: key.clone(),
                line: self.line(r.span().start),
                unit_line: m.unit.as_ref().map(|u| self.line(u.span().start)),
                scale_line: m.scale.as_ref().map(|u| self.line(u.span().start)),
                title: m.title.clone(),
                unit: m.unit.as_ref().map(|u| u.get_ref().clone()),
                scale: m.scale.as_ref().map(|_| self.number(&m.scale, &format!("{field}.scale"), 0.0, 1e12, 1.0)),
                absolute: m
                    .absolute
                    .as_ref()
                    .map(|_| self.non_negative(&m.absolute, &format!("{field}.absolute"), 1e15, 0.0)),
                relative: m
                    .relative
                    .as_ref()
                    .map(|_| self.non_negative(&m.relative, &format!("{field}.relative"), 10.0, 0.2)),
                group: m.group.clone(),
                better: m.better.as_ref().map(|b| self.better(b, &field)),
                ignore: m.ignore.as_ref().is_some_and(|i| *i.get_ref()),
                gate: m.gate.as_ref().map(|g| *g.get_ref()),
            };
            if let (true, Some(gate)) = (block.ignore, m.gate.as_ref().filter(|g| *g.get_ref())) {
                self.error(gate, &format!("{field}.gate"), "an ignored metric is never judged, so it cannot gate");
            }
            if block.highest_placeholder() > block.stars() {
                let why = format!("uses {{{}}} but the key has {} `*`", block.highest_placeholder(), block.stars());
                self.error(r, &field, why);
            }
            blocks.push(block);
        }
        // In the order written, so the error is at the later of two clashing patterns.
        blocks.sort_by_key(|b| b.line);
        for (i, later) in blocks.iter().enumerate() {
            let clash = blocks[..i].iter().find(|b| b.is_pattern() && b.stars() == later.stars() && b.overlaps(later));
            if let Some(earlier) = clash {
                self.error_at(
                    later.line,
                    &format!("metrics.{}", later.key),
                    format!(
                        "this family and \"{}\" (line {}) can both define the same key with as many `*`: make one more specific",
                        earlier.key, earlier.line
                    ),
                );
            }
        }
        Definitions { blocks }
    }

    /// `better = "lower" | "higher"`; anything else is an error on the field (and lower).
    fn better(&mut self, given: &Spanned<String>, field: &str) -> Better {
        match given.get_ref().as_str() {
            "lower" => Better::Lower,
            "higher" => Better::Higher,
            other => {
                self.error(
                    given,
                    &format!("{field}.better"),
                    format!("expected \"lower\" or \"higher\", found {other:?}"),
                );
                Better::Lower
            }
        }
    }

    /// The scale that turns what the agent records (`observed`: seconds, bytes) into the
    /// metric's unit; an error on the unit when there is none, on `scale` when the spec's
    /// contradicts it. A script's metric (`observed` None) keeps the spec's scale.
    fn reconcile_unit(&mut self, mut def: MetricDef, observed: Option<&str>, definitions: &Definitions) -> MetricDef {
        let Some(observed) = observed else { return def };
        let field = format!("metrics.{}", def.key);
        let block = definitions.block_of(&def.key).map(|(b, _)| b);
        match super::units::factor(observed, &def.unit) {
            Err(why) => {
                let at = block.and_then(|b| b.unit_line.or(Some(b.line)));
                let line = at.unwrap_or_else(|| self.line_of(&format!("\"{}\"", def.key)));
                self.error_at(line, &format!("{field}.unit"), why);
            }
            Ok(factor) => match block.and_then(|b| b.scale.zip(b.scale_line)) {
                Some((scale, line)) if (scale - factor).abs() > 1e-9 * factor => self.error_at(
                    line,
                    &format!("{field}.scale"),
                    format!(
                        "scale {scale} does not turn {observed} into {}: that takes {factor}; leave `scale` out, the unit sets it",
                        def.unit
                    ),
                ),
                _ => def.scale = factor,
            },
        }
        def
    }
}

/// The facets a distribution's stem is judged by, when `key` is one (the plan's
/// `distributions`, by its exact key or a family's pattern).
pub fn distribution_of(plan: &Plan, key: &str) -> Option<Vec<Facet>> {
    let all = &plan.agent.distributions;
    let found = all.get(key).or_else(|| {
        let families = all.keys().filter(|k| k.contains('*')).map(|k| Block::pattern(k));
        families.filter(|b| b.captures(key).is_some()).min_by_key(Block::stars).and_then(|b| all.get(&b.key))
    })?;
    Some(found.facets()).filter(|f| !f.is_empty())
}

impl Plan {
    /// The judged peak RSS keys of `phase`: each script's child tree (`script.<name>.maxrss`),
    /// recorded beside it by the agent.
    pub fn peak_rss_keys(&self, phase: Phase) -> Vec<String> {
        let Some(section) = self.section(phase) else { return Vec::new() };
        section
            .scripts
            .iter()
            .map(|s| MetricKey::new(format!("script.{}", s.name), Facet::MaxRss).to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reference_definitions_are_built_in() {
        let cold = super::built_in("cold").unwrap();
        assert_eq!((cold.scale, cold.unit.as_str(), cold.absolute, cold.relative), (1000.0, "ms", 0.1, 0.2));
        assert_eq!(super::built_in("bundle").unwrap().absolute, 65_536.0);
        assert!(super::built_in("pss").is_none());
        let roster = super::built_in("agents_roster_cpu").unwrap();
        assert_eq!(
            (roster.scale, roster.unit.as_str(), roster.absolute, roster.group.as_str()),
            (1.0, "s", 0.05, "UI interactions")
        );
        let fetch = super::built_in("switch_fetch").unwrap();
        assert_eq!((fetch.unit.as_str(), fetch.absolute, fetch.relative), ("transfers", 0.5, 0.0));
        assert_eq!(super::built_in("ui_rss").unwrap().absolute, 10_485_760.0);
    }

    #[test]
    fn metrics_come_in_the_reference_order_with_the_specs_own_after() {
        let def = |key: &str, group: &str| super::MetricDef {
            key: key.into(),
            title: key.into(),
            unit: "ms".into(),
            scale: 1.0,
            absolute: 0.0,
            relative: 0.2,
            group: group.into(),
            better: crate::stats::Better::Lower,
        };
        let produced: Vec<super::MetricDef> = ["bundle", "install", "cold", "warm", "rss", "disk", "kernel_exec"]
            .iter()
            .map(|k| super::built_in(k).unwrap())
            .chain([def("parse_ms", "Product script"), def("list_open", "UI interactions")])
            .chain(
                ["ui_rss", "scheduled_catalog", "subagent_open", "parent_open", "frame_decode", "switch_fetch"]
                    .iter()
                    .map(|k| super::built_in(k).unwrap()),
            )
            .chain([def("list_close", "UI interactions")])
            .collect();
        let keys: Vec<String> = super::report_order(produced).into_iter().map(|d| d.key).collect();
        assert_eq!(
            keys,
            [
                "cold",
                "warm",
                "install",
                "bundle",
                "disk",
                "rss",
                "kernel_exec",
                "switch_fetch",
                "frame_decode",
                "list_open",
                "subagent_open",
                "parent_open",
                "list_close",
                "scheduled_catalog",
                "ui_rss",
                "parse_ms"
            ]
        );
    }
}
