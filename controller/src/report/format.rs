//! Numbers, colours and escaping exactly as the reference harness renders them (§4.1), the
//! paired rule's Change cell, and the escaping of comment markers.

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
            let arrow = def.better.arrow(c.outcome);
            Cell { text: format!("{arrow} {amount} ({pct})"), colour: Some(colour(c.outcome, c.relative)) }
        }
    }
}

/// The paired rule's Change cell: the decision in words and numbers (what the run could resolve
/// is said once, by the summary's block, not on every row).
pub fn decision_cell(c: &Comparison, p: &Paired, def: &MetricDef, unit: &str) -> Cell {
    let plain = |text: String| Cell { text, colour: None };
    let estimate = p.estimate.map(|e| percent(Some(e)));
    let interval = p.interval.map(|(lo, hi)| format!("{} to {}", percent(Some(lo)), percent(Some(hi))));
    // Fewer than 3 pairs: the change of medians, in the metric's unit and in percent.
    let amount = (p.verdict == Verdict::TooFewPairs).then(|| {
        c.delta.map(|d| format!("{} {unit} ({})", number(d * def.scale, precision(def), true), percent(c.relative)))
    });
    let shown = amount.flatten().or(estimate.clone()).unwrap_or_else(|| "—".to_string());
    let with_interval = |text: String| match &interval {
        Some(i) => format!("{text} ({i})"),
        None => text,
    };
    match c.outcome {
        Outcome::Unavailable => plain("unavailable: a side has no sample".to_string()),
        Outcome::Regressed | Outcome::Improved => {
            let arrow = def.better.arrow(c.outcome);
            Cell {
                text: with_interval(format!("{arrow} {shown}")),
                colour: Some(colour(c.outcome, p.estimate.or(c.relative))),
            }
        }
        Outcome::NoClearChange => plain(with_interval(format!("≈ {shown}"))),
        Outcome::Inconclusive => plain(with_interval(format!("inconclusive: {shown}"))),
        Outcome::Incomplete => plain(format!("{}; incomplete", with_interval(shown))),
    }
}

/// A Change cell as plain text (the terminal's): the rule's cell, uncoloured.
pub fn change_text(c: &super::MetricComparison, def: &MetricDef, rule: crate::spec::Rule) -> String {
    match rule {
        crate::spec::Rule::Reference => change_cell(&c.comparison, def, &def.unit).text,
        crate::spec::Rule::Paired => decision_cell(&c.comparison, &c.paired, def, &def.unit).text,
    }
}

/// A unit that can go inside MathJax's `\textsf{}` and a table cell untouched.
fn plain_unit(unit: &str) -> bool {
    unit.chars().all(|c| c.is_alphanumeric() || " /.·°µ".contains(c))
}

/// The cell in Markdown: coloured with GitHub's MathJax when it has a colour and its text is
/// safe there (`unit` as escaped, plain), else plain.
fn markdown_cell(cell: Cell, unit: &str, escaped: &str) -> String {
    match cell.colour {
        Some(colour) if plain_unit(unit) && unit == escaped => {
            format!("$`\\textcolor{{{colour}}}{{\\textsf{{{}}}}}`$", cell.text.replace('%', "\\%"))
        }
        _ => cell.text,
    }
}

/// The reference rule's Change cell in Markdown.
pub fn change(c: &Comparison, def: &MetricDef) -> String {
    let unit = escape(&def.unit);
    markdown_cell(change_cell(c, def, &unit), &def.unit, &unit)
}

/// The paired rule's Change cell in Markdown.
pub fn decision(c: &Comparison, p: &Paired, def: &MetricDef) -> String {
    let unit = escape(&def.unit);
    markdown_cell(decision_cell(c, p, def, &unit), &def.unit, &unit)
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
/// on one line, without escape sequences or control characters, and without a live mention,
/// reference or link ([`unlinked`]).
///
/// A `$` becomes the full-width dollar sign `＄` (U+FF04): GitHub reads inline math between
/// dollar signs after Markdown's escapes and entities are undone (`\$` and `&#36;` are both a
/// delimiter again), so product text could draw a formula, a coloured "improved" say. The only
/// way GitHub's documentation gives, an HTML `<span>` around it, is a tag, which this escape never
/// writes.
pub fn escape(text: &str) -> String {
    let one_line = text.replace(['\r', '\n'], " ");
    let mut out = unlinked(&crate::sanitize::terminal(&one_line))
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "&#124;")
        .replace('`', "&#96;")
        .replace('$', "\u{ff04}");
    for c in ['\\', '[', ']', '(', ')', '*', '_', '!'] {
        out = out.replace(c, &format!("\\{c}"));
    }
    out
}

/// [`escape`] of at most the first `max` characters of `text`, with `…` when it was longer: a
/// cell or a bullet of bounded size, whatever a sandbox wrote.
pub fn escape_clipped(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", escape(&text[..at])),
        None => escape(text),
    }
}

/// What GitHub would turn into a ping or a link, broken by a zero-width space (U+200B), as
/// GitHub's own bots do: after `@` before a name (`@user`, `@org/team`, `owner/repo@sha`, an
/// e-mail address), after `#` before a number (`#123`, `owner/repo#1`), in `GH-123`, before
/// `://` (`https://…`) and in `www.`. The text reads the same; nothing in it notifies anyone or
/// links anywhere.
pub fn unlinked(text: &str) -> String {
    const ZWSP: char = '\u{200b}';
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        let lower = |at: usize| chars.get(at).map(|c| c.to_ascii_lowercase());
        if c == ':' && chars.get(i + 1) == Some(&'/') && i > 0 && chars[i - 1].is_ascii_alphanumeric() {
            out.push(ZWSP);
        }
        out.push(c);
        let breaks = match c {
            '@' => next.is_ascii_alphanumeric() || next == '-' || next == '_',
            '#' => next.is_ascii_digit(),
            '-' => next.is_ascii_digit() && i >= 2 && lower(i - 2) == Some('g') && lower(i - 1) == Some('h'),
            'w' | 'W' => next == '.' && i >= 2 && lower(i - 2) == Some('w') && lower(i - 1) == Some('w'),
            _ => false,
        };
        if breaks {
            out.push(ZWSP);
        }
    }
    out
}

/// `n` and the word, plural unless one: "1 commit", "2 commits".
pub fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
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
            "&lt;img src=x&gt;&#124;\\!\\[click\\]\\(http\u{200b}://x\\) &#96;rm&#96;"
        );
    }

    #[test]
    fn mentions_references_and_links_are_broken_where_github_would_see_them() {
        let z = '\u{200b}';
        let cases = [
            ("ping @octocat and @org/team", format!("ping @{z}octocat and @{z}org/team")),
            ("see owner/repo#12, #3 and GH-45", format!("see owner/repo#{z}12, #{z}3 and GH-{z}45")),
            ("gh-7 is GH-x", format!("gh-{z}7 is GH-x")),
            ("https://evil.example/x HTTP://y", format!("https{z}://evil.example/x HTTP{z}://y")),
            ("www.evil.example WWW.x", format!("www{z}.evil.example WWW{z}.x")),
            ("mail a@b.co", format!("mail a@{z}b.co")),
            ("plain # 1, @ 2, C# and 5-6 stay", "plain # 1, @ 2, C# and 5-6 stay".to_string()),
        ];
        for (text, expected) in cases {
            assert_eq!(unlinked(text), expected, "{text}");
        }
        // Through the Markdown escape too, and a clipped text says so.
        assert_eq!(escape("@x"), format!("@{z}x"));
        assert_eq!(escape_clipped("abcdef", 3), "abc…");
        assert_eq!(escape_clipped("a|b", 3), "a&#124;b");
    }
}
