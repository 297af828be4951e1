//! Where a request of the bridge goes: the npm registry at the root, the Python index under
//! [`BRIDGE_PYPI`], an allowed host under [`BRIDGE_HOST`]; anything else is refused with the
//! reason the product sees. Pure.

use sandbench_proto::plan::{BRIDGE_HOST, BRIDGE_PYPI};

use super::upstream::Upstreams;

/// The longest request target forwarded.
pub const MAX_TARGET_BYTES: usize = 8 * 1024;

/// Which upstream a request goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Npm,
    Pypi,
    Host,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub kind: Kind,
    /// The upstream URL, https (or http on the loopback), on an allowed host.
    pub url: String,
}

impl Route {
    /// Whether the answer never changes (a tarball or a file): kept in the cache for good;
    /// metadata (packuments, index pages) only for the metadata lifetime.
    pub fn immutable(&self) -> bool {
        match self.kind {
            Kind::Npm => self.url.contains("/-/") && self.url.ends_with(".tgz"),
            Kind::Host => true,
            Kind::Pypi => false,
        }
    }
}

/// The route of `target` (path and query, as the client sent it), or why it is refused.
pub fn route(upstreams: &Upstreams, target: &str) -> Result<Route, String> {
    check_target(target)?;
    if let Some(rest) = target.strip_prefix(BRIDGE_PYPI) {
        let base = upstreams.pypi.as_ref().ok_or("no Python package index is configured for the registry bridge")?;
        return Ok(Route { kind: Kind::Pypi, url: format!("{base}{rest}") });
    }
    if let Some(rest) = target.strip_prefix(BRIDGE_HOST) {
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !upstreams.hosts.iter().any(|h| h == host) {
            return Err(format!("host {host:?} is not an allowed registry (allowed: {})", upstreams.hosts.join(", ")));
        }
        return Ok(Route { kind: Kind::Host, url: format!("https://{host}/{path}") });
    }
    if target.starts_with("/_/") {
        return Err(format!("no registry is served under {target:?}"));
    }
    let base = upstreams.npm.as_ref().ok_or("no npm registry is configured for the registry bridge")?;
    Ok(Route { kind: Kind::Npm, url: format!("{base}{}", &target[1..]) })
}

/// A target that is a plain absolute path: bounded, printable, no dot segments (raw or
/// percent-encoded), no backslash, no empty segment, no fragment, no absolute URL.
fn check_target(target: &str) -> Result<(), String> {
    if target.len() > MAX_TARGET_BYTES {
        return Err(format!("the request target is longer than {MAX_TARGET_BYTES} bytes"));
    }
    if !target.starts_with('/') || target.starts_with("//") {
        return Err("the registry bridge takes paths only (a proxy request or another host is refused)".into());
    }
    if !target.bytes().all(|b| b.is_ascii_graphic()) || target.contains(['\\', '#']) {
        return Err("the request target has a character the bridge does not forward".into());
    }
    let path = target.split('?').next().unwrap_or_default();
    let decoded = sandbench_proto::percent_decode(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .ok_or("the request target has a malformed percent-escape")?;
    for segment in decoded.split(['/', '\\']).skip(1) {
        if segment == "." || segment == ".." {
            return Err("a dot segment in the path (`.` or `..`) is refused".into());
        }
    }
    if path[1..].contains("//") {
        return Err("an empty segment in the path is refused".into());
    }
    Ok(())
}

/// A Python index page with its links to allowed hosts made paths of the bridge (pip and uv
/// resolve them against the page's URL, the bridge).
pub fn rewrite_index(body: &str, upstreams: &Upstreams) -> String {
    let mut out = body.to_string();
    for host in &upstreams.hosts {
        out = out.replace(&format!("https://{host}/"), &format!("{BRIDGE_HOST}{host}/"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstreams() -> Upstreams {
        Upstreams {
            npm: Some("https://registry.npmjs.org/".into()),
            pypi: Some("https://pypi.org/simple/".into()),
            hosts: vec!["files.pythonhosted.org".into()],
            notes: vec![],
        }
    }

    #[test]
    fn routes_the_three_kinds() {
        let u = upstreams();
        let npm = route(&u, "/@types%2fnode").unwrap();
        assert_eq!((npm.kind.clone(), npm.url.as_str()), (Kind::Npm, "https://registry.npmjs.org/@types%2fnode"));
        assert!(!npm.immutable());
        assert!(route(&u, "/is-number/-/is-number-7.0.0.tgz").unwrap().immutable());
        assert_eq!(route(&u, "/_/pypi/six/").unwrap().url, "https://pypi.org/simple/six/");
        let file = route(&u, "/_/h/files.pythonhosted.org/packages/ab/six.whl").unwrap();
        assert_eq!((file.url.as_str(), file.immutable()), ("https://files.pythonhosted.org/packages/ab/six.whl", true));
    }

    #[test]
    fn refuses_other_hosts_and_path_tricks() {
        let u = upstreams();
        for (target, why) in [
            ("/_/h/evil.example/x", "not an allowed registry"),
            ("/_/h/files.pythonhosted.org.evil.example/x", "not an allowed registry"),
            ("http://evil.example/x", "paths only"),
            ("//evil.example/x", "paths only"),
            ("/../etc/passwd", "dot segment"),
            ("/a/%2e%2e/%2E%2E/x", "dot segment"),
            ("/_/pypi/..%2f..%2fx", "dot segment"),
            ("/a\\..\\b", "character"),
            ("/a b", "character"),
            ("/a%zz", "percent-escape"),
            ("/a//b", "empty segment"),
            ("/_/other/x", "no registry is served"),
        ] {
            let err = route(&u, target).unwrap_err();
            assert!(err.contains(why), "{target}: {err}");
        }
        assert!(route(&u, &format!("/{}", "a".repeat(MAX_TARGET_BYTES))).unwrap_err().contains("longer"));
        let none = Upstreams { npm: None, pypi: None, hosts: vec![], notes: vec![] };
        assert!(route(&none, "/lodash").unwrap_err().contains("no npm registry"));
    }

    #[test]
    fn index_links_to_allowed_hosts_become_bridge_paths() {
        let page = r#"<a href="https://files.pythonhosted.org/packages/x/six.whl#sha256=ab">six</a> <a href="https://evil.example/x">"#;
        let out = rewrite_index(page, &upstreams());
        assert!(out.contains(r#"href="/_/h/files.pythonhosted.org/packages/x/six.whl#sha256=ab""#), "{out}");
        assert!(out.contains("https://evil.example/x"));
    }
}
