//! What Debian's tools say, read: control paragraphs (`dpkg` status, `apt-cache show`), the
//! package names `apt-cache depends --recurse` reaches, versions compared as dpkg compares them,
//! and which packages the image lacks for `valgrind` to install (pure, for tests).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// One paragraph of a Debian control file: field names (as written) and their values, the
/// continuation lines joined by newlines.
pub fn paragraphs(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut all = Vec::new();
    let mut current: BTreeMap<String, String> = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                all.push(std::mem::take(&mut current));
            }
            last = None;
        } else if line.starts_with([' ', '\t']) {
            if let Some(value) = last.as_ref().and_then(|key| current.get_mut(key)) {
                value.push('\n');
                value.push_str(line.trim());
            }
        } else if let Some((key, value)) = line.split_once(':') {
            current.insert(key.trim().to_string(), value.trim().to_string());
            last = Some(key.trim().to_string());
        }
    }
    if !current.is_empty() {
        all.push(current);
    }
    all
}

/// A version relation in a dependency (`>=`, `=`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Earlier,
    EarlierOrEqual,
    Equal,
    LaterOrEqual,
    Later,
}

/// One alternative of a dependency: a package name and the versions it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    pub version: Option<(Relation, String)>,
}

impl Dep {
    /// Whether `version` of the package meets the relation.
    pub fn accepts(&self, version: &str) -> bool {
        let Some((relation, wanted)) = &self.version else { return true };
        let order = compare(version, wanted);
        match relation {
            Relation::Earlier => order == Ordering::Less,
            Relation::EarlierOrEqual => order != Ordering::Greater,
            Relation::Equal => order == Ordering::Equal,
            Relation::LaterOrEqual => order != Ordering::Less,
            Relation::Later => order == Ordering::Greater,
        }
    }
}

impl std::fmt::Display for Dep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = |r: &Relation| match r {
            Relation::Earlier => "<<",
            Relation::EarlierOrEqual => "<=",
            Relation::Equal => "=",
            Relation::LaterOrEqual => ">=",
            Relation::Later => ">>",
        };
        match &self.version {
            Some((r, v)) => write!(f, "{} ({} {v})", self.name, op(r)),
            None => write!(f, "{}", self.name),
        }
    }
}

/// A `Depends:` value: groups that must all hold, each of alternatives one of which must.
/// Architecture qualifiers (`:any`) and restrictions (`[amd64]`, `<!nocheck>`) are dropped.
pub fn depends(text: &str) -> Vec<Vec<Dep>> {
    text.split(',')
        .map(|group| group.split('|').filter_map(dep).collect::<Vec<_>>())
        .filter(|group| !group.is_empty())
        .collect()
}

fn dep(text: &str) -> Option<Dep> {
    let text = text.split(['[', '<']).next().unwrap_or("").trim();
    let (name, rest) = match text.split_once('(') {
        Some((name, rest)) => (name.trim(), Some(rest.trim_end_matches(')').trim())),
        None => (text, None),
    };
    let name = name.split(':').next().unwrap_or("").trim();
    if name.is_empty() {
        return None;
    }
    let version = rest.and_then(|rest| {
        let split = rest.find(|c: char| !"<>=".contains(c)).unwrap_or(rest.len());
        let relation = match &rest[..split] {
            "<<" => Relation::Earlier,
            "<=" | "<" => Relation::EarlierOrEqual,
            "=" => Relation::Equal,
            ">=" | ">" => Relation::LaterOrEqual,
            ">>" => Relation::Later,
            _ => return None,
        };
        Some((relation, rest[split..].trim().to_string()))
    });
    Some(Dep { name: name.to_string(), version })
}

/// The real packages `apt-cache depends --recurse` reached: its unindented lines, virtual
/// packages (`<name>`) left out.
pub fn reached(output: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    output
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with([' ', '\t', '<', '|']))
        .map(|l| l.trim().split(':').next().unwrap_or("").to_string())
        .filter(|name| !name.is_empty() && seen.insert(name.clone()))
        .collect()
}

/// A package as one side knows it: the host's candidate (with its dependencies) or the image's
/// installed version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Package {
    pub version: String,
    /// Pre-Depends and Depends together.
    pub depends: Vec<Vec<Dep>>,
    /// Names it provides, with the version provided when it says one.
    pub provides: Vec<(String, Option<String>)>,
}

/// Packages by name from control paragraphs (`apt-cache show --no-all-versions`, or a dpkg
/// status file, where only those whose status says `installed` count).
pub fn packages(text: &str) -> BTreeMap<String, Package> {
    let mut all = BTreeMap::new();
    for p in paragraphs(text) {
        let (Some(name), Some(version)) = (p.get("Package"), p.get("Version")) else { continue };
        if p.get("Status").is_some_and(|s| s.split_whitespace().nth(2) != Some("installed")) {
            continue;
        }
        let field = |key: &str| p.get(key).map(|v| depends(v)).unwrap_or_default();
        let mut depends = field("Pre-Depends");
        depends.extend(field("Depends"));
        let provides = field("Provides")
            .into_iter()
            .flatten()
            .map(|d| (d.name, d.version.filter(|(r, _)| *r == Relation::Equal).map(|(_, v)| v)))
            .collect();
        // The first paragraph of a name is apt's candidate.
        all.entry(name.clone()).or_insert(Package { version: version.clone(), depends, provides });
    }
    all
}

/// What to install from the host for `root`: its name and version and those of every package
/// it needs that the image does not have in a version that does, in the order found. The
/// image's own packages are taken to have what they need. Empty when the image has `root`.
pub fn missing(
    root: &str,
    host: &BTreeMap<String, Package>,
    image: &BTreeMap<String, Package>,
) -> Result<Vec<(String, String)>, String> {
    let mut chosen: Vec<(String, String)> = Vec::new();
    let has = |chosen: &[(String, String)], dep: &Dep| {
        let version_of = |name: &str| {
            chosen.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).or(image.get(name).map(|p| &*p.version))
        };
        if version_of(&dep.name).is_some_and(|v| dep.accepts(v)) {
            return true;
        }
        // Provided by a package there (an unversioned provide meets only unversioned needs).
        let provides = |p: &Package| {
            p.provides
                .iter()
                .any(|(n, v)| *n == dep.name && v.as_deref().map_or(dep.version.is_none(), |v| dep.accepts(v)))
        };
        image.values().any(provides) || chosen.iter().filter_map(|(n, _)| host.get(n)).any(provides)
    };
    let root_dep = Dep { name: root.to_string(), version: None };
    if has(&chosen, &root_dep) {
        return Ok(chosen);
    }
    let Some(package) = host.get(root) else { return Err(format!("the host's apt has no candidate for {root}")) };
    chosen.push((root.to_string(), package.version.clone()));
    let mut next = 0;
    while next < chosen.len() {
        let name = chosen[next].0.clone();
        next += 1;
        for group in &host[&name].depends {
            if group.iter().any(|dep| has(&chosen, dep)) {
                continue;
            }
            let pick = group.iter().find_map(|dep| {
                let direct = host.get(&dep.name).filter(|p| dep.accepts(&p.version)).map(|_| dep.name.clone());
                direct.or_else(|| {
                    host.iter()
                        .find(|(_, p)| {
                            p.provides.iter().any(|(n, v)| {
                                *n == dep.name
                                    && (dep.version.is_none() || v.as_deref().is_some_and(|v| dep.accepts(v)))
                            })
                        })
                        .map(|(n, _)| n.clone())
                })
            });
            let Some(pick) = pick.filter(|p| !chosen.iter().any(|(n, _)| n == p)) else {
                let wanted: Vec<String> = group.iter().map(Dep::to_string).collect();
                return Err(format!(
                    "{name} needs {}, which neither the image nor the host's apt has",
                    wanted.join(" | ")
                ));
            };
            let version = host[&pick].version.clone();
            chosen.push((pick, version));
        }
    }
    Ok(chosen)
}

/// Two Debian versions compared as dpkg does (epoch, then upstream, then revision, `~` before
/// anything, letters before other characters).
pub fn compare(a: &str, b: &str) -> Ordering {
    let split = |v: &str| {
        let (epoch, rest) = match v.split_once(':') {
            Some((e, rest)) if e.chars().all(|c| c.is_ascii_digit()) => (e.parse::<u64>().unwrap_or(0), rest),
            _ => (0, v),
        };
        let (upstream, revision) = rest.rsplit_once('-').unwrap_or((rest, ""));
        (epoch, upstream.to_string(), revision.to_string())
    };
    let (ea, ua, ra) = split(a);
    let (eb, ub, rb) = split(b);
    ea.cmp(&eb).then_with(|| part(ua.as_bytes(), ub.as_bytes())).then_with(|| part(ra.as_bytes(), rb.as_bytes()))
}

fn order(c: Option<u8>) -> i32 {
    match c {
        None => 0,
        Some(b'~') => -1,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(c),
        Some(c) => i32::from(c) + 256,
    }
}

/// dpkg's `verrevcmp`: runs of non-digits by character order, runs of digits by value.
fn part(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    let digit = |s: &[u8], k: usize| s.get(k).is_some_and(u8::is_ascii_digit);
    while i < a.len() || j < b.len() {
        while (i < a.len() && !digit(a, i)) || (j < b.len() && !digit(b, j)) {
            let (ac, bc) = (order(a.get(i).copied()), order(b.get(j).copied()));
            if ac != bc {
                return ac.cmp(&bc);
            }
            i += 1;
            j += 1;
        }
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let mut first = Ordering::Equal;
        while digit(a, i) && digit(b, j) {
            if first == Ordering::Equal {
                first = a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
        if digit(a, i) {
            return Ordering::Greater;
        }
        if digit(b, j) {
            return Ordering::Less;
        }
        if first != Ordering::Equal {
            return first;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_dpkg_does() {
        let less = [
            ("1.0", "1.1"),
            ("1.0~rc1", "1.0"),
            ("1.0", "1.0+b1"),
            ("2.36-9+deb12u4", "2.36-9+deb12u14"),
            ("3.19.0-1", "1:3.19.0-1"),
            ("1.0a", "1.0b"),
            ("1.0", "1.0a"),
            ("1.9", "1.10"),
            ("1.0-1", "1.0-2"),
            ("1.0~~", "1.0~"),
        ];
        for (a, b) in less {
            assert_eq!(compare(a, b), Ordering::Less, "{a} < {b}");
            assert_eq!(compare(b, a), Ordering::Greater, "{b} > {a}");
        }
        assert_eq!(compare("1:3.19.0-1", "1:3.19.0-1"), Ordering::Equal);
        assert_eq!(compare("1.01", "1.1"), Ordering::Equal);
    }

    #[test]
    fn dependencies_are_read_with_alternatives_and_relations() {
        let deps = depends("libc6 (>= 2.34), libc6-dbg, python3:any | perl [amd64] (<< 6), foo (= 1:2-3) <!nocheck>");
        assert_eq!(deps.len(), 4);
        assert_eq!(deps[0], vec![Dep { name: "libc6".into(), version: Some((Relation::LaterOrEqual, "2.34".into())) }]);
        assert_eq!(deps[1], vec![Dep { name: "libc6-dbg".into(), version: None }]);
        assert_eq!(deps[2].iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["python3", "perl"]);
        assert_eq!(deps[3][0].version, Some((Relation::Equal, "1:2-3".into())));
        assert!(deps[0][0].accepts("2.36-9") && !deps[0][0].accepts("2.31-13"));
    }

    #[test]
    fn apt_cache_depends_names_the_real_packages_reached() {
        let out = "valgrind\n  Depends: libc6\n  Depends: libc6-dbg\nlibc6\n  Depends: libgcc-s1\n |Depends: a\n  Depends: <virt>\n    b\nlibc6-dbg\n  Depends: libc6\nlibgcc-s1\n<virt>\ngcc-12-base\n";
        assert_eq!(reached(out), ["valgrind", "libc6", "libc6-dbg", "libgcc-s1", "gcc-12-base"]);
    }

    const HOST: &str = "Package: valgrind\nVersion: 1:3.19.0-1\nDepends: libc6 (>= 2.34), libc6-dbg\nDescription: x\n more\n\nPackage: libc6-dbg\nVersion: 2.36-9+deb12u14\nProvides: libc-dbg, libc6-dbgsym\nDepends: libc6 (= 2.36-9+deb12u14)\n\nPackage: libc6\nVersion: 2.36-9+deb12u14\nDepends: libgcc-s1\n\nPackage: libgcc-s1\nVersion: 12.2.0-14\nDepends: gcc-12-base (= 12.2.0-14), libc6 (>= 2.35)\n\nPackage: gcc-12-base\nVersion: 12.2.0-14\n";

    fn status(libc: &str) -> String {
        format!(
            "Package: libc6\nStatus: install ok installed\nVersion: {libc}\n\nPackage: libgcc-s1\nStatus: install ok installed\nVersion: 12.2.0-14\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n"
        )
    }

    #[test]
    fn the_image_gets_what_it_lacks_and_what_must_match_the_host() {
        let host = packages(HOST);
        assert_eq!(host["libc6-dbg"].provides[0], ("libc-dbg".to_string(), None));
        let image = packages(&status("2.36-9+deb12u14"));
        assert!(!image.contains_key("gone"), "config-files only is not installed");
        let same = missing("valgrind", &host, &image).unwrap();
        assert_eq!(
            same,
            [("valgrind".to_string(), "1:3.19.0-1".to_string()), ("libc6-dbg".into(), "2.36-9+deb12u14".into())]
        );
        // An older libc in the image: libc6-dbg pins it, so the host's comes along.
        let older = missing("valgrind", &host, &packages(&status("2.36-9+deb12u4"))).unwrap();
        let names: Vec<&str> = older.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["valgrind", "libc6-dbg", "libc6"]);
        // Nothing in the image: the whole closure.
        assert_eq!(missing("valgrind", &host, &BTreeMap::new()).unwrap().len(), 5);
        // Already there: nothing.
        let mut with = image.clone();
        with.insert("valgrind".into(), Package { version: "1:3.19.0-1".into(), ..Default::default() });
        assert!(missing("valgrind", &host, &with).unwrap().is_empty());
        // A need nobody meets.
        let mut broken = host.clone();
        broken.remove("libc6-dbg");
        let err = missing("valgrind", &broken, &image).unwrap_err();
        assert!(err.contains("valgrind needs libc6-dbg"), "{err}");
        assert!(missing("valgrind", &BTreeMap::new(), &image).unwrap_err().contains("no candidate for valgrind"));
    }
}
