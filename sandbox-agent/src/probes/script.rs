//! Scripts that report their own figures: every output line `RESULT {json}` carries metrics as
//! `"name": value`. Values must be finite, non-negative numbers.

/// What one output line says: nothing, or the metrics of a `RESULT` line, or why it is invalid.
pub fn parse_line(line: &str) -> Option<Result<Vec<(String, f64)>, String>> {
    let rest = line.trim_end_matches(['\r', '\n']).strip_prefix("RESULT ")?;
    let value: serde_json::Value = match serde_json::from_str(rest.trim()) {
        Ok(value) => value,
        Err(_) if ["NaN", "Infinity"].iter().any(|w| rest.contains(w)) => {
            return Some(Err("a value is not finite (NaN or Infinity)".to_string()));
        }
        Err(err) => return Some(Err(format!("not a JSON object: {err}"))),
    };
    let Some(object) = value.as_object() else {
        return Some(Err("not a JSON object".to_string()));
    };
    let mut metrics = Vec::new();
    for (name, value) in object {
        match value.as_f64() {
            None => return Some(Err(format!("{name}: {value} is not a number"))),
            Some(v) if !v.is_finite() => return Some(Err(format!("{name}: {v} is not finite"))),
            Some(v) if v < 0.0 => return Some(Err(format!("{name}: {v} is negative"))),
            Some(v) => metrics.push((name.clone(), v)),
        }
    }
    Some(Ok(metrics))
}

#[cfg(test)]
mod tests {
    use super::parse_line;

    #[test]
    fn reads_result_lines_and_rejects_bad_values() {
        assert_eq!(parse_line("progress 50%"), None);
        assert_eq!(parse_line("RESULT {\"a\": 1.5, \"b\": 0}\n"), Some(Ok(vec![("a".into(), 1.5), ("b".into(), 0.0)])));
        assert_eq!(parse_line("RESULT {\"a\": -1}"), Some(Err("a: -1 is negative".into())));
        assert_eq!(parse_line("RESULT {\"a\": \"fast\"}"), Some(Err("a: \"fast\" is not a number".into())));
        assert_eq!(parse_line("RESULT {\"a\": NaN}"), Some(Err("a value is not finite (NaN or Infinity)".into())));
        assert!(parse_line("RESULT [1]").unwrap().is_err());
        assert!(parse_line("RESULT {oops").unwrap().unwrap_err().starts_with("not a JSON object"));
    }
}
