//! Scripts that report their own figures: every output line `RESULT {json}` carries metrics as
//! `"name": value`. Values must be finite, non-negative numbers (or arrays of them, for the keys a
//! script declares as distributions: each number a sample).

/// What one output line says: nothing, or the metrics of a `RESULT` line, or why it is invalid.
pub fn parse_line(line: &str) -> Option<Result<Vec<(String, f64)>, String>> {
    Some(parse_line_with(line, &|_| false)?.map(|metrics| {
        metrics
            .into_iter()
            .filter_map(|(name, reported)| match reported {
                Reported::One(v) => Some((name, v)),
                Reported::Many(_) => None,
            })
            .collect()
    }))
}

/// A `RESULT` value: one number, or an array of samples (only for keys declared as
/// distributions).
#[derive(Debug, Clone, PartialEq)]
pub enum Reported {
    One(f64),
    Many(Vec<f64>),
}

/// Like [`parse_line`], where a key for which `samples(key)` holds may carry an array of
/// numbers (each finite and non-negative).
pub fn parse_line_with(line: &str, samples: &dyn Fn(&str) -> bool) -> Option<Result<Vec<(String, Reported)>, String>> {
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
        let reported = match value {
            serde_json::Value::Array(items) if samples(name) => {
                match items.iter().map(|v| number(name, v)).collect::<Result<Vec<f64>, String>>() {
                    Ok(values) => Reported::Many(values),
                    Err(why) => return Some(Err(why)),
                }
            }
            serde_json::Value::Array(_) => {
                return Some(Err(format!(
                    "{name}: an array of samples, but {name} is not declared in `distributions`"
                )));
            }
            single => match number(name, single) {
                Ok(v) => Reported::One(v),
                Err(why) => return Some(Err(why)),
            },
        };
        metrics.push((name.clone(), reported));
    }
    Some(Ok(metrics))
}

/// A finite, non-negative number, or why `value` is not one.
fn number(name: &str, value: &serde_json::Value) -> Result<f64, String> {
    match value.as_f64() {
        None => Err(format!("{name}: {value} is not a number")),
        Some(v) if !v.is_finite() => Err(format!("{name}: {v} is not finite")),
        Some(v) if v < 0.0 => Err(format!("{name}: {v} is negative")),
        Some(v) => Ok(v),
    }
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
    use super::{Reported, parse_line, parse_line_with, parse_value_line};

    #[test]
    fn arrays_are_samples_only_for_declared_distributions() {
        let declared = |k: &str| k == "commit_ms";
        assert_eq!(
            parse_line_with("RESULT {\"commit_ms\": [0.4, 0.51], \"ops\": 3}", &declared),
            Some(Ok(vec![("commit_ms".into(), Reported::Many(vec![0.4, 0.51])), ("ops".into(), Reported::One(3.0))]))
        );
        assert_eq!(
            parse_line_with("RESULT {\"ops\": [1]}", &declared),
            Some(Err("ops: an array of samples, but ops is not declared in `distributions`".into()))
        );
        assert_eq!(
            parse_line_with("RESULT {\"commit_ms\": [1, -2]}", &declared),
            Some(Err("commit_ms: -2 is negative".into()))
        );
        assert_eq!(
            parse_line_with("RESULT {\"commit_ms\": [1, \"x\"]}", &declared),
            Some(Err("commit_ms: \"x\" is not a number".into()))
        );
        assert_eq!(
            parse_line("RESULT {\"a\": [1]}").unwrap().unwrap_err(),
            "a: an array of samples, but a is not declared in `distributions`"
        );
    }

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
