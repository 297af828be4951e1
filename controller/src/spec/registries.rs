//! `sandbox.network` (`false`, `true` or `"registries"`) and the `[registries]` section: the
//! registry bridge's upstreams (by URL or host name, none written into the code) and its bounds.

use std::time::Duration;

use toml::Spanned;

use super::RegistrySettings;
use super::raw::{RawRegistries, RawSandbox};
use super::validate::Validator;

/// The agent's loopback port for the bridge by default.
pub const DEFAULT_PORT: u16 = 4873;

/// What `sandbox.network` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Network {
    Off,
    On,
    Registries,
}

impl Validator<'_> {
    pub(super) fn network(&mut self, s: &RawSandbox) -> Network {
        let Some(value) = &s.network else { return Network::Off };
        match value.get_ref() {
            toml::Value::Boolean(false) => Network::Off,
            toml::Value::Boolean(true) => Network::On,
            toml::Value::String(name) if name == "registries" => Network::Registries,
            other => {
                self.error(value, "sandbox.network", format!("expected true, false or \"registries\", got {other}"));
                Network::Off
            }
        }
    }

    /// `[registries]`, for a sandbox whose network is `network`.
    pub(super) fn registries(
        &mut self,
        raw: &Option<Spanned<RawRegistries>>,
        network: Network,
    ) -> Option<RegistrySettings> {
        if network != Network::Registries {
            if let Some(raw) = raw {
                self.error(raw, "registries", "the [registries] section needs sandbox.network = \"registries\"");
            }
            return None;
        }
        let empty = RawRegistries::default();
        let r = raw.as_ref().map(|r| r.get_ref()).unwrap_or(&empty);
        let npm = r.npm.as_ref().map(|u| self.upstream_url(u, "registries.npm"));
        let pypi = r.pypi.as_ref().map(|u| self.upstream_url(u, "registries.pypi"));
        let mut hosts = Vec::new();
        for host in &r.hosts {
            match host_name(host.get_ref()) {
                Ok(name) => hosts.push(name),
                Err(why) => self.error(host, "registries.hosts", why),
            }
        }
        let port = self.count(&r.port, "registries.port", 1, 65_535, i64::from(DEFAULT_PORT)) as u16;
        let max_mb = self.number(&r.max_response_mb, "registries.max_response_mb", 0.0, 16_384.0, 512.0);
        let rate = self.count(&r.requests_per_second, "registries.requests_per_second", 1, 100_000, 200) as u32;
        let cache_mb = self.number(&r.cache_mb, "registries.cache_mb", 0.0, 1e7, 4096.0);
        let ttl = self.number(&r.metadata_ttl_minutes, "registries.metadata_ttl_minutes", 0.0, 1e6, 24.0 * 60.0);
        Some(RegistrySettings {
            npm,
            pypi,
            hosts,
            port,
            max_response_bytes: (max_mb * 1e6) as u64,
            requests_per_second: rate,
            cache_bytes: (cache_mb * 1e6) as u64,
            metadata_ttl: Duration::from_secs_f64(ttl * 60.0),
            cache_dir: None,
        })
    }

    /// An upstream's base URL: https (http only on the loopback), ending in `/`.
    fn upstream_url(&mut self, url: &Spanned<String>, field: &str) -> String {
        match upstream_url(url.get_ref()) {
            Ok(url) => url,
            Err(why) => {
                self.error(url, field, why);
                String::new()
            }
        }
    }
}

/// `url` as an upstream base: an https URL (or http on the loopback) with a host, no
/// credentials, query or fragment, ending in `/`.
pub fn upstream_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://").filter(|r| r.starts_with("127.0.0.1") || r.starts_with("localhost")))
        .ok_or_else(|| format!("expected an https URL such as https://registry.npmjs.org/, got {url:?}"))?;
    let host = rest.split('/').next().unwrap_or_default();
    let name = host.split(':').next().unwrap_or_default();
    if host.contains('@') || rest.contains(['?', '#', ' ', '\\']) || host_name(name).is_err() {
        return Err(format!(
            "expected an https URL with a host name and no credentials, query or fragment, got {url:?}"
        ));
    }
    Ok(if url.ends_with('/') { url.to_string() } else { format!("{url}/") })
}

/// A host name as the bridge allows it: letters, digits, '-' and '.', lowercased.
pub fn host_name(name: &str) -> Result<String, String> {
    let lower = name.trim().to_ascii_lowercase();
    let labels_ok = lower.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    if lower.is_empty() || lower.len() > 253 || !labels_ok {
        return Err(format!("expected a host name such as files.pythonhosted.org, got {name:?}"));
    }
    Ok(lower)
}
