//! Expectations on a JSON message: `{"field": value}` compares a top-level field; a key starting
//! with `/` is a JSON pointer whose `*` segments stand for every element (all must match, and
//! there must be at least one) and whose trailing `#` takes the length of an array, object or
//! string; an expected value `{"matches": "regex"}` matches a string, `{"contains": x}` holds
//! for an array with the element `x` or a string with the substring `x`, and `{"not": x}` for
//! anything but `x` (also when a wildcard reaches nothing), instead of comparing.

use regex_lite::Regex;
use serde_json::{Map, Value};

/// Every expectation holds, or the first that does not, said plainly.
pub fn check(message: &Value, expect: &Map<String, Value>) -> Result<(), String> {
    for (key, want) in expect {
        let (pointer, length) = match key.strip_suffix('#') {
            Some(p) => (p, true),
            None => (key.as_str(), false),
        };
        let found: Vec<&Value> = if pointer.starts_with('/') {
            resolve(message, pointer)
        } else {
            message.get(pointer).into_iter().collect()
        };
        let negated = want.as_object().filter(|o| o.len() == 1).is_some_and(|o| o.contains_key("not"));
        if found.is_empty() && !(negated && pointer.contains("/*")) {
            return Err(format!("expected {key} = {want}, but the message has no {pointer}"));
        }
        for value in found {
            let value = if length {
                Value::from(length_of(value).ok_or(format!("{pointer} has no length"))?)
            } else {
                value.clone()
            };
            if !satisfies(&value, want)? {
                return Err(format!("expected {key} = {want}, got {value}"));
            }
        }
    }
    Ok(())
}

fn length_of(value: &Value) -> Option<usize> {
    match value {
        Value::Array(a) => Some(a.len()),
        Value::Object(o) => Some(o.len()),
        Value::String(s) => Some(s.chars().count()),
        _ => None,
    }
}

fn satisfies(value: &Value, want: &Value) -> Result<bool, String> {
    if let Some(pattern) = want.as_object().filter(|o| o.len() == 1).and_then(|o| o.get("matches")) {
        let pattern = pattern.as_str().ok_or("`matches` takes a regular expression")?;
        let re = Regex::new(pattern).map_err(|e| format!("invalid regular expression {pattern:?}: {e}"))?;
        return Ok(value.as_str().is_some_and(|s| re.is_match(s)));
    }
    if let Some(other) = want.as_object().filter(|o| o.len() == 1).and_then(|o| o.get("not")) {
        return satisfies(value, other).map(|same| !same);
    }
    if let Some(part) = want.as_object().filter(|o| o.len() == 1).and_then(|o| o.get("contains")) {
        return Ok(match (value, part) {
            (Value::Array(items), part) => items.contains(part),
            (Value::String(s), Value::String(p)) => s.contains(p.as_str()),
            _ => false,
        });
    }
    // 3 and 3.0 are the same number.
    Ok(match (value.as_f64(), want.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => value == want,
    })
}

/// The values a pointer with `*` segments reaches.
fn resolve<'a>(root: &'a Value, pointer: &str) -> Vec<&'a Value> {
    let mut current = vec![root];
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        current = current
            .into_iter()
            .flat_map(|v| -> Vec<&Value> {
                match (segment.as_str(), v) {
                    ("*", Value::Array(items)) => items.iter().collect(),
                    ("*", Value::Object(map)) => map.values().collect(),
                    (s, Value::Array(items)) => {
                        s.parse::<usize>().ok().and_then(|i| items.get(i)).into_iter().collect()
                    }
                    (s, Value::Object(map)) => map.get(s).into_iter().collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    current
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn expect(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn pointers_wildcards_lengths_and_patterns() {
        let reply = json!({"type": "response", "success": true, "data": {"jobs": [
            {"id": "job-1", "status": "paused", "runCount": 0, "name": "fixture-01"},
            {"id": "job-2", "status": "paused", "runCount": 0.0, "name": "fixture-02"}
        ]}});
        let ok = expect(json!({
            "success": true,
            "/data/jobs#": 2,
            "/data/jobs/*/status": "paused",
            "/data/jobs/*/runCount": 0,
            "/data/jobs/*/name": {"matches": "^fixture-\\d+$"},
            "/data/jobs/1/id": "job-2",
        }));
        assert_eq!(check(&reply, &ok), Ok(()));
        let err = check(&reply, &expect(json!({"/data/jobs#": 13}))).unwrap_err();
        assert_eq!(err, "expected /data/jobs# = 13, got 2");
        let err = check(&reply, &expect(json!({"/data/jobs/*/status": "active"}))).unwrap_err();
        assert!(err.contains("got \"paused\""), "{err}");
        let err = check(&reply, &expect(json!({"/data/missing/*/x": 1}))).unwrap_err();
        assert!(err.contains("has no /data/missing/*/x"), "{err}");
        let hello = json!({"capabilities": ["catalog", "switch"], "name": "demo.catalog"});
        assert_eq!(
            check(&hello, &expect(json!({"capabilities": {"contains": "catalog"}, "name": {"contains": "demo"}}))),
            Ok(())
        );
        assert!(check(&hello, &expect(json!({"capabilities": {"contains": "heartbeat"}}))).is_err());
        let residents = json!({"data": {"sessions": [{"sessionId": "a"}, {"sessionId": "b"}]}});
        assert_eq!(check(&residents, &expect(json!({"/data/sessions/*/sessionId": {"not": "cold"}}))), Ok(()));
        assert!(check(&residents, &expect(json!({"/data/sessions/*/sessionId": {"not": "b"}}))).is_err());
        let none = json!({"data": {"sessions": []}});
        assert_eq!(check(&none, &expect(json!({"/data/sessions/*/sessionId": {"not": "cold"}}))), Ok(()));
        assert!(check(&none, &expect(json!({"/data/missing": {"not": 1}}))).is_err());
        let err = check(&json!({"success": false, "error": "boom"}), &expect(json!({"success": true}))).unwrap_err();
        assert_eq!(err, "expected success = true, got false");
    }
}
