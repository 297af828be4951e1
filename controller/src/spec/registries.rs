//! `sandbox.network` (`false`, `true` or `"registries"`) and the `[registries]` section: the
//! registry bridge's upstreams (by URL or host name, none written into the code) and its bounds.

use std::time::Duration;

use toml::Spanned;

use super::RegistrySettings;
use super::raw::{RawRegistries, RawSandbox};
use super::validator::Validator;

/// The agent's loopback port for the bridge by default.
pub const DEFAULT_PORT: u16 = 4873;
/// What reaches the registries by default: twice what one sandbox may ask a second
/// (`requests_per_second`), so the two sides' preparations never wait on each other.
pub const DEFAULT_UPSTREAM_PER_SECOND: i64 = 400;
/// Requests a sandbox sends upstream by default: an install without a lockfile of 5,000
/// packages asks for each packument and each tarball once (10,000); a second side, trials and
/// retries are served from the cache.
pub const DEFAULT_MAX_UPSTREAM_REQUESTS: i64 = 20_000;
/// Negative answers a sandbox gets by default: an install that succeeds gets none (npm with a
/// lockfile asks only for what exists; pip and uv ask for each project's page once).
pub const DEFAULT_MAX_NOT_FOUND: i64 = 500;

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
        let upstream_rate = self.count(
            &r.upstream_per_second,
            "registries.upstream_per_second",
            1,
            100_000,
            DEFAULT_UPSTREAM_PER_SECOND,
        );
        let max_upstream = self.count(
            &r.max_upstream_requests,
            "registries.max_upstream_requests",
            1,
            10_000_000,
            DEFAULT_MAX_UPSTREAM_REQUESTS,
        );
        let max_not_found =
            self.count(&r.max_not_found, "registries.max_not_found", 0, 10_000_000, DEFAULT_MAX_NOT_FOUND);
        let cache_mb = self.number(&r.cache_mb, "registries.cache_mb", 0.0, 1e7, 4096.0);
        let ttl = self.number(&r.metadata_ttl_minutes, "registries.metadata_ttl_minutes", 0.0, 1e6, 24.0 * 60.0);
        Some(RegistrySettings {
            npm,
            pypi,
            hosts,
            port,
            max_response_bytes: (max_mb * 1e6) as u64,
            requests_per_second: rate,
            upstream_per_second: upstream_rate as u32,
            max_upstream_requests: max_upstream as u64,
            max_not_found: max_not_found as u64,
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

/// The loopback hosts an upstream may name over plain http (a registry of the machine's own).
const LOOPBACK_HOSTS: [&str; 2] = ["127.0.0.1", "localhost"];

/// `url` as an upstream base: an https URL (or http on the loopback: exactly `127.0.0.1` or
/// `localhost`, with a port or not) with a host name, no credentials, query or fragment, ending
/// in `/`.
pub fn upstream_url(url: &str) -> Result<String, String> {
    let (plain, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (false, rest),
        (None, Some(rest)) => (true, rest),
        (None, None) => return Err(format!("expected an https URL such as https://registry.npmjs.org/, got {url:?}")),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0) && !p.starts_with('0'));
    let loopback = LOOPBACK_HOSTS.contains(&host);
    if plain && !loopback {
        return Err(format!(
            "expected an https URL such as https://registry.npmjs.org/ (plain http only to 127.0.0.1 or localhost), \
             got {url:?}"
        ));
    }
    if authority.contains('@')
        || rest.contains(['?', '#', ' ', '\\'])
        || !port_ok
        || !(loopback || host_name(host).is_ok())
    {
        return Err(format!(
            "expected an https URL with a host name and no credentials, query or fragment, got {url:?}"
        ));
    }
    Ok(if url.ends_with('/') { url.to_string() } else { format!("{url}/") })
}

/// A host name as the bridge allows it: letters, digits, '-' and '.', lowercased, whose last
/// label is not a number (decimal or `0x` hex): URL parsers read such a host as an IPv4 address
/// (`2130706433` is 127.0.0.1, so is `0x7f.1`), which no registry is named by.
pub fn host_name(name: &str) -> Result<String, String> {
    let lower = name.trim().to_ascii_lowercase();
    let labels_ok = lower.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    let last = lower.rsplit('.').next().unwrap_or_default();
    let numeric = last.chars().all(|c| c.is_ascii_digit())
        || last.strip_prefix("0x").is_some_and(|hex| hex.chars().all(|c| c.is_ascii_hexdigit()));
    if lower.is_empty() || lower.len() > 253 || !labels_ok || numeric {
        return Err(format!("expected a host name such as files.pythonhosted.org, got {name:?}"));
    }
    Ok(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_alike_loopbacks_and_hosts_made_of_numbers_are_refused() {
        for url in [
            "http://localhost.evil.example/",
            "http://127.0.0.1.evil.example/",
            "http://localhostevil.example/",
            "http://127.0.0.10/",
            "http://evil.example/?127.0.0.1",
            "https://2130706433/",
            "https://0x7f000001/",
            "https://0x7f.1/",
            "https://10.0.0.1/",
            "https://registry.example.1/",
        ] {
            assert!(upstream_url(url).is_err(), "{url} is accepted");
        }
        for name in ["2130706433", "0x7f000001", "127.0.0.1", "10.1", "a.0x1f", "a.08"] {
            assert!(host_name(name).is_err(), "{name} is accepted as a host name");
        }
        for (url, base) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/"),
            ("http://localhost/npm/", "http://localhost/npm/"),
            ("https://127.0.0.1:4873/", "https://127.0.0.1:4873/"),
            ("https://registry.npmjs.org", "https://registry.npmjs.org/"),
            ("https://r2.example.com/x/", "https://r2.example.com/x/"),
        ] {
            assert_eq!(upstream_url(url).as_deref(), Ok(base), "{url}");
        }
        assert_eq!(host_name("Files.PythonHosted.org").as_deref(), Ok("files.pythonhosted.org"));
        assert_eq!(host_name("1password.example").as_deref(), Ok("1password.example"));
    }
}
