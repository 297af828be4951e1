//! The host's apt: which packages it would install `valgrind` from, and downloading them
//! (`apt-get download`, no root needed) into a folder of ours.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::debian::{self, Package};

/// How long one apt command may take (a download of some tens of MB included).
const APT_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `program args` in `dir` to its end within the timeout: its standard output, or why not.
async fn run(program: &str, args: &[&str], dir: Option<&Path>) -> Result<String, String> {
    let mut command = tokio::process::Command::new(program);
    command.args(args).stdin(std::process::Stdio::null()).kill_on_drop(true).env("LC_ALL", "C");
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let shown = format!("{program} {}", args.join(" "));
    let output = match tokio::time::timeout(APT_TIMEOUT, command.output()).await {
        Err(_) => return Err(format!("`{shown}` took more than {} s", APT_TIMEOUT.as_secs())),
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("the host has no {program}"));
        }
        Ok(Err(err)) => return Err(format!("cannot run `{shown}`: {err}")),
        Ok(Ok(output)) => output,
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // apt's errors (`E: …`) before its warnings (`W: …`).
        let mut lines = stderr.lines().filter(|l| !l.trim().is_empty());
        let why = stderr.lines().find(|l| l.starts_with("E:")).or_else(|| lines.next_back()).unwrap_or("no output");
        return Err(format!("`{shown}` failed ({}): {}", output.status, why.trim()));
    }
    Ok(stdout)
}

/// The host's dpkg architecture (`amd64`).
pub async fn architecture() -> Result<String, String> {
    Ok(run("dpkg", &["--print-architecture"], None).await?.trim().to_string())
}

/// Every package the host's apt could install for `root`, with its candidate version and
/// dependencies: the names `apt-cache depends --recurse` reaches, then their records.
pub async fn candidates(root: &str) -> Result<BTreeMap<String, Package>, String> {
    let skip = ["--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"];
    let mut args = vec!["depends", "--recurse"];
    args.extend(skip);
    args.push(root);
    let names = debian::reached(&run("apt-cache", &args, None).await?);
    if names.is_empty() {
        return Err(format!("the host's apt knows no package {root}"));
    }
    let mut args = vec!["show", "--no-all-versions"];
    args.extend(names.iter().map(String::as_str));
    let packages = debian::packages(&run("apt-cache", &args, None).await?);
    if !packages.contains_key(root) {
        return Err(format!("the host's apt has no candidate for {root}"));
    }
    Ok(packages)
}

/// Downloads these packages at these versions into `dir`: the .deb files.
pub async fn download(packages: &[(String, String)], dir: &Path) -> Result<Vec<PathBuf>, String> {
    let wanted: Vec<String> = packages.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let mut args = vec!["download", "-q"];
    args.extend(wanted.iter().map(String::as_str));
    run("apt-get", &args, Some(dir)).await?;
    let mut debs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    debs.sort();
    if debs.len() != packages.len() {
        return Err(format!("apt-get download gave {} files for {} packages", debs.len(), packages.len()));
    }
    Ok(debs)
}
