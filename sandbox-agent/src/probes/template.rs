//! Request templates of `request` and `batch` steps: `{{prev.<dotted path>}}` is a field of the
//! previous reply, `{{i}}` the request's index within its step, `{{trial}}` the trial. A string
//! that is exactly one template takes the value with its JSON type (a number stays a number);
//! otherwise each template is interpolated as text.

use serde_json::{Map, Value};

/// What templates may name.
pub struct Bindings<'a> {
    /// The previous reply received, and its id (for errors).
    pub prev: Option<&'a Value>,
    pub prev_id: &'a str,
    pub i: u64,
    pub trial: u32,
}

/// `template` with every `{{…}}` of its strings (keys left as they are) replaced.
pub fn render(template: &Value, b: &Bindings) -> Result<Value, String> {
    Ok(match template {
        Value::String(s) => render_string(s, b)?,
        Value::Array(items) => Value::Array(items.iter().map(|v| render(v, b)).collect::<Result<_, _>>()?),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                out.insert(k.clone(), render(v, b)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

fn render_string(s: &str, b: &Bindings) -> Result<Value, String> {
    if let Some(name) = s.strip_prefix("{{").and_then(|r| r.strip_suffix("}}"))
        && !name.contains("{{")
        && !name.contains("}}")
    {
        return lookup(name.trim(), b);
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| format!("unclosed template in {s:?}"))?;
        match lookup(after[..end].trim(), b)? {
            Value::String(text) => out.push_str(&text),
            other => out.push_str(&other.to_string()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

fn lookup(name: &str, b: &Bindings) -> Result<Value, String> {
    match name {
        "i" => return Ok(Value::from(b.i)),
        "trial" => return Ok(Value::from(b.trial)),
        _ => {}
    }
    let Some(path) = name.strip_prefix("prev.") else {
        return Err(format!(
            "unknown template {{{{{name}}}}}: expected {{{{prev.FIELD}}}}, {{{{i}}}} or {{{{trial}}}}"
        ));
    };
    let Some(prev) = b.prev else {
        return Err(format!("{{{{{name}}}}} names the previous reply, but no reply came before this request"));
    };
    let mut at = prev;
    for segment in path.split('.') {
        at = match at {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|n| items.get(n)),
            _ => None,
        }
        .ok_or_else(|| format!("the previous reply (id {}) has no field {path}", b.prev_id))?;
    }
    Ok(at.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_whole_template_keeps_its_type_and_a_partial_one_is_text() {
        let prev = json!({"requestId": "r7", "stateGeneration": 41, "state": {"arms": [3, 4]}});
        let b = Bindings { prev: Some(&prev), prev_id: "r7", i: 5, trial: 2 };
        let template = json!({
            "requestId": "decide-{{trial}}-{{ i }}",
            "generation": "{{prev.stateGeneration}}",
            "arm": "{{prev.state.arms.1}}",
            "note": "after {{prev.requestId}} at {{prev.stateGeneration}}",
            "nested": [{"i": "{{i}}"}],
            "plain": 3,
        });
        assert_eq!(
            render(&template, &b).unwrap(),
            json!({
                "requestId": "decide-2-5",
                "generation": 41,
                "arm": 4,
                "note": "after r7 at 41",
                "nested": [{"i": 5}],
                "plain": 3,
            })
        );
    }

    #[test]
    fn a_missing_field_names_it_and_the_reply() {
        let prev = json!({"requestId": "r7"});
        let b = Bindings { prev: Some(&prev), prev_id: "r7", i: 0, trial: 0 };
        assert_eq!(
            render(&json!({"g": "{{prev.stateGeneration}}"}), &b).unwrap_err(),
            "the previous reply (id r7) has no field stateGeneration"
        );
        let none = Bindings { prev: None, prev_id: "", i: 0, trial: 0 };
        assert!(render(&json!("{{prev.x}}"), &none).unwrap_err().contains("no reply came before"));
        assert!(render(&json!("{{next}}"), &b).unwrap_err().starts_with("unknown template {{next}}"));
        assert!(render(&json!("a {{i"), &b).unwrap_err().starts_with("unclosed template"));
    }
}
