//! Which distribution release a system is, from its `/etc/os-release`.

use std::fmt;

/// A distribution release: `debian` `bookworm`, `ubuntu` `noble`, `alpine` `3.20.3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `ID`.
    pub id: String,
    /// `VERSION_CODENAME`, else `VERSION_ID` (empty when neither is given, as on Debian sid).
    pub release: String,
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.release.is_empty() {
            true => write!(f, "{} (no release named)", self.id),
            false => write!(f, "{} {}", self.id, self.release),
        }
    }
}

impl Release {
    /// Whether packages built for `other` install here: same distribution, same named release.
    pub fn same(&self, other: &Release) -> bool {
        self.id == other.id && !self.release.is_empty() && self.release == other.release
    }
}

/// Reads an os-release file (`KEY=value` lines, values optionally quoted); None when it names
/// no distribution (`ID`).
pub fn parse(text: &str) -> Option<Release> {
    let value = |key: &str| {
        text.lines().find_map(|line| {
            let (k, v) = line.trim().split_once('=')?;
            (k.trim() == key).then(|| unquote(v.trim()))
        })
    };
    let id = value("ID").filter(|id| !id.is_empty())?;
    let release =
        value("VERSION_CODENAME").filter(|c| !c.is_empty()).or_else(|| value("VERSION_ID")).unwrap_or_default();
    Some(Release { id, release })
}

fn unquote(value: &str) -> String {
    let inner =
        ['"', '\''].iter().find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q))).unwrap_or(value);
    inner.replace("\\\"", "\"").replace("\\\\", "\\")
}

/// The release this machine runs.
pub fn host() -> Result<Release, String> {
    let text = ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .ok_or("the host has no /etc/os-release")?;
    parse(&text).ok_or_else(|| "the host's /etc/os-release names no distribution (ID)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_names_the_distribution_and_release() {
        let bookworm =
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n";
        let release = parse(bookworm).unwrap();
        assert_eq!(release, Release { id: "debian".into(), release: "bookworm".into() });
        assert_eq!(release.to_string(), "debian bookworm");
        let alpine = parse("NAME=\"Alpine Linux\"\nID='alpine'\nVERSION_ID=3.20.3\n").unwrap();
        assert_eq!(alpine, Release { id: "alpine".into(), release: "3.20.3".into() });
        let trixie = parse("ID=debian\nVERSION_CODENAME=trixie\n").unwrap();
        assert!(!release.same(&trixie) && release.same(&release.clone()));
        let sid = parse("ID=debian\n").unwrap();
        assert!(!sid.same(&sid.clone()), "an unnamed release is never known to match");
        assert_eq!(sid.to_string(), "debian (no release named)");
        assert_eq!(parse("NAME=x\n# ID=debian\n"), None);
    }
}
