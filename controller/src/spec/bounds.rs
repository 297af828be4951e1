//! What keeps a spec inside its bounds: paths that stay under their base (the source folder, the
//! user's home), names that are plain file names, environment keys a shell can take, and CPU
//! sets the engine can pin to. The spec is written by whoever writes the pull request; the agent
//! acts on it as root.

use std::collections::BTreeMap;

use toml::Spanned;

use super::validator::Validator;

/// Longest path or name a spec may give.
const MAX_PATH_BYTES: usize = 1024;
/// Longest scenario or script name (it becomes part of file names).
const MAX_NAME_BYTES: usize = 64;
/// Highest CPU number a cpuset may name (Linux's largest NR_CPUS is 8192).
const MAX_CPU: u32 = 8191;

/// A path relative to its base that stays under it: not absolute, no `..`, `.` or empty part,
/// no NUL. `*`, `?` and `[…]` are fine (artifact globs).
pub fn relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("expected a path, got an empty one".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("expected a path of at most {MAX_PATH_BYTES} bytes, got {}", path.len()));
    }
    if path.contains('\0') {
        return Err(format!("expected a path without NUL characters, got {path:?}"));
    }
    if path.starts_with('/') {
        return Err(format!("expected a relative path, got the absolute path {path:?}"));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(format!("{path:?} leaves its folder through `..`"));
    }
    if path.split('/').any(|part| part.is_empty() || part == ".") {
        return Err(format!("expected a path without empty or `.` parts, got {path:?}"));
    }
    Ok(())
}

/// A working folder: `~` (the user's home), `~/PATH`, or a relative PATH (under the step's
/// base folder); never outside them.
pub fn cwd(path: &str) -> Result<(), String> {
    match path {
        "~" => Ok(()),
        _ => relative_path(path.strip_prefix("~/").unwrap_or(path))
            .map_err(|why| format!("{why}; expected `~`, `~/PATH` or a PATH inside the home")),
    }
}

/// A name that becomes part of file names: letters, digits, `.`, `_` and `-`, not starting with
/// `.` or `-`.
pub fn file_name(name: &str) -> Result<(), String> {
    let plain = name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if name.is_empty() || name.len() > MAX_NAME_BYTES || !plain || name.starts_with(['.', '-']) {
        return Err(format!(
            "expected a name of 1 to {MAX_NAME_BYTES} letters, digits, '.', '_' or '-' (not first), got {name:?}"
        ));
    }
    Ok(())
}

/// An environment variable name a shell can take: a letter or `_`, then letters, digits, `_`.
pub fn env_key(key: &str) -> Result<(), String> {
    let mut chars = key.chars();
    let first = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("expected a variable name of letters, digits and '_' (not a digit first), got {key:?}"));
    }
    Ok(())
}

/// The CPUs a Docker cpuset names (`0-3,6`), in order, or what is wrong with it.
pub fn cpuset(text: &str) -> Result<Vec<u32>, String> {
    let number = |s: &str| -> Result<u32, String> {
        match s.parse::<u32>() {
            Ok(n) if n <= MAX_CPU && !s.starts_with('+') => Ok(n),
            Ok(_) => Err(format!("CPU {s} is beyond {MAX_CPU}")),
            Err(_) => Err(format!("{s:?} is not a CPU number")),
        }
    };
    if text.trim().is_empty() {
        return Err("expected CPUs such as \"0-1\" or \"0,2\", got an empty cpuset".into());
    }
    let mut cpus = Vec::new();
    for item in text.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((lo, hi)) => (number(lo)?, number(hi)?),
            None => (number(item)?, number(item)?),
        };
        if lo > hi {
            return Err(format!("the range {item:?} goes backwards"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The CPUs online on this machine (`/sys/devices/system/cpu/online`), if it says.
pub fn host_cpus() -> Option<Vec<u32>> {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    cpuset(online.trim()).ok()
}

/// Whether `cpus` are all among `host`; the error names those that are not.
pub fn cpus_available(cpus: &[u32], host: &[u32]) -> Result<(), String> {
    let missing: Vec<String> = cpus.iter().filter(|c| !host.contains(c)).map(u32::to_string).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let online: Vec<String> = host.iter().map(u32::to_string).collect();
    Err(format!("CPU {} not on this machine (online: {})", missing.join(", "), online.join(", ")))
}

impl Validator<'_> {
    /// Reports `check`'s complaint about `value` at its position.
    pub(super) fn bounded(&mut self, value: &Spanned<String>, field: &str, check: fn(&str) -> Result<(), String>) {
        if let Err(why) = check(value.get_ref()) {
            self.error(value, field, why);
        }
    }

    /// Like [`Validator::bounded`] for an optional value.
    pub(super) fn bounded_opt(
        &mut self,
        value: &Option<Spanned<String>>,
        field: &str,
        check: fn(&str) -> Result<(), String>,
    ) -> Option<String> {
        let value = value.as_ref()?;
        self.bounded(value, field, check);
        Some(value.get_ref().clone())
    }

    /// An environment table (keys must be variable names, values without NUL); `table` names it
    /// in errors and `line` is where it is, when the keys have no position of their own.
    pub(super) fn environment(&mut self, env: &BTreeMap<String, String>, table: &str, line: usize) {
        for (key, value) in env {
            let at = self.line_of_key(key).unwrap_or(line);
            if let Err(why) = env_key(key) {
                self.error_at(at, &format!("{table}.{key}"), why);
            }
            if value.contains('\0') {
                self.error_at(at, &format!("{table}.{key}"), "expected a value without NUL characters");
            }
        }
    }

    /// The line where `key` is assigned (`key =` or `"key" =`), if it can be found.
    pub(super) fn line_of_key(&self, key: &str) -> Option<usize> {
        let candidates = [key.to_string(), format!("{key:?}")];
        for (n, line) in self.text.lines().enumerate() {
            for candidate in candidates.iter().filter(|c| !c.is_empty()) {
                let mut from = 0;
                while let Some(at) = line[from..].find(candidate.as_str()) {
                    let whole = !line[..from + at].ends_with(|c: char| c.is_alphanumeric() || "_-.".contains(c));
                    from += at + candidate.len();
                    if whole && line[from..].trim_start().starts_with('=') {
                        return Some(n + 1);
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_under_their_base() {
        for ok in ["release", "dist/*.tgz", "a/b.c", ".config/x.json", "pkg/[ab]*"] {
            assert_eq!(relative_path(ok), Ok(()), "{ok}");
        }
        for bad in ["", "/etc", "../x", "a/../../b", "a//b", "./a", "a/.", "a\0b", "..", &"x".repeat(2000)] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(cwd("~"), Ok(()));
        assert_eq!(cwd("~/workspace"), Ok(()));
        assert_eq!(cwd("sub"), Ok(()));
        for bad in ["/", "/tmp", "~/../root", "~root", "~/", ""] {
            if bad == "~root" {
                // A folder literally named `~root` under the base: harmless, accepted.
                assert_eq!(cwd(bad), Ok(()));
                continue;
            }
            assert!(cwd(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_envs_and_cpusets_are_checked() {
        assert_eq!(file_name("kernel-2.x_y"), Ok(()));
        for bad in ["", "../../../../escape", "a/b", ".hidden", "-x", "sp ace", "é", &"n".repeat(65)] {
            assert!(file_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(env_key("_A1"), Ok(()));
        for bad in ["", "A=B", "1A", "A\0", "A-B", "É"] {
            assert!(env_key(bad).is_err(), "{bad:?}");
        }
        assert_eq!(cpuset("0-2,5,1"), Ok(vec![0, 1, 2, 5]));
        assert!(cpuset("0-9999,abc").unwrap_err().contains("9999"));
        for bad in ["", "abc", "1-", "3-1", "0,,1", "-1", "+1", "0-1 "] {
            assert!(cpuset(bad).is_err(), "{bad:?}");
        }
        assert_eq!(cpus_available(&[0, 1], &[0, 1, 2]), Ok(()));
        assert_eq!(cpus_available(&[1, 7], &[0, 1]).unwrap_err(), "CPU 7 not on this machine (online: 0, 1)");
    }
}
