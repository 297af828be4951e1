//! The bridge's upstreams: those the spec names, else the host's own configuration — npm's
//! configured registry, pip's index URL and files host. None is written into the code.
//!
//! Asking the host runs npm and Python, which `sandbench run` may start in a pull request's
//! checkout: they run in `/` (npm reads a project's `.npmrc` where it starts, Python imports from
//! there), Python isolated (`-I`: neither the current folder nor `PYTHON*` variables on its path).

use std::process::Command;
use std::time::Duration;

use crate::spec::RegistrySettings;
use crate::spec::registries::{host_name, upstream_url};

/// The registries the bridge reaches, each an https base ending in `/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstreams {
    pub npm: Option<String>,
    pub pypi: Option<String>,
    /// Hosts reachable by name under `/_/h/<host>/` (a Python index's files host, …).
    pub hosts: Vec<String>,
    /// Where each came from, for the run's log.
    pub notes: Vec<String>,
}

impl Upstreams {
    /// The spec's upstreams, the missing ones read from the host's npm and pip.
    pub fn resolve(settings: &RegistrySettings) -> anyhow::Result<Upstreams> {
        let mut up = Upstreams::default();
        up.npm = match &settings.npm {
            Some(url) => Some(noted(&mut up.notes, "npm", url.clone(), "the spec")),
            None => host_npm().map(|(url, from)| noted(&mut up.notes, "npm", url, &from)),
        };
        up.pypi = match &settings.pypi {
            Some(url) => Some(noted(&mut up.notes, "pypi", url.clone(), "the spec")),
            None => host_pip_index().map(|(url, from)| noted(&mut up.notes, "pypi", url, &from)),
        };
        up.hosts = settings.hosts.clone();
        if settings.hosts.is_empty()
            && up.pypi.is_some()
            && let Some(files) =
                pip_says("from pip._internal.models.index import PyPI; print(PyPI.file_storage_domain)")
            && let Ok(files) = host_name(&files)
        {
            up.notes.push(format!("files host {files} (from the host's pip)"));
            up.hosts.push(files);
        }
        if let Some(host) = up.pypi.as_deref().and_then(host_of)
            && !up.hosts.contains(&host)
        {
            up.hosts.push(host);
        }
        if up.npm.is_none() && up.pypi.is_none() {
            anyhow::bail!(
                "sandbox.network = \"registries\" but no registry is known: name registries.npm or registries.pypi \
                 in the spec, or configure npm or pip on this host"
            );
        }
        Ok(up)
    }
}

fn noted(notes: &mut Vec<String>, name: &str, url: String, from: &str) -> String {
    notes.push(format!("{name} {url} (from {from})"));
    url
}

/// The host part of an upstream base URL.
fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let host = rest.split('/').next()?.split(':').next()?;
    host_name(host).ok()
}

/// npm's registry: `npm_config_registry` in this environment, else `npm config get registry`.
fn host_npm() -> Option<(String, String)> {
    for var in ["npm_config_registry", "NPM_CONFIG_REGISTRY"] {
        if let Ok(url) = std::env::var(var)
            && let Ok(url) = upstream_url(url.trim())
        {
            return Some((url, format!("${var}")));
        }
    }
    let out = output(&mut host_command("npm", &["config", "get", "registry"]))?;
    upstream_url(out.trim()).ok().map(|url| (url, "the host's npm configuration".into()))
}

/// pip's index: `PIP_INDEX_URL`, else pip's configured `global.index-url`, else pip's own.
fn host_pip_index() -> Option<(String, String)> {
    if let Ok(url) = std::env::var("PIP_INDEX_URL")
        && let Ok(url) = upstream_url(url.trim())
    {
        return Some((url, "$PIP_INDEX_URL".into()));
    }
    if let Some(out) = output(&mut host_command("python3", &["-I", "-m", "pip", "config", "get", "global.index-url"]))
        && let Ok(url) = upstream_url(out.trim())
    {
        return Some((url, "the host's pip configuration".into()));
    }
    let url = pip_says("from pip._internal.models.index import PyPI; print(PyPI.simple_url)")?;
    upstream_url(url.trim()).ok().map(|url| (url, "the host's pip".into()))
}

fn pip_says(code: &str) -> Option<String> {
    output(&mut host_command("python3", &["-I", "-c", code])).map(|s| s.trim().to_string())
}

/// `program` with `args`, run in `/`: nothing of the folder sandbench was started in is read.
fn host_command(program: &str, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command.args(args).current_dir("/");
    command
}

/// A command's standard output when it succeeds within 20 s.
fn output(command: &mut Command) -> Option<String> {
    use std::io::Read;
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    child.stdout.take()?.take(64 * 1024).read_to_string(&mut out).ok()?;
    Some(out)
}
