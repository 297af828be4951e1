//! Reply checks as the spec writes them — a step's `expect`, a socket's `hello`, `reply` and
//! `unwrap_when` — checked here, so that a malformed one is an error of `sandbench check` (file,
//! line, field) and not a sample failed in the sandbox. The agent evaluates them
//! (`sandbox-agent` `probes::expect`, which documents the language): a key is a field or a JSON
//! pointer (`*` for every element, a trailing `#` for a length), its expectation a value or one of
//! `{ matches = "regex" }`, `{ contains = x }`, `{ not = x }` and `{ set = [entries] }`.

use serde_json::{Map, Value};

use super::raw::RawStep;
use super::validator::{Validator, json_map};

impl Validator<'_> {
    /// A step's `expect`.
    pub(super) fn step_expect(&mut self, r: &RawStep, field: &str) -> Map<String, Value> {
        let at = r.expect.as_ref().map_or(r.kind.span().start, |e| e.span().start);
        self.expectations(r.expect.as_ref().map(|e| e.get_ref()), at, &format!("{field}.expect"))
    }

    /// A reply check's table as JSON, each expectation checked. `at` is where the table starts
    /// in the file; an error names the line of its key there.
    pub(super) fn expectations(&mut self, table: Option<&toml::Table>, at: usize, field: &str) -> Map<String, Value> {
        let map = json_map(table);
        for (key, want) in &map {
            if let Err(why) = expectation(want, true) {
                let line = match self.text.get(at..).and_then(|rest| rest.find(key.as_str())) {
                    Some(offset) => self.line(at + offset),
                    None => self.line(at),
                };
                self.error_at(line, &format!("{field}.{key}"), why);
            }
        }
        map
    }
}

/// The one operand of `{ name = operand }`.
fn operand<'a>(want: &'a Value, name: &str) -> Option<&'a Value> {
    want.as_object().filter(|o| o.len() == 1).and_then(|o| o.get(name))
}

fn is_operator(want: &Value) -> bool {
    ["matches", "contains", "not", "set"].iter().any(|name| operand(want, name).is_some())
}

/// Checks one expectation; `top` when it is a key's own (where a `set` may stand).
fn expectation(want: &Value, top: bool) -> Result<(), String> {
    if let Some(pattern) = operand(want, "matches") {
        let pattern = pattern.as_str().ok_or("`matches` takes a regular expression (a string)")?;
        regex_lite::Regex::new(pattern).map_err(|e| format!("not a valid regular expression {pattern:?}: {e}"))?;
    } else if let Some(inner) = operand(want, "not") {
        expectation(inner, false)?;
    } else if let Some(entries) = operand(want, "set") {
        if !top {
            return Err("`set` is about all the values of a key; it cannot stand inside another check".into());
        }
        let entries = entries.as_array().ok_or("`set` takes a list of entries")?;
        entries.iter().try_for_each(entry)?;
        for (j, b) in entries.iter().enumerate() {
            if let Some(i) = entries[..j].iter().position(|a| !distinct(a, b)) {
                return Err(format!(
                    "entries {} and {} of the set ({} and {b}) could be the same value; every entry needs a \
                     field whose plain value differs from every other entry's",
                    i + 1,
                    j + 1,
                    entries[i]
                ));
            }
        }
    }
    Ok(())
}

/// Checks a `set` entry: an object names fields (each an entry), anything else is an expectation.
fn entry(e: &Value) -> Result<(), String> {
    match e {
        Value::Object(fields) if !is_operator(e) => fields.values().try_for_each(entry),
        _ => expectation(e, false),
    }
}

/// Whether no value can fit both entries: plain values that differ, an object entry against a
/// plain one (it fits objects only), or two object entries that differ at a field both pin. An
/// operator (`matches`, …) tells nothing apart.
fn distinct(a: &Value, b: &Value) -> bool {
    match (a, b) {
        _ if is_operator(a) || is_operator(b) => false,
        (Value::Object(x), Value::Object(y)) => x.iter().any(|(k, v)| y.get(k).is_some_and(|w| distinct(v, w))),
        (Value::Object(_), _) | (_, Value::Object(_)) => true,
        // 3 and 3.0 are the same number.
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x != y,
            _ => a != b,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn operators_are_checked_and_set_entries_must_differ() {
        for ok in [
            json!(1),
            json!({"matches": "^a$"}),
            json!({"not": {"matches": "b"}}),
            json!({"contains": "x"}),
            json!({"set": []}),
            json!({"set": ["a", "b", 3]}),
            json!({"set": [{"job": {"id": "1"}, "name": "a"}, {"job": {"id": "2"}, "name": {"matches": "."}}]}),
            json!({"set": [{"matches": "only one"}]}),
            json!({"set": [{"id": 1}, "plain"]}),
        ] {
            assert_eq!(expectation(&ok, true), Ok(()), "{ok}");
        }
        let err = |want: Value| expectation(&want, true).unwrap_err();
        assert!(err(json!({"matches": "("})).starts_with("not a valid regular expression \"(\""));
        assert!(err(json!({"matches": 1})).contains("takes a regular expression"));
        assert!(err(json!({"not": {"matches": "["}})).starts_with("not a valid regular expression"));
        assert!(err(json!({"set": "a"})).contains("takes a list"));
        assert!(err(json!({"not": {"set": ["a"]}})).contains("cannot stand inside another check"));
        assert!(err(json!({"set": [{"id": {"set": [1]}}]})).contains("cannot stand inside another check"));
        assert!(err(json!({"set": [{"name": {"matches": ")"}}]})).starts_with("not a valid regular expression"));
        assert!(err(json!({"set": ["a", "b", "a"]})).starts_with("entries 1 and 3 of the set (\"a\" and \"a\")"));
        assert!(err(json!({"set": [3, 3.0]})).starts_with("entries 1 and 2"));
        // Object entries that agree wherever both pin a field could fit one value.
        assert!(err(json!({"set": [{"id": 1}, {"id": 1, "name": "b"}]})).starts_with("entries 1 and 2"));
        assert!(err(json!({"set": [{"id": 1}, {"name": "b"}]})).starts_with("entries 1 and 2"));
        assert!(err(json!({"set": [{"matches": "a"}, "b"]})).starts_with("entries 1 and 2"));
    }
}
