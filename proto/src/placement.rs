//! Where a sandbox stands in its run: its side, its pair and the run's attempt. The controller
//! decides it when it creates the sandbox and carries it as the container's labels and in the
//! agent's environment ([`crate::env`]); the agent says it back in its Hello, and the hub keeps
//! it with the sandbox's registration in the run directory. Nothing reads it back out of a
//! sandbox's name.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Side;
use crate::v1;

/// A sandbox's place in a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub side: Side,
    /// Which pair of the run, from 0.
    pub pair: u32,
    /// Which attempt of the run, from 1 (a resumed run's attempts follow).
    pub attempt: u32,
}

impl Placement {
    /// The environment the controller gives the agent: (variable, value).
    pub fn env(&self) -> [(&'static str, String); 3] {
        [
            (crate::env::SIDE, self.side.to_string()),
            (crate::env::PAIR, self.pair.to_string()),
            (crate::env::ATTEMPT, self.attempt.to_string()),
        ]
    }

    /// The placement the agent's environment gives (`var` reads a variable): none when no
    /// variable is set, an error naming the variable when one is missing or malformed.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Placement>, String> {
        let [side, pair, attempt] =
            [crate::env::SIDE, crate::env::PAIR, crate::env::ATTEMPT].map(|name| (name, var(name)));
        if side.1.is_none() && pair.1.is_none() && attempt.1.is_none() {
            return Ok(None);
        }
        let value = |(name, value): (&str, Option<String>)| value.ok_or_else(|| format!("{name} is not set"));
        let number = |(name, value): (&str, Option<String>)| {
            let text = value.ok_or_else(|| format!("{name} is not set"))?;
            let shown: String = text.chars().take(40).collect();
            text.parse::<u32>().map_err(|_| format!("{name}: expected a number, got {shown:?}"))
        };
        let side_name = value(side)?;
        let side = side_name.parse::<Side>().map_err(|e| format!("{}: {e}", crate::env::SIDE))?;
        Ok(Some(Placement { side, pair: number(pair)?, attempt: number(attempt)? }))
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of pair {}, attempt {}", self.side, self.pair, self.attempt)
    }
}

impl From<Side> for v1::Side {
    fn from(side: Side) -> v1::Side {
        match side {
            Side::Base => v1::Side::Base,
            Side::Head => v1::Side::Head,
        }
    }
}

impl From<Placement> for v1::Placement {
    fn from(p: Placement) -> v1::Placement {
        v1::Placement { side: v1::Side::from(p.side) as i32, pair: p.pair, attempt: p.attempt }
    }
}

/// A placement on the wire without a side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoSide(pub i32);

impl fmt::Display for NoSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a placement without a side ({})", self.0)
    }
}

impl std::error::Error for NoSide {}

impl TryFrom<&v1::Placement> for Placement {
    type Error = NoSide;

    fn try_from(p: &v1::Placement) -> Result<Placement, NoSide> {
        let side = match v1::Side::try_from(p.side) {
            Ok(v1::Side::Base) => Side::Base,
            Ok(v1::Side::Head) => Side::Head,
            Ok(v1::Side::Unspecified) | Err(_) => return Err(NoSide(p.side)),
        };
        Ok(Placement { side, pair: p.pair, attempt: p.attempt })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::Placement;
    use crate::{Side, v1};

    #[test]
    fn a_placement_travels_through_the_environment_and_the_wire() {
        let placed = Placement { side: Side::Head, pair: 2, attempt: 3 };
        let env: BTreeMap<&str, String> = placed.env().into_iter().collect();
        assert_eq!(
            env,
            BTreeMap::from([
                ("SANDBENCH_ATTEMPT", "3".into()),
                ("SANDBENCH_PAIR", "2".into()),
                ("SANDBENCH_SIDE", "head".into())
            ])
        );
        assert_eq!(Placement::from_env(|name| env.get(name).cloned()), Ok(Some(placed)));
        let wire = v1::Placement::from(placed);
        assert_eq!((wire.side, wire.pair, wire.attempt), (v1::Side::Head as i32, 2, 3));
        assert_eq!(Placement::try_from(&wire), Ok(placed));
        assert!(Placement::try_from(&v1::Placement { side: 0, pair: 0, attempt: 1 }).is_err());
        assert!(Placement::try_from(&v1::Placement { side: 7, pair: 0, attempt: 1 }).is_err());
        let json = serde_json::to_string(&placed).unwrap();
        assert_eq!(json, r#"{"side":"head","pair":2,"attempt":3}"#);
        assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), placed);
        assert_eq!(placed.to_string(), "head of pair 2, attempt 3");
    }

    #[test]
    fn a_missing_or_malformed_variable_is_named() {
        assert_eq!(Placement::from_env(|_| None), Ok(None));
        let with = |side: Option<&str>, pair: Option<&str>, attempt: Option<&str>| {
            Placement::from_env(move |name| match name {
                "SANDBENCH_SIDE" => side.map(String::from),
                "SANDBENCH_PAIR" => pair.map(String::from),
                _ => attempt.map(String::from),
            })
        };
        assert_eq!(with(Some("base"), Some("0"), None).unwrap_err(), "SANDBENCH_ATTEMPT is not set");
        assert_eq!(
            with(Some("left"), Some("0"), Some("1")).unwrap_err(),
            "SANDBENCH_SIDE: expected a side, base or head, got \"left\""
        );
        assert_eq!(
            with(Some("base"), Some("-1"), Some("1")).unwrap_err(),
            "SANDBENCH_PAIR: expected a number, got \"-1\""
        );
        assert_eq!(
            with(Some("base"), Some("0"), Some("1")),
            Ok(Some(Placement { side: Side::Base, pair: 0, attempt: 1 }))
        );
    }
}
