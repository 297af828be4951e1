//! Expectations on a JSON message: `{"field": value}` compares a top-level field; a key starting
//! with `/` is a JSON pointer whose `*` segments stand for every element (all must match, and
//! there must be at least one) and whose trailing `#` takes the length of an array, object or
//! string; an expected value `{"matches": "regex"}` matches a string, `{"contains": x}` holds
//! for an array with the element `x` or a string with the substring `x`, and `{"not": x}` for
//! anything but `x` (also when a wildcard reaches nothing), instead of comparing.
//!
//! `{"set": [e1, e2, …]}` is about all the values a key reaches together: they are exactly the
//! entries, one value each, in any order — none missing, none extra, none twice. A plain entry
//! equals its value; an object entry lists the fields its value must have (recursively, each an
//! entry itself, so a field may be `{"matches": …}`), which lets one entry pin several fields of
//! the same item. Every value must fit exactly one entry (`sandbench check` refuses entries that
//! nothing tells apart).

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
        let set = operand(want, "set");
        let may_reach_nothing = operand(want, "not").is_some() || set.is_some();
        if found.is_empty() && !(may_reach_nothing && pointer.contains("/*")) {
            return Err(format!("expected {key} = {want}, but the message has no {pointer}"));
        }
        let mut values = Vec::with_capacity(found.len());
        for value in found {
            values.push(if length {
                Value::from(length_of(value).ok_or(format!("{pointer} has no length"))?)
            } else {
                value.clone()
            });
        }
        if let Some(entries) = set {
            let entries = entries.as_array().ok_or("`set` takes a list of entries")?;
            one_each(&values, entries).map_err(|why| format!("expected {key} to be the set {want}: {why}"))?;
            continue;
        }
        for value in values {
            if !satisfies(&value, want)? {
                return Err(format!("expected {key} = {want}, got {value}"));
            }
        }
    }
    Ok(())
}

/// The operand of a one-key object `{name: operand}` (the form of `matches`, `not`, …).
fn operand<'a>(want: &'a Value, name: &str) -> Option<&'a Value> {
    want.as_object().filter(|o| o.len() == 1).and_then(|o| o.get(name))
}

/// Each value fits exactly one entry, and each entry is fitted by exactly one value.
fn one_each(values: &[Value], entries: &[Value]) -> Result<(), String> {
    let mut taken: Vec<Option<&Value>> = vec![None; entries.len()];
    for value in values {
        let mut fitting = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if fits(value, entry)? {
                fitting.push(i);
            }
        }
        match fitting[..] {
            [] => return Err(format!("{value} is none of them")),
            [i] => match taken[i] {
                Some(_) => return Err(format!("{value} and another value are both {}", entries[i])),
                None => taken[i] = Some(value),
            },
            _ => return Err(format!("{value} fits more than one entry")),
        }
    }
    match taken.iter().position(Option::is_none) {
        Some(i) => Err(format!("no value is {} ({} values for {} entries)", entries[i], values.len(), entries.len())),
        None => Ok(()),
    }
}

/// Whether `value` fits a `set` entry: an object entry names fields the value must have (each
/// fitting in turn), anything else is compared or matched as a whole.
fn fits(value: &Value, entry: &Value) -> Result<bool, String> {
    match entry {
        Value::Object(fields) if !is_operator(entry) => {
            let Some(object) = value.as_object() else { return Ok(false) };
            for (name, want) in fields {
                match object.get(name) {
                    Some(v) if fits(v, want)? => {}
                    _ => return Ok(false),
                }
            }
            Ok(true)
        }
        _ => satisfies(value, entry),
    }
}

/// `{matches: …}`, `{contains: …}`, `{not: …}` or `{set: …}`.
fn is_operator(want: &Value) -> bool {
    ["matches", "contains", "not", "set"].iter().any(|name| operand(want, name).is_some())
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
    if operand(want, "set").is_some() {
        return Err("`set` is about all the values of a key, not inside another check".into());
    }
    if let Some(pattern) = operand(want, "matches") {
        let pattern = pattern.as_str().ok_or("`matches` takes a regular expression")?;
        let re = Regex::new(pattern).map_err(|e| format!("invalid regular expression {pattern:?}: {e}"))?;
        return Ok(value.as_str().is_some_and(|s| re.is_match(s)));
    }
    if let Some(other) = operand(want, "not") {
        return satisfies(value, other).map(|same| !same);
    }
    if let Some(part) = operand(want, "contains") {
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

    #[test]
    fn a_set_is_every_value_once_in_any_order() {
        let item = |id: &str, name: &str, first: &str| json!({"job": {"id": id, "status": "paused"}, "name": name, "first": first});
        let reply = |items: Vec<Value>| json!({"data": {"items": items}});
        let two = reply(vec![item("job-2", "n-02", "hi"), item("job-1", "n-01", "yo")]);
        let ids = |list: Value| expect(json!({"/data/items/*/job/id": {"set": list}}));
        assert_eq!(check(&two, &ids(json!(["job-1", "job-2"]))), Ok(()));
        // Missing, extra and repeated values each fail, although the count may be right.
        let err = check(&two, &ids(json!(["job-1", "job-2", "job-3"]))).unwrap_err();
        assert!(err.ends_with("no value is \"job-3\" (2 values for 3 entries)"), "{err}");
        let err = check(&two, &ids(json!(["job-1"]))).unwrap_err();
        assert!(err.ends_with("\"job-2\" is none of them"), "{err}");
        let twice = reply(vec![item("job-1", "n-01", "a"), item("job-1", "n-01", "b")]);
        let err = check(&twice, &ids(json!(["job-1", "job-2"]))).unwrap_err();
        assert!(err.contains("are both \"job-1\""), "{err}");
        // Object entries pin several fields of one item: the right pairs pass, swapped ones not.
        let pairs = |a: &str, b: &str| {
            expect(json!({"/data/items/*": {"set": [
                {"job": {"id": "job-1", "status": "paused"}, "name": a, "first": {"matches": "."}},
                {"job": {"id": "job-2", "status": "paused"}, "name": b, "first": {"matches": "."}},
            ]}}))
        };
        assert_eq!(check(&two, &pairs("n-01", "n-02")), Ok(()));
        assert!(check(&two, &pairs("n-02", "n-01")).unwrap_err().contains("is none of them"));
        let no_first = reply(vec![
            json!({"job": {"id": "job-1", "status": "paused"}, "name": "n-01"}),
            item("job-2", "n-02", "hi"),
        ]);
        assert!(check(&no_first, &pairs("n-01", "n-02")).is_err());
        let empty_first = reply(vec![item("job-1", "n-01", ""), item("job-2", "n-02", "hi")]);
        assert!(check(&empty_first, &pairs("n-01", "n-02")).is_err());
        // A wildcard that reaches nothing is the empty set.
        let none = reply(vec![]);
        assert_eq!(check(&none, &ids(json!([]))), Ok(()));
        assert!(check(&none, &ids(json!(["job-1"]))).unwrap_err().contains("no value is \"job-1\""));
        // Misuse is an error, not a pass.
        assert!(check(&two, &ids(json!("job-1"))).unwrap_err().contains("takes a list"));
        let nested = expect(json!({"/data/items/*/name": {"not": {"set": ["x"]}}}));
        assert!(check(&two, &nested).unwrap_err().contains("not inside another check"));
    }
}
