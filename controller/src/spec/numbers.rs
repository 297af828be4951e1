//! Numbers as the reference harness writes them (§4.1): a metric's value in its display unit,
//! fixed decimals with thousands separators, and two significant digits below the precision.
//! The spec prints its floors with them and the reports their values.

use super::MetricDef;

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
