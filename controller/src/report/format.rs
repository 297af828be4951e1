//! Numbers, colours and escaping exactly as the reference harness renders them (§4.1), the
//! paired rule's Change cell, and the escaping of comment markers.

use super::decide::no_change_bound;
use crate::spec::MetricDef;
pub use crate::spec::numbers::{number, precision, value};
use crate::stats::{Comparison, Outcome, Paired, Verdict, round_half_even};

/// `+x.xx%`, or `N/A` when the base is zero.
pub fn percent(relative: Option<f64>) -> String {
    match relative {
        Some(r) => format!("{}{:.2}%", if r >= 0.0 { "+" } else { "-" }, (r * 100.0).abs()),
        None => "N/A".to_string(),
    }
}

/// The arrow colour: from muted to vivid with |relative change|, capped at 100%.
pub fn colour(outcome: Outcome, relative: Option<f64>) -> String {
    let (muted, vivid) = match outcome {
        Outcome::Improved => ((102.0, 129.0, 109.0), (31.0, 146.0, 78.0)),
        _ => ((170.0, 106.0, 101.0), (229.0, 72.0, 77.0)),
    };
    let t = relative.map_or(0.0, |r| r.abs().min(1.0));
    let channel = |m: f64, v: f64| round_half_even(m + (v - m) * t) as u8;
    format!("#{:02x}{:02x}{:02x}", channel(muted.0, vivid.0), channel(muted.1, vivid.1), channel(muted.2, vivid.2))
}

/// A Change cell before it is rendered: its text, and a colour when it shows an arrow.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub text: String,
    pub colour: Option<String>,
}

/// The reference rule's Change cell, with `unit` as given (escaped or not by the caller).
pub fn change_cell(c: &Comparison, def: &MetricDef, unit: &str) -> Cell {
    let plain = |text: String| Cell { text, colour: None };
    let Some(delta) = c.delta else { return plain("—".to_string()) };
    let amount = format!("{} {unit}", number(delta * def.scale, precision(def), true));
    let pct = percent(c.relative);
    match c.outcome {
        Outcome::Unavailable => plain("—".to_string()),
        Outcome::Incomplete => plain(format!("{amount} ({pct}); incomplete")),
        Outcome::NoClearChange | Outcome::Inconclusive => plain(format!("≈ {amount} ({pct})")),
        Outcome::Regressed | Outcome::Improved => {
            let arrow = if c.outcome == Outcome::Regressed { "↑" } else { "↓" };
            Cell { text: format!("{arrow} {amount} ({pct})"), colour: Some(colour(c.outcome, c.relative)) }
        }
    }
}

/// The paired rule's Change cell: the decision in words and numbers.
pub fn decision_cell(c: &Comparison, p: &Paired, def: &MetricDef, unit: &str) -> Cell {
    let plain = |text: String| Cell { text, colour: None };
    let estimate = p.estimate.map(|e| percent(Some(e)));
    let interval = p.interval.map(|(lo, hi)| format!("{} to {}", percent(Some(lo)), percent(Some(hi))));
    let bound = no_change_bound(p).map(|b| format!("no change larger than {:.2}%", b * 100.0));
    // Fewer than 3 pairs: the change of medians, in the metric's unit and in percent.
    let amount = (p.verdict == Verdict::TooFewPairs).then(|| {
        c.delta.map(|d| format!("{} {unit} ({})", number(d * def.scale, precision(def), true), percent(c.relative)))
    });
    let shown = amount.flatten().or(estimate.clone()).unwrap_or_else(|| "—".to_string());
    match c.outcome {
        Outcome::Unavailable => plain("—".to_string()),
        Outcome::Regressed | Outcome::Improved => {
            let arrow = if c.outcome == Outcome::Regressed { "↑" } else { "↓" };
            let text = match &interval {
                Some(i) => format!("{arrow} {shown} ({i})"),
                None => format!("{arrow} {shown}"),
            };
            Cell { text, colour: Some(colour(c.outcome, p.estimate.or(c.relative))) }
        }
        Outcome::NoClearChange => plain(join(&["≈", &shown], bound.as_deref())),
        Outcome::Inconclusive => plain(join(&["inconclusive:", &shown], bound.as_deref())),
        Outcome::Incomplete => plain(match &interval {
            Some(i) => format!("{shown} ({i}); incomplete"),
            None => format!("{shown}; incomplete"),
        }),
    }
}

fn join(head: &[&str], tail: Option<&str>) -> String {
    let head = head.join(" ");
    match tail {
        Some(t) => format!("{head}, {t}"),
        None => head,
    }
}

/// A unit that can go inside MathJax's `\textsf{}` and a table cell untouched.
fn plain_unit(unit: &str) -> bool {
    unit.chars().all(|c| c.is_alphanumeric() || " /.·°µ".contains(c))
}

/// The cell in Markdown: coloured with GitHub's MathJax when it has a colour and its text is
/// safe there, else plain.
fn markdown_cell(cell: Cell, math: bool) -> String {
    match cell.colour {
        Some(colour) if math => {
            format!("$`\\textcolor{{{colour}}}{{\\textsf{{{}}}}}`$", cell.text.replace('%', "\\%"))
        }
        _ => cell.text,
    }
}

/// The reference rule's Change cell in Markdown.
pub fn change(c: &Comparison, def: &MetricDef) -> String {
    let math = plain_unit(&def.unit);
    markdown_cell(change_cell(c, def, &escape(&def.unit)), math)
}

/// The paired rule's Change cell in Markdown.
pub fn decision(c: &Comparison, p: &Paired, def: &MetricDef) -> String {
    let math = plain_unit(&def.unit);
    markdown_cell(decision_cell(c, p, def, &escape(&def.unit)), math)
}

/// A field of a comment marker (`<!-- run:ID:ATTEMPT head:SHA -->`): letters, digits, `.`, `_`
/// and single `-` pass; anything else, and the second `-` of a pair, becomes `%XX`, so no field
/// can contain `-->`, `--`, `:` (the separator) or a space.
pub fn marker_field(text: &str) -> String {
    let mut out = String::new();
    let mut previous = '\0';
    for c in text.chars() {
        let keep = c.is_ascii_alphanumeric() || c == '.' || c == '_' || (c == '-' && previous != '-');
        if keep {
            out.push(c);
        } else {
            let mut bytes = [0u8; 4];
            for b in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        previous = c;
    }
    out
}

/// Untrusted text (errors, warnings, image names) made inert in Markdown, as the reference does,
/// on one line, without escape sequences or control characters.
pub fn escape(text: &str) -> String {
    let one_line = text.replace(['\r', '\n'], " ");
    let mut out = crate::sanitize::terminal(&one_line)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "&#124;")
        .replace('`', "&#96;");
    for c in ['\\', '[', ']', '(', ')', '*', '_', '!'] {
        out = out.replace(c, &format!("\\{c}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Floors, compare};

    fn def(key: &str) -> MetricDef {
        crate::spec::metrics::built_in(key).unwrap()
    }

    #[test]
    fn colours_match_the_reference_vectors() {
        assert_eq!(colour(Outcome::Regressed, Some(0.25)), "#b9625f");
        assert_eq!(colour(Outcome::Improved, Some(-0.25)), "#548565");
        assert_eq!(colour(Outcome::Regressed, None), "#aa6a65");
        assert_eq!(colour(Outcome::Regressed, Some(3.0)), "#e5484d");
        assert_eq!(colour(Outcome::Improved, Some(-1.0)), "#1f924e");
    }

    #[test]
    fn change_texts_match_the_reference() {
        let cold = def("cold");
        let c = compare(&[2.0; 10], &[2.5; 10], 10, Floors { absolute: cold.absolute, relative: cold.relative });
        assert_eq!(change(&c, &cold), "$`\\textcolor{#b9625f}{\\textsf{↑ +500.0 ms (+25.00\\%)}}`$");
        let bundle = def("bundle");
        let c = compare(
            &[10_000_000.0],
            &[10_001_000.0],
            1,
            Floors { absolute: bundle.absolute, relative: bundle.relative },
        );
        assert_eq!(change(&c, &bundle), "≈ +0.001 MB (+0.01%)");
        let c = compare(&[2.0; 10], &[1.5; 9], 10, Floors { absolute: 0.1, relative: 0.2 });
        assert_eq!(change(&c, &cold), "-500.0 ms (-25.00%); incomplete");
    }

    #[test]
    fn numbers_are_grouped_and_tiny_ones_keep_two_digits() {
        assert_eq!(number(1_234_567.891, 2, false), "1,234,567.89");
        assert_eq!(number(0.0, 1, true), "+0.0");
        assert_eq!(number(-0.04, 1, true), "-0.04");
        assert_eq!(number(0.00123, 2, false), "0.0012");
        assert_eq!(number(0.00001, 2, false), "1e-05");
        assert_eq!(percent(Some(-0.0001)), "-0.01%");
    }

    #[test]
    fn marker_fields_cannot_end_the_comment() {
        assert_eq!(marker_field("20261129-000000-abcd"), "20261129-000000-abcd");
        assert_eq!(marker_field("x-->y"), "x-%2D%3Ey");
        assert_eq!(marker_field("a --!> b"), "a%20-%2D%21%3E%20b");
        assert_eq!(marker_field("1:2\n<!--"), "1%3A2%0A%3C%21-%2D");
        assert_eq!(marker_field("é%"), "%C3%A9%25");
        for hostile in ["-->", "--->", "-- >", "--!>", "<!-- x -->", "a\n-->\n"] {
            let field = marker_field(hostile);
            assert!(!field.contains("--") && !field.contains('>') && !field.contains(' '), "{field}");
        }
    }

    #[test]
    fn units_that_would_break_a_table_are_escaped() {
        let mut odd = def("cold");
        odd.unit = "ms|<b>`".into();
        let c = compare(&[2.0; 10], &[2.5; 10], 10, Floors { absolute: 0.1, relative: 0.2 });
        let cell = change(&c, &odd);
        assert!(!cell.contains('|') && !cell.contains('<') && !cell.contains("textcolor"), "{cell}");
        assert_eq!(cell, "↑ +500.00 ms&#124;&lt;b&gt;&#96; (+25.00%)");
    }

    #[test]
    fn hostile_text_is_escaped() {
        assert_eq!(
            escape("<img src=x>|![click](http://x)\n`rm`"),
            "&lt;img src=x&gt;&#124;\\!\\[click\\]\\(http://x\\) &#96;rm&#96;"
        );
    }
}
