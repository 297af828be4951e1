//! Where a request of the bridge goes: the npm registry at the root, the Python index under
//! [`BRIDGE_PYPI`], an allowed host under [`BRIDGE_HOST`] — each at its registry paths only
//! (packuments and tarballs, project pages, distribution files); anything else is refused with
//! the reason the product sees, without going upstream. Pure.

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

/// The route of `target` (path and query, as the client sent it), or why it is refused. Only
/// registry paths pass ([`npm_path`], [`index_path`], [`file_path`]): an allowed host is not
/// reachable at any other path.
pub fn route(upstreams: &Upstreams, target: &str) -> Result<Route, String> {
    check_target(target)?;
    if target.contains('?') {
        return Err("a query is refused: no registry path the bridge serves takes one".into());
    }
    if let Some(rest) = target.strip_prefix(BRIDGE_PYPI) {
        let base = upstreams.pypi.as_ref().ok_or("no Python package index is configured for the registry bridge")?;
        index_path(rest)?;
        return Ok(Route { kind: Kind::Pypi, url: format!("{base}{rest}") });
    }
    if let Some(rest) = target.strip_prefix(BRIDGE_HOST) {
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !upstreams.hosts.iter().any(|h| h == host) {
            return Err(format!("host {host:?} is not an allowed registry (allowed: {})", upstreams.hosts.join(", ")));
        }
        file_path(path)?;
        return Ok(Route { kind: Kind::Host, url: format!("https://{host}/{path}") });
    }
    if target.starts_with("/_/") {
        return Err(format!("no registry is served under {target:?}"));
    }
    let base = upstreams.npm.as_ref().ok_or("no npm registry is configured for the registry bridge")?;
    npm_path(&target[1..])?;
    Ok(Route { kind: Kind::Npm, url: format!("{base}{}", &target[1..]) })
}

/// The longest npm package name (and scope), as npm's own rules have it.
const MAX_NPM_NAME: usize = 214;
/// The longest file name the bridge takes for a tarball or a distribution file.
const MAX_FILE_NAME: usize = 255;
/// The longest path on a files host, and its most segments.
const MAX_FILE_PATH: usize = 1024;
const MAX_FILE_SEGMENTS: usize = 16;
/// What a Python distribution file's name ends with (a PEP 658 `.metadata` may follow).
const DISTRIBUTIONS: [&str; 7] = [".whl", ".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz", ".egg"];

/// An npm package name or scope: npm's characters (legacy names keep `~!'()*` and capitals), not
/// starting with `.` or `_`, at most 214 bytes.
fn npm_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NPM_NAME
        && !name.starts_with(['.', '_'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~!'()*".contains(&b))
}

/// A file name of a registry's: plain characters (`%` escapes allowed), at most 255 bytes.
fn file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FILE_NAME
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+!%".contains(&b))
}

/// An npm registry path (without its leading `/`): a packument, `NAME`, `@SCOPE/NAME` or
/// `@SCOPE%2fNAME`, or its tarball, `PACKAGE/-/FILE.tgz`.
pub fn npm_path(path: &str) -> Result<(), String> {
    let (package, file) = match path.split_once("/-/") {
        Some((package, file)) => (package, Some(file)),
        None => (path, None),
    };
    let package_ok = match package.strip_prefix('@') {
        Some(scoped) => {
            let split = scoped.split_once('/').or_else(|| {
                let at = scoped.to_ascii_lowercase().find("%2f")?;
                Some((&scoped[..at], &scoped[at + 3..]))
            });
            split.is_some_and(|(scope, name)| npm_name(scope) && npm_name(name))
        }
        None => npm_name(package),
    };
    let file_ok = file.is_none_or(|f| f.ends_with(".tgz") && file_name(f));
    if package_ok && file_ok {
        Ok(())
    } else {
        Err("not an npm registry path (a package, /NAME or /@SCOPE/NAME, or its tarball, /NAME/-/FILE.tgz)".into())
    }
}

/// A path of a Python simple index (after its base): a project's page, `PROJECT/`.
pub fn index_path(path: &str) -> Result<(), String> {
    let project = path.strip_suffix('/').unwrap_or(path);
    let ok = !project.is_empty()
        && project.len() <= MAX_NPM_NAME
        && project.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if ok { Ok(()) } else { Err("not a Python index path (a project's page, /_/pypi/PROJECT/)".into()) }
}

/// A path on an allowed files host: a distribution file (a wheel, an sdist, or its PEP 658
/// metadata) in plain folders.
pub fn file_path(path: &str) -> Result<(), String> {
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.last().copied().unwrap_or_default();
    let named = last.strip_suffix(".metadata").unwrap_or(last);
    let ok = path.len() <= MAX_FILE_PATH
        && segments.len() <= MAX_FILE_SEGMENTS
        && segments.iter().all(|s| file_name(s))
        && DISTRIBUTIONS.iter().any(|ext| named.ends_with(ext));
    if ok {
        Ok(())
    } else {
        Err("not a distribution file's path (a wheel or an sdist, or its .metadata) on an allowed host".into())
    }
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
    let mut rewriter = IndexRewriter::new(upstreams);
    let mut out = rewriter.push(body.as_bytes());
    out.extend(rewriter.finish());
    String::from_utf8_lossy(&out).into_owned()
}

/// [`rewrite_index`] a chunk at a time, as the page comes from the index: never more of it in
/// memory than a chunk and the longest link prefix.
pub struct IndexRewriter {
    /// `https://HOST/` and what it becomes, per allowed host.
    links: Vec<(Vec<u8>, Vec<u8>)>,
    longest: usize,
    /// The end of the last chunk, which may hold the start of a link.
    carry: Vec<u8>,
}

impl IndexRewriter {
    pub fn new(upstreams: &Upstreams) -> IndexRewriter {
        let links: Vec<(Vec<u8>, Vec<u8>)> = upstreams
            .hosts
            .iter()
            .map(|host| (format!("https://{host}/").into_bytes(), format!("{BRIDGE_HOST}{host}/").into_bytes()))
            .collect();
        let longest = links.iter().map(|(from, _)| from.len()).max().unwrap_or(0);
        IndexRewriter { links, longest, carry: Vec::new() }
    }

    /// The rewritten bytes of `chunk` that are final (a link's start at its end waits for more).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut text = std::mem::take(&mut self.carry);
        text.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(text.len());
        let mut at = 0;
        // Where each link occurs next, looked for again only once it is passed.
        let mut next: Vec<Option<usize>> = self.links.iter().map(|(from, _)| find(&text, from)).collect();
        while let Some((k, i)) = next.iter().enumerate().filter_map(|(k, i)| i.map(|i| (k, i))).min_by_key(|(_, i)| *i)
        {
            let (from, to) = &self.links[k];
            out.extend_from_slice(&text[at..i]);
            out.extend_from_slice(to);
            at = i + from.len();
            for (k, i) in next.iter_mut().enumerate() {
                if i.is_some_and(|i| i < at) {
                    *i = find(&text[at..], &self.links[k].0).map(|j| at + j);
                }
            }
        }
        // No link starts before `keep`; from there a link may go on in the next chunk.
        let keep = text.len().saturating_sub(self.longest.saturating_sub(1)).max(at);
        out.extend_from_slice(&text[at..keep]);
        self.carry = text[keep..].to_vec();
        out
    }

    /// What is left at the page's end.
    pub fn finish(self) -> Vec<u8> {
        self.carry
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
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
    fn only_registry_paths_of_an_allowed_host_pass() {
        let u = upstreams();
        for target in [
            "/chalk",
            "/JSONStream",
            "/@types/node",
            "/@types%2Fnode",
            "/@babel/core/-/core-7.26.0.tgz",
            "/is-number/-/is-number-7.0.0.tgz",
            "/_/pypi/six/",
            "/_/pypi/Django",
            "/_/h/files.pythonhosted.org/packages/ab/cd/ef01/six-1.16.0-py2.py3-none-any.whl",
            "/_/h/files.pythonhosted.org/packages/ab/six-1.16.0-py2.py3-none-any.whl.metadata",
            "/_/h/files.pythonhosted.org/packages/source/s/six/six-1.16.0.tar.gz",
        ] {
            assert!(route(&u, target).is_ok(), "{target}: {:?}", route(&u, target));
        }
        let long = format!("/{}/1", "a".repeat(7000));
        for (target, why) in [
            (long.as_str(), "not an npm registry path"),
            ("/chalk/latest/x", "not an npm registry path"),
            ("/-/v1/search", "not an npm registry path"),
            ("/-/npm/v1/security/advisories/bulk", "not an npm registry path"),
            ("/chalk/-/chalk-4.1.2.tar", "not an npm registry path"),
            ("/.hidden", "not an npm registry path"),
            ("/@scope", "not an npm registry path"),
            (&format!("/{}", "a".repeat(215)), "not an npm registry path"),
            ("/chalk?write=true", "query"),
            ("/_/pypi/", "not a Python index path"),
            ("/_/pypi/six/json", "not a Python index path"),
            ("/_/h/files.pythonhosted.org/", "not a distribution file"),
            ("/_/h/files.pythonhosted.org/robots.txt", "not a distribution file"),
            ("/_/h/files.pythonhosted.org/admin/login", "not a distribution file"),
            ("/_/h/files.pythonhosted.org/packages/x/six.whl?x=1", "query"),
        ] {
            let err = route(&u, target).unwrap_err();
            assert!(err.contains(why), "{target}: {err}");
        }
    }

    #[test]
    fn the_index_rewrite_goes_chunk_by_chunk_with_links_split_anywhere() {
        let u = Upstreams { hosts: vec!["files.pythonhosted.org".into(), "pypi.org".into()], ..upstreams() };
        let page = "<a href=\"https://files.pythonhosted.org/packages/x/six.whl\">six</a>\n\
                    <a href=\"https://pypi.org/p/a.tar.gz\">a</a> https://files.pythonhosted.org/ \
                    https://files.pythonhosted.org.evil/x"
            .repeat(3);
        let whole = rewrite_index(&page, &u);
        assert_eq!(whole.matches("/_/h/files.pythonhosted.org/").count(), 6, "{whole}");
        assert_eq!(whole.matches("/_/h/pypi.org/").count(), 3);
        assert_eq!(whole.matches("https://files.pythonhosted.org.evil/x").count(), 3);
        for size in [1, 2, 7, 13, 64] {
            let mut rewriter = IndexRewriter::new(&u);
            let mut out = Vec::new();
            for chunk in page.as_bytes().chunks(size) {
                out.extend(rewriter.push(chunk));
            }
            out.extend(rewriter.finish());
            assert_eq!(String::from_utf8(out).unwrap(), whole, "chunks of {size}");
        }
    }

    #[test]
    fn index_links_to_allowed_hosts_become_bridge_paths() {
        let page = r#"<a href="https://files.pythonhosted.org/packages/x/six.whl#sha256=ab">six</a> <a href="https://evil.example/x">"#;
        let out = rewrite_index(page, &upstreams());
        assert!(out.contains(r#"href="/_/h/files.pythonhosted.org/packages/x/six.whl#sha256=ab""#), "{out}");
        assert!(out.contains("https://evil.example/x"));
    }
}
