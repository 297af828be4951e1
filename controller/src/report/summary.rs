//! What a reader needs first, worked out once for every rendering — the comment, `report.html`
//! and the terminal's last lines: the counts of the verdicts, the rows that changed (regressed,
//! improved, incomplete or unavailable: missing measurements are not wins), one line for the
//! rest, and what the run could not resolve.
//!
//! **Resolution.** The smallest change a run tells apart from no change with 80 % power is
//! e^(q + z₀.₈₀)·s/√n − 1 (s the spread of the pairs' log ratios, n the pairs, q the look's
//! quantile); the minimum detectable effect adds the floor to it (`stats::mde`), so it is read
//! back from there: (1 + MDE)/(1 + floor) − 1. A metric whose resolution is coarser than its
//! floor cannot see changes of the size its floor says matter; since the resolution shrinks as
//! 1/√n, n·(ln(1 + resolution)/ln(1 + floor))² pairs would bring it to the floor.

use super::lens::{self, Lens};
use super::{MetricComparison, Report, Rule};
use crate::spec::MetricDef;
use crate::stats::{Outcome, Paired};

/// One metric as the summaries see it.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// Its place in the report's order (`Report::metric_defs`).
    pub index: usize,
    pub def: &'a MetricDef,
    pub cmp: &'a MetricComparison,
    pub lens: Lens,
}

impl Row<'_> {
    pub fn outcome(&self) -> Outcome {
        self.cmp.outcome()
    }
}

/// The metrics with their comparisons, in report order (matched by key).
pub fn rows<'a>(defs: &'a [MetricDef], comparisons: &'a [MetricComparison]) -> Vec<Row<'a>> {
    defs.iter()
        .enumerate()
        .filter_map(|(index, def)| {
            let cmp = comparisons.iter().find(|c| c.key == def.key)?;
            Some(Row { index, def, cmp, lens: lens::of(def) })
        })
        .collect()
}

/// Whether a reader must see this row first: a change, or a measurement that is missing.
pub fn changed(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Regressed | Outcome::Improved | Outcome::Incomplete | Outcome::Unavailable)
}

/// The word of an outcome under the report's rule.
pub fn word(outcome: Outcome, rule: Rule) -> &'static str {
    match (outcome, rule) {
        (Outcome::Regressed, _) => "regressed",
        (Outcome::Improved, _) => "improved",
        (Outcome::NoClearChange, Rule::Reference) => "no clear change",
        (Outcome::NoClearChange, Rule::Paired) => "no change",
        (Outcome::Inconclusive, _) => "inconclusive",
        (Outcome::Incomplete, _) => "incomplete",
        (Outcome::Unavailable, _) => "unavailable",
    }
}

/// The headline's counts: `1 regressed · 0 improved · 37 no change · 3 inconclusive`, then
/// incomplete and unavailable when there are any (the reference rule has no inconclusive).
pub fn counts(rule: Rule, comparisons: &[MetricComparison]) -> String {
    let count = |o: Outcome| comparisons.iter().filter(|c| c.outcome() == o).count();
    let mut parts = vec![
        format!("{} regressed", count(Outcome::Regressed)),
        format!("{} improved", count(Outcome::Improved)),
        format!("{} {}", count(Outcome::NoClearChange), word(Outcome::NoClearChange, rule)),
    ];
    if rule == Rule::Paired {
        parts.push(format!("{} inconclusive", count(Outcome::Inconclusive)));
    }
    for o in [Outcome::Incomplete, Outcome::Unavailable] {
        if count(o) > 0 {
            parts.push(format!("{} {}", count(o), word(o, rule)));
        }
    }
    parts.join(" · ")
}

/// The one line for the metrics that did not change: `37 metrics unchanged within their
/// floors, 3 inconclusive`; None when every metric changed.
pub fn rest(rows: &[Row], rule: Rule) -> Option<String> {
    let count = |o: Outcome| rows.iter().filter(|r| r.outcome() == o).count();
    let (unchanged, inconclusive) = (count(Outcome::NoClearChange), count(Outcome::Inconclusive));
    let metrics = |n: usize| format!("{n} metric{}", if n == 1 { "" } else { "s" });
    let mut parts = Vec::new();
    if unchanged > 0 {
        parts.push(match (rule, unchanged) {
            (Rule::Reference, n) => format!("{} with no clear change", metrics(n)),
            (Rule::Paired, 1) => "1 metric unchanged within its floor".to_string(),
            (Rule::Paired, n) => format!("{n} metrics unchanged within their floors"),
        });
    }
    if inconclusive > 0 {
        let n = if parts.is_empty() { metrics(inconclusive) } else { inconclusive.to_string() };
        parts.push(format!("{n} inconclusive"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The overview's order: the changed rows first, then the others by group (groups in the order
/// they first appear), each part in report order.
pub fn overview<'a>(rows: &[Row<'a>]) -> Vec<Row<'a>> {
    let mut groups: Vec<&str> = Vec::new();
    for r in rows {
        if !groups.contains(&r.def.group.as_str()) {
            groups.push(&r.def.group);
        }
    }
    let mut out: Vec<Row> = rows.iter().filter(|r| changed(r.outcome())).copied().collect();
    for group in groups {
        out.extend(rows.iter().filter(|r| !changed(r.outcome()) && r.def.group == group));
    }
    out
}

/// The smallest change this run could tell from no change with 80 % power (head/base − 1), when
/// the pairs gave a spread.
pub fn resolution(p: &Paired) -> Option<f64> {
    let mde = p.mde.filter(|m| m.is_finite())?;
    Some((1.0 + mde) / (1.0 + p.floor) - 1.0)
}

/// Pairs that would bring the resolution to the floor (at the same spread), when it is coarser.
pub fn pairs_for_floor(p: &Paired) -> Option<u64> {
    let r = resolution(p)?;
    let floor = (1.0 + p.floor).ln();
    if floor <= 0.0 || r <= p.floor {
        return None;
    }
    let needed = p.pairs as f64 * ((1.0 + r).ln() / floor).powi(2);
    needed.is_finite().then(|| needed.ceil().min(1e12) as u64)
}

/// A metric the run could not resolve at its floor, and another lens of its step that could.
#[derive(Debug, Clone, Copy)]
pub struct Unresolved<'a> {
    pub row: Row<'a>,
    pub resolution: f64,
    pub pairs_needed: Option<u64>,
    pub other_lens: Option<Row<'a>>,
}

/// The inconclusive metrics whose resolution is coarser than their floor, in report order.
pub fn unresolved<'a>(rows: &[Row<'a>]) -> Vec<Unresolved<'a>> {
    rows.iter()
        .filter(|r| r.outcome() == Outcome::Inconclusive)
        .filter_map(|r| {
            let p = &r.cmp.paired;
            let resolution = resolution(p).filter(|res| *res > p.floor)?;
            let other_lens = rows
                .iter()
                .filter(|o| o.lens != r.lens && lens::step(&o.def.key) == lens::step(&r.def.key))
                .find(|o| resolved(o))
                .copied();
            Some(Unresolved { row: *r, resolution, pairs_needed: pairs_for_floor(p), other_lens })
        })
        .collect()
}

/// Decided by its pairs, or resolving its floor.
fn resolved(row: &Row) -> bool {
    let decided = matches!(row.outcome(), Outcome::Regressed | Outcome::Improved | Outcome::NoClearChange);
    decided || resolution(&row.cmp.paired).is_some_and(|r| r <= row.cmp.paired.floor)
}

/// `±12.34%`.
pub fn plus_minus(x: f64) -> String {
    format!("±{:.2}%", x * 100.0)
}

/// A count of pairs as the block says it: `≈ 490`, two significant digits past 100.
pub fn about(n: u64) -> String {
    if n < 100 {
        return n.to_string();
    }
    let digits = (n as f64).log10().floor() as i32 - 1;
    let unit = 10f64.powi(digits);
    crate::spec::numbers::number(((n as f64 / unit).ceil() * unit).round(), 0, false)
}

/// Most changed rows the terminal lists.
const TERMINAL_ROWS: usize = 20;
const TERMINAL_TITLE: usize = 40;

/// The terminal's verdict lines, mirroring the comment's head: the counts, each changed row
/// (outcome, title, lens, medians, estimate and interval), the line for the rest, and how many
/// metrics the run could not resolve. Empty when nothing was compared.
pub fn terminal(report: &Report) -> Vec<String> {
    if report.comparisons.is_empty() {
        return Vec::new();
    }
    let defs = report.metric_defs();
    let rows = rows(&defs, &report.comparisons);
    let mut lines = vec![format!("verdicts: {}", counts(report.rule, &report.comparisons))];
    let changed: Vec<&Row> = rows.iter().filter(|r| changed(r.outcome())).collect();
    let cells: Vec<[String; 4]> = changed
        .iter()
        .take(TERMINAL_ROWS)
        .map(|r| {
            let title: String = r.def.title.chars().take(TERMINAL_TITLE).collect();
            let median = |m: Option<f64>| m.map_or("—".to_string(), |v| super::format::value(v, r.def));
            [
                word(r.outcome(), report.rule).to_string(),
                // The lens once: a title that already ends with a lens's word ("(CPU)",
                // "(instructions)", "(cycles)") is not told it again.
                if r.def.title.ends_with(')') && r.lens != super::lens::Lens::Wall {
                    title
                } else {
                    format!("{title} ({})", r.lens.name())
                },
                format!("{} → {}", median(r.cmp.comparison.base_median), median(r.cmp.comparison.head_median)),
                super::format::change_text(r.cmp, r.def, report.rule),
            ]
        })
        .collect();
    let width = |i: usize| cells.iter().map(|c| c[i].chars().count()).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2)];
    for c in &cells {
        lines.push(format!(
            "  {:<w0$}  {:<w1$}  {:<w2$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        ));
    }
    if changed.len() > TERMINAL_ROWS {
        lines.push(format!("  and {} more changed (report.md)", changed.len() - TERMINAL_ROWS));
    }
    if let Some(rest) = rest(&rows, report.rule) {
        lines.push(format!("  {rest}"));
    }
    let unresolved = unresolved(&rows);
    if !unresolved.is_empty() {
        lines.push(format!(
            "  {} could not resolve a change of {} floor (report.md says how many pairs would)",
            if unresolved.len() == 1 { "1 metric".to_string() } else { format!("{} metrics", unresolved.len()) },
            if unresolved.len() == 1 { "its" } else { "their" }
        ));
    }
    lines.extend(noise_today(report));
    lines
}

/// Metrics named on the terminal whose pair sd is far from the noise profile's.
const TERMINAL_FAR: usize = 5;

/// The line saying which metrics' pair sd today is far from the noise profile's, if any.
fn noise_today(report: &Report) -> Option<String> {
    let noise = report.noise.as_ref()?;
    let far: Vec<String> = report
        .comparisons
        .iter()
        .filter_map(|c| noise.far(&c.key, &c.paired))
        .map(|f| format!("{} {:.2}% against {:.2}%", f.key, f.today * 100.0, f.profile * 100.0))
        .collect();
    if far.is_empty() {
        return None;
    }
    let more = far.len().saturating_sub(TERMINAL_FAR);
    Some(format!(
        "  pair sd today far from the noise profile's: {}{} (the verdicts use today's; report.md's notes say what the profile planned for)",
        far[..far.len().min(TERMINAL_FAR)].join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::paired_at;

    #[test]
    fn resolution_and_pairs_follow_the_square_root_rule() {
        // Log ratios spread by ~10 % over 6 pairs against a 5 % floor: the run sees ~±12 %.
        let pairs: Vec<(f64, f64)> = [0.9, 1.1, 1.0, 0.95, 1.05, 1.0].iter().map(|r| (1.0, *r)).collect();
        let p = paired_at(&pairs, 0.05, 0.05);
        let r = resolution(&p).unwrap();
        let s = p.spread.unwrap();
        let rule = (2.8016 * s / 6f64.sqrt()).exp() - 1.0;
        assert!((r - rule).abs() < 2e-4, "{r} {rule}");
        let needed = pairs_for_floor(&p).unwrap() as f64;
        let expected = 6.0 * ((1.0 + r).ln() / 1.05f64.ln()).powi(2);
        assert!((needed - expected.ceil()).abs() < 1.0, "{needed} {expected}");
        // At that many pairs the same spread resolves the floor.
        let at = crate::stats::mde(0.05, s, needed as usize, 0.05);
        assert!((1.0 + at) / 1.05 - 1.0 <= 0.0501, "{at}");
        // A run that resolves its floor needs no more pairs.
        assert_eq!(pairs_for_floor(&paired_at(&pairs, 0.5, 0.05)), None);
    }

    #[test]
    fn counts_of_pairs_are_said_in_two_digits() {
        assert_eq!(about(7), "7");
        assert_eq!(about(99), "99");
        assert_eq!(about(487), "490");
        assert_eq!(about(12_345), "13,000");
    }
}
