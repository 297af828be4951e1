//! Reading a JSON results file with the path of every value kept, so that the first thing that
//! does not parse is named where it is (`results[2].mean: expected a number, got "fast"`).

use serde_json::Value;

use crate::segment::quoted;

/// The whole document; serde_json bounds its nesting (128 levels).
pub fn document(input: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(input).map_err(|err| format!("not JSON: {err}"))
}

/// A value and its path, owned by the caller for the duration of a read.
#[derive(Debug)]
pub struct Node<'a> {
    pub value: &'a Value,
    pub path: String,
}

impl<'a> Node<'a> {
    pub fn root(value: &'a Value) -> Node<'a> {
        Node { value, path: String::new() }
    }

    fn child(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
    }

    /// The field `key` of this object, which must be there.
    pub fn field(&self, key: &str) -> Result<Node<'a>, String> {
        let object = self.object()?;
        match object.get(key) {
            Some(value) => Ok(Node { value, path: self.child(key) }),
            None => Err(format!("{}: missing{}", self.child(key), found_keys(object))),
        }
    }

    /// The field `key` of this object when it is there and not null.
    pub fn optional(&self, key: &str) -> Result<Option<Node<'a>>, String> {
        let object = self.object()?;
        Ok(object.get(key).filter(|v| !v.is_null()).map(|value| Node { value, path: self.child(key) }))
    }

    pub fn object(&self) -> Result<&'a serde_json::Map<String, Value>, String> {
        self.value.as_object().ok_or_else(|| self.expected("an object"))
    }

    /// The elements of this array, each with its path.
    pub fn elements(&self) -> Result<Vec<Node<'a>>, String> {
        let array = self.value.as_array().ok_or_else(|| self.expected("an array"))?;
        Ok(array.iter().enumerate().map(|(i, value)| Node { value, path: format!("{}[{i}]", self.path) }).collect())
    }

    /// The fields of this object, each with its path.
    pub fn entries(&self) -> Result<Vec<(&'a str, Node<'a>)>, String> {
        Ok(self
            .object()?
            .iter()
            .map(|(key, value)| (key.as_str(), Node { value, path: format!("{}[{}]", self.path, quoted(key)) }))
            .collect())
    }

    pub fn string(&self) -> Result<&'a str, String> {
        self.value.as_str().ok_or_else(|| self.expected("a string"))
    }

    /// A finite, non-negative number (a time, a rate, a count).
    pub fn number(&self) -> Result<f64, String> {
        match self.value.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
            Some(x) => Err(format!("{}: {x} is not a finite, non-negative number", self.path)),
            None => Err(self.expected("a number")),
        }
    }

    /// `self.field(key)?.number()`.
    pub fn number_at(&self, key: &str) -> Result<f64, String> {
        self.field(key)?.number()
    }

    /// The number in `key` when it is there, not null and a finite, non-negative number; None
    /// otherwise (spread figures are details: one a framework leaves out loses nothing).
    pub fn figure(&self, key: &str) -> Option<f64> {
        self.value.get(key).and_then(Value::as_f64).filter(|x| x.is_finite() && *x >= 0.0)
    }

    pub fn expected(&self, what: &str) -> String {
        let path = if self.path.is_empty() { "the document" } else { &self.path };
        format!("{path}: expected {what}, got {}", describe(self.value))
    }
}

/// A value as an error shows it: its kind, and short scalars themselves.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quoted(s),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".to_string(),
    }
}

/// The first keys an object has, for a missing field's message.
fn found_keys(object: &serde_json::Map<String, Value>) -> String {
    if object.is_empty() {
        return " (the object is empty)".to_string();
    }
    let keys: Vec<String> = object.keys().take(5).map(|k| quoted(k)).collect();
    let more = if object.len() > 5 { ", …" } else { "" };
    format!(" (it has {}{more})", keys.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path_and_what_was_found() {
        let v = document(br#"{"results": [{"mean": "fast", "x": -1}], "other": 1}"#).unwrap();
        let root = Node::root(&v);
        let first = &root.field("results").unwrap().elements().unwrap()[0];
        assert_eq!(first.number_at("mean").unwrap_err(), "results[0].mean: expected a number, got \"fast\"");
        assert_eq!(first.number_at("x").unwrap_err(), "results[0].x: -1 is not a finite, non-negative number");
        assert_eq!(root.field("benchmarks").unwrap_err(), "benchmarks: missing (it has \"other\", \"results\")");
        assert_eq!(root.field("other").unwrap().elements().err().unwrap(), "other: expected an array, got 1");
        assert_eq!(Node::root(&Value::Null).field("a").unwrap_err(), "the document: expected an object, got null");
        assert!(document(b"{oops").unwrap_err().starts_with("not JSON: key must be a string at line 1 column 2"));
        assert_eq!(first.figure("x"), None);
    }
}
