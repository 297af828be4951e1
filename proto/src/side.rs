//! The two sides of a comparison. On the wire, in labels, in the run directory and in
//! `report.json` a side is its lowercase name, `base` or `head`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which revision a sandbox, a trial or a sample belongs to. Ordered base before head, as the
/// names sort, so maps keyed by side keep the order they had when keyed by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The revision compared against (usually main).
    Base,
    /// The revision under test (usually the pull request).
    Head,
}

impl Side {
    /// Both sides, base first.
    pub const BOTH: [Side; 2] = [Side::Base, Side::Head];

    /// The side's name: `base` or `head`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Head => "head",
        }
    }

    /// The other side.
    pub const fn other(self) -> Side {
        match self {
            Side::Base => Side::Head,
            Side::Head => Side::Base,
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not `base` or `head`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSide(pub String);

impl fmt::Display for UnknownSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected a side, base or head, got {:?}", self.0)
    }
}

impl std::error::Error for UnknownSide {}

impl FromStr for Side {
    type Err = UnknownSide;

    fn from_str(name: &str) -> Result<Side, UnknownSide> {
        Side::BOTH.into_iter().find(|side| side.as_str() == name).ok_or_else(|| UnknownSide(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::Side;

    #[test]
    fn a_side_reads_and_writes_as_its_lowercase_name() {
        for side in Side::BOTH {
            let name = side.as_str();
            assert_eq!(side.to_string(), name);
            assert_eq!(name.parse::<Side>(), Ok(side));
            assert_eq!(serde_json::to_string(&side).unwrap(), format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Side>(&format!("\"{name}\"")).unwrap(), side);
        }
        assert_eq!((Side::Base.as_str(), Side::Head.as_str()), ("base", "head"));
        assert_eq!(Side::Base.other(), Side::Head);
        let err = "Base".parse::<Side>().unwrap_err();
        assert_eq!(err.to_string(), "expected a side, base or head, got \"Base\"");
        assert!(serde_json::from_str::<Side>("\"left\"").is_err());
        // Sorted as the names sort.
        assert!(Side::Base < Side::Head && "base" < "head");
    }
}
