//! Numbers, colours and escaping exactly as the reference harness renders them (§4.1).

use crate::spec::MetricDef;
use crate::stats::{Comparison, Outcome, round_half_even};

/// Decimals for a metric: 3 for ms metrics with a sub-millisecond floor, 1 for other ms
/// metrics, 2 for everything else.
pub fn precision(def: &MetricDef) -> usize {
    match def.unit.as_str() {
        "ms" if def.absolute < 0.001 => 3,
        "ms" => 1,
        _ => 2,
    }
}

/// A raw value in display units, e.g. `412.3 ms`.
pub fn value(raw: f64, def: &MetricDef) -> String {
    format!("{} {}", number(raw * def.scale, precision(def), false), def.unit)
}

/// Fixed decimals with thousands separators; below the precision, two significant digits.
pub fn number(scaled: f64, precision: usize, signed: bool) -> String {
    let sign = if signed && scaled >= 0.0 { "+" } else { "" };
    if scaled != 0.0 && scaled.abs() < 10f64.powi(-(precision as i32)) {
        return format!("{sign}{}", two_significant(scaled));
    }
    let text = format!("{:.*}", precision, scaled.abs());
    let (int, frac) = text.split_once('.').map_or((text.as_str(), ""), |(i, f)| (i, f));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let minus = if scaled < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0') { "-" } else { "" };
    if frac.is_empty() { format!("{sign}{minus}{grouped}") } else { format!("{sign}{minus}{grouped}.{frac}") }
}

/// Python's `%.2g`.
fn two_significant(v: f64) -> String {
    let exp = v.abs().log10().floor() as i32;
    if !(-4..2).contains(&exp) {
        let text = format!("{:.1e}", v);
        // Rust writes 1.0e-5; Python writes 1e-05.
        let (mantissa, e) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (1 - exp).max(0) as usize;
    let text = format!("{:.*}", decimals, v);
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text }
}

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

/// The Change cell.
pub fn change(c: &Comparison, def: &MetricDef) -> String {
    let Some(delta) = c.delta else { return "—".to_string() };
    let amount = format!("{} {}", number(delta * def.scale, precision(def), true), def.unit);
    let pct = percent(c.relative);
    match c.outcome {
        Outcome::Unavailable => "—".to_string(),
        Outcome::Incomplete => format!("{amount} ({pct}); incomplete"),
        Outcome::NoClearChange => format!("≈ {amount} ({pct})"),
        Outcome::Regressed | Outcome::Improved => {
            let arrow = if c.outcome == Outcome::Regressed { "↑" } else { "↓" };
            let text = format!("{arrow} {amount} ({})", pct.replace('%', "\\%"));
            format!("$`\\textcolor{{{}}}{{\\textsf{{{text}}}}}`$", colour(c.outcome, c.relative))
        }
    }
}

/// Untrusted text (errors, warnings, image names) made inert in Markdown, as the reference does.
pub fn escape(text: &str) -> String {
    let mut out = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "&#124;")
        .replace('`', "&#96;")
        .replace(['\r', '\n'], " ");
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
    fn hostile_text_is_escaped() {
        assert_eq!(
            escape("<img src=x>|![click](http://x)\n`rm`"),
            "&lt;img src=x&gt;&#124;\\!\\[click\\]\\(http://x\\) &#96;rm&#96;"
        );
    }
}
