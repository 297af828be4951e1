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

/// The reference's bench format, `RESULT {"value": 3, ...}`: the number in `field` of a RESULT
/// line (a finite, non-negative number, not a boolean); other fields are details.
pub fn parse_value_line(line: &str, field: &str) -> Option<Result<f64, String>> {
    let rest = line.trim_end_matches(['\r', '\n']).strip_prefix("RESULT ")?;
    let value: serde_json::Value = match serde_json::from_str(rest.trim()) {
        Ok(value) => value,
        Err(err) => return Some(Err(format!("not a JSON object: {err}"))),
    };
    Some(match value.get(field) {
        None => Err(format!("no {field:?} field")),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
            Some(x) => Err(format!("{field}: {x} is not a finite, non-negative number")),
            None => Err(format!("{field}: {v} is not a number")),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_line, parse_value_line};

    #[test]
    fn reads_the_value_field_of_reference_benches() {
        assert_eq!(parse_value_line("transfers: 1", "value"), None);
        assert_eq!(parse_value_line("RESULT {\"value\": 2, \"detail\": \"x\"}", "value"), Some(Ok(2.0)));
        assert_eq!(
            parse_value_line("RESULT {\"value\": true}", "value"),
            Some(Err("value: true is not a number".into()))
        );
        assert_eq!(
            parse_value_line("RESULT {\"value\": -0.5}", "value").unwrap().unwrap_err(),
            "value: -0.5 is not a finite, non-negative number"
        );
        assert_eq!(parse_value_line("RESULT {\"other\": 1}", "value"), Some(Err("no \"value\" field".into())));
    }

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
