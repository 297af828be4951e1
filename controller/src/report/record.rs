//! A record's report (`sandbench record`): one revision's values, each metric's median over its
//! trials, as the ledger's history keeps them. Nothing is compared, so there is no verdict, no
//! interval and no head column: `report.md` and `report.html` are this table, and the terminal
//! ends with a line per lens.

use std::fmt::Write;

use super::format::escape;
use super::html::esc;
use super::{Report, runs};

/// One metric of a record.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub key: String,
    pub title: String,
    /// The lens it was measured under (`wall`, `instructions`, …).
    pub lens: &'static str,
    /// Trials with a value.
    pub trials: usize,
    /// The median of the trials' values in the metric's display unit.
    pub median: Option<f64>,
    pub unit: String,
}

/// Every metric the record measured, in the spec's order.
pub fn rows(report: &Report) -> Vec<Row> {
    report
        .metric_defs()
        .iter()
        .filter_map(|def| {
            let values: Vec<f64> =
                runs::trial_values(report.base_side.metrics.get(&def.key)?).into_iter().map(|(_, v)| v).collect();
            Some(Row {
                key: def.key.clone(),
                title: def.title.clone(),
                lens: super::lens::of(def).name(),
                trials: values.len(),
                median: crate::stats::median(&values).map(|m| m * def.scale),
                unit: def.unit.clone(),
            })
        })
        .collect()
}

fn shown(row: &Row) -> String {
    row.median.map_or_else(|| "—".to_string(), |m| format!("{}", significant(m)))
}

/// Rounded to four significant digits, its whole part kept.
fn significant(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let digits = 4 - v.abs().log10().floor() as i32 - 1;
    if digits <= 0 {
        return v.round();
    }
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// `report.md` of a record.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {} at {} — record {}\n\nCommit `{}` measured in one sandbox (run `{}`) and kept in the ledger's history: \
         `sandbench history` draws it with the other recorded commits. Nothing is compared here.\n",
        escape(&report.spec_name),
        escape(&report.base.rev),
        report.status.as_str(),
        escape(&report.base.commit),
        escape(&report.run_id),
    );
    out.push_str("| Metric | Lens | Trials | Median | Unit |\n| --- | --- | ---: | ---: | --- |\n");
    for row in rows(report) {
        let _ = writeln!(
            out,
            "| {} (`{}`) | {} | {} | {} | {} |",
            escape(&row.title),
            escape(&row.key),
            row.lens,
            row.trials,
            shown(&row),
            escape(&row.unit)
        );
    }
    for (heading, lines) in [("Errors", &report.errors), ("Warnings", &report.warnings)] {
        if !lines.is_empty() {
            let _ = writeln!(out, "\n**{heading}:**\n");
            for line in lines {
                let _ = writeln!(out, "- {}", super::format::escape_clipped(line, 500));
            }
        }
    }
    out
}

/// `report.html` of a record.
pub fn html(report: &Report) -> String {
    let mut out = String::new();
    let title = format!("{} at {} — record {}", report.spec_name, report.base.rev, report.status.as_str());
    let _ = writeln!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title></head><body>\n<h1>{}</h1>\n\
         <p>Commit <code>{}</code> measured in one sandbox (run <code>{}</code>) and kept in the ledger's history.</p>",
        esc(&title),
        esc(&title),
        esc(&report.base.commit),
        esc(&report.run_id)
    );
    out.push_str("<table>\n<tr><th>Metric</th><th>Lens</th><th>Trials</th><th>Median</th><th>Unit</th></tr>\n");
    for row in rows(report) {
        let _ = writeln!(
            out,
            "<tr><td>{} (<code>{}</code>)</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&row.title),
            esc(&row.key),
            row.lens,
            row.trials,
            shown(&row),
            esc(&row.unit)
        );
    }
    out.push_str("</table>\n");
    for (heading, lines) in [("Errors", &report.errors), ("Warnings", &report.warnings)] {
        if !lines.is_empty() {
            let _ = writeln!(out, "<h2>{heading}</h2>\n<ul>");
            for line in lines {
                let _ = writeln!(out, "<li>{}</li>", esc(line));
            }
            out.push_str("</ul>\n");
        }
    }
    out.push_str("</body></html>\n");
    out
}

/// The terminal's summary of a record: how many metrics and values per lens.
pub fn terminal(report: &Report) -> Vec<String> {
    let rows = rows(report);
    let mut lenses: Vec<(&str, usize, usize)> = Vec::new();
    for row in &rows {
        match lenses.iter_mut().find(|(l, _, _)| *l == row.lens) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 += row.trials;
            }
            None => lenses.push((row.lens, 1, row.trials)),
        }
    }
    let parts: Vec<String> = lenses.iter().map(|(l, m, v)| format!("{l}: {m} metrics, {v} values")).collect();
    if parts.is_empty() {
        return vec!["nothing measured".to_string()];
    }
    vec![format!("recorded {}", parts.join("; "))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_median_is_shown_to_four_significant_digits() {
        assert_eq!(significant(123.456_7), 123.5);
        assert_eq!(significant(0.012_345_6), 0.01235);
        assert_eq!(significant(12_345_678.0), 12_345_678.0);
        assert_eq!(significant(0.0), 0.0);
    }
}
