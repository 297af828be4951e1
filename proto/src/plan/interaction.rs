//! Plan types of interactive scenarios: a daemon reached over a Unix socket, counts read off a
//! terminal screen, and the names of the keys a scenario may press.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How a socket scenario reaches its daemon and tells replies from other messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketSpec {
    /// The socket's path; `{uid}` and `{trial}` are replaced (as in the scenario's command).
    pub path: String,
    /// How long to keep trying to connect (every 20 ms) while the daemon starts.
    pub connect_timeout_s: f64,
    /// Fields the first message (the daemon's hello) must have; keys may be JSON pointers
    /// (`/protocol/version`).
    #[serde(default)]
    pub hello: Map<String, Value>,
    /// Each request is wrapped in this object, where the string `"$request"` stands for the
    /// request (its id added), `"$id"` for the id and `"$hello/<pointer>"` for a value of the
    /// hello. None sends requests bare.
    #[serde(default)]
    pub envelope: Option<Value>,
    /// A message is a reply when it has these fields and its `id_field` is a request's id;
    /// anything else (events) is only kept in the transcript.
    #[serde(default)]
    pub reply: Map<String, Value>,
    pub id_field: String,
    /// A message with these fields (non-empty) is replaced by its field `unwrap_field` before it
    /// is told apart (events that carry a reply).
    #[serde(default)]
    pub unwrap_when: Map<String, Value>,
    #[serde(default)]
    pub unwrap_field: Option<String>,
    /// Longest message line accepted.
    pub max_line_bytes: u64,
}

/// A number captured from the screen that must reach `at_least` and then stay the same for
/// `stable_s` (a list still filling up is not done).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountRule {
    /// The capture group holding the number (1 is the first).
    pub group: u32,
    pub at_least: u64,
    pub stable_s: f64,
    /// How long to let the screen settle between readings.
    pub poll_s: f64,
}

/// Key names and the bytes a terminal sends for them (xterm sequences, normal cursor mode).
pub mod keys {
    const NAMED: &[(&str, &[u8])] = &[
        ("up", b"\x1b[A"),
        ("down", b"\x1b[B"),
        ("right", b"\x1b[C"),
        ("left", b"\x1b[D"),
        ("alt-up", b"\x1b[1;3A"),
        ("alt-down", b"\x1b[1;3B"),
        ("alt-right", b"\x1b[1;3C"),
        ("alt-left", b"\x1b[1;3D"),
        ("shift-tab", b"\x1b[Z"),
        ("home", b"\x1b[H"),
        ("end", b"\x1b[F"),
        ("page-up", b"\x1b[5~"),
        ("page-down", b"\x1b[6~"),
        ("delete", b"\x1b[3~"),
        ("enter", b"\r"),
        ("tab", b"\t"),
        ("escape", b"\x1b"),
        ("backspace", b"\x7f"),
        ("space", b" "),
    ];

    /// Every key name, for error messages (`ctrl-a` … `ctrl-z` besides).
    pub fn names() -> Vec<&'static str> {
        NAMED.iter().map(|k| k.0).chain(["ctrl-a … ctrl-z"]).collect()
    }

    /// The bytes of one key.
    pub fn bytes(name: &str) -> Option<Vec<u8>> {
        if let Some(letter) = name.strip_prefix("ctrl-") {
            return match letter.as_bytes() {
                [c @ b'a'..=b'z'] => Some(vec![c - b'a' + 1]),
                _ => None,
            };
        }
        NAMED.iter().find(|k| k.0 == name).map(|k| k.1.to_vec())
    }

    /// A key with an optional repeat count, `backspace*24`: its bytes and the count (1–1000).
    pub fn parse(spec: &str) -> Result<(Vec<u8>, u32), String> {
        let (name, times) = match spec.split_once('*') {
            Some((name, n)) => match n.trim().parse::<u32>() {
                Ok(n) if (1..=1000).contains(&n) => (name.trim(), n),
                _ => return Err(format!("expected a repeat count from 1 to 1000 after '*' in {spec:?}")),
            },
            None => (spec.trim(), 1),
        };
        match bytes(name) {
            Some(bytes) => Ok((bytes, times)),
            None => Err(format!("unknown key {name:?}; keys are {}", names().join(", "))),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn keys_have_their_terminal_bytes() {
            assert_eq!(parse("left").unwrap(), (b"\x1b[D".to_vec(), 1));
            assert_eq!(parse("alt-right").unwrap(), (b"\x1b[1;3C".to_vec(), 1));
            assert_eq!(parse("backspace*24").unwrap(), (vec![0x7f], 24));
            assert_eq!(parse("ctrl-c").unwrap(), (vec![3], 1));
            assert!(parse("ctrl-1").is_err());
            assert!(parse("backspace*0").unwrap_err().contains("repeat count"));
            assert!(parse("hyper-x").unwrap_err().starts_with("unknown key \"hyper-x\""));
        }
    }
}
