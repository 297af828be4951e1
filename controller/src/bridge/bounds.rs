//! What the bridge lets a sandbox ask and what it lets reach the registries: a request rate per
//! sandbox (`requests_per_second`, cache hits included); for requests that go upstream, a rate
//! for the whole run (`upstream_per_second`), and counts per sandbox and per run of requests
//! sent (`max_upstream_requests`) and of negative answers got (`max_not_found`); and negative
//! answers remembered for a while, so a repeated miss does not go out again. Past a bound the
//! request is refused here with a 429 saying which.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::spec::RegistrySettings;

/// How long a negative answer (404, 410) is remembered.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(5 * 60);
/// Negative answers remembered at most (the oldest go first).
const MAX_REMEMBERED: usize = 65_536;
/// A run's counts are this many times a sandbox's.
pub const RUN_FACTOR: u64 = 2;

/// A token bucket: `rate` a second, as many in a burst.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: f64) -> Bucket {
        Bucket { tokens: rate, at: Instant::now() }
    }

    fn take(&mut self, rate: f64) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * rate).min(rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Requests sent upstream, negative answers got, and requests not answered yet (each may still
/// be a negative answer, so they count against that bound until they are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Upstream {
    pub sent: u64,
    pub not_found: u64,
    pub pending: u64,
}

#[derive(Default)]
struct State {
    rates: HashMap<String, Bucket>,
    run_rate: Option<Bucket>,
    by_sandbox: HashMap<String, Upstream>,
    run: Upstream,
    /// Negative answers by key (URL and Accept), until when they are remembered.
    negative: HashMap<String, Instant>,
    /// Requests refused by a bound of what reaches the registries.
    refused_upstream: u64,
}

/// The bridge's bounds of one run.
pub struct Bounds {
    requests_per_second: f64,
    upstream_per_second: f64,
    max_upstream: u64,
    max_not_found: u64,
    state: Mutex<State>,
}

impl Bounds {
    pub fn new(settings: &RegistrySettings) -> Bounds {
        Bounds {
            requests_per_second: f64::from(settings.requests_per_second),
            upstream_per_second: f64::from(settings.upstream_per_second),
            max_upstream: settings.max_upstream_requests,
            max_not_found: settings.max_not_found,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One request of `sandbox`, within its rate; else why not.
    pub fn admit(&self, sandbox: &str) -> Result<(), String> {
        let rate = self.requests_per_second;
        let mut state = self.state();
        if state.rates.entry(sandbox.to_string()).or_insert_with(|| Bucket::full(rate)).take(rate) {
            return Ok(());
        }
        Err(format!("more than {rate} requests per second from this sandbox (registries.requests_per_second)"))
    }

    /// Whether the registry answered `key` with a negative answer lately.
    pub fn remembered_missing(&self, key: &str) -> bool {
        let mut state = self.state();
        match state.negative.get(key) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                state.negative.remove(key);
                false
            }
            None => false,
        }
    }

    /// One request of `sandbox` sent upstream, counted; else which bound refuses it.
    pub fn send_upstream(&self, sandbox: &str) -> Result<(), String> {
        let mut state = self.state();
        let mine = state.by_sandbox.get(sandbox).copied().unwrap_or_default();
        let run = state.run;
        let refusal = if mine.sent >= self.max_upstream {
            Some(format!(
                "this sandbox sent {} requests to the registries, its bound (registries.max_upstream_requests)",
                mine.sent
            ))
        } else if run.sent >= self.max_upstream * RUN_FACTOR {
            Some(format!(
                "the run sent {} requests to the registries, its bound ({RUN_FACTOR} × registries.max_upstream_requests)",
                run.sent
            ))
        } else if mine.not_found + mine.pending >= self.max_not_found {
            Some(format!(
                "the registries answered this sandbox \"not found\" {} times ({} more asked), its bound \
                 (registries.max_not_found)",
                mine.not_found, mine.pending
            ))
        } else if run.not_found + run.pending >= self.max_not_found * RUN_FACTOR {
            Some(format!(
                "the registries answered the run \"not found\" {} times ({} more asked), its bound \
                 ({RUN_FACTOR} × registries.max_not_found)",
                run.not_found, run.pending
            ))
        } else {
            let rate = self.upstream_per_second;
            let bucket = state.run_rate.get_or_insert_with(|| Bucket::full(rate));
            (!bucket.take(rate)).then(|| {
                format!("more than {rate} requests per second to the registries (registries.upstream_per_second)")
            })
        };
        if let Some(why) = refusal {
            state.refused_upstream += 1;
            return Err(why);
        }
        let mine = state.by_sandbox.entry(sandbox.to_string()).or_default();
        mine.sent += 1;
        mine.pending += 1;
        state.run.sent += 1;
        state.run.pending += 1;
        Ok(())
    }

    /// The registry's answer to a request of `sandbox` sent upstream ([`Bounds::send_upstream`]
    /// said yes; every such request gets here once): a negative one is counted and remembered
    /// under `key` for [`NEGATIVE_TTL`].
    pub fn answered(&self, sandbox: &str, key: &str, status: u16) {
        let mut state = self.state();
        let negative = status == 404 || status == 410;
        let mine = state.by_sandbox.entry(sandbox.to_string()).or_default();
        mine.pending = mine.pending.saturating_sub(1);
        mine.not_found += u64::from(negative);
        state.run.pending = state.run.pending.saturating_sub(1);
        state.run.not_found += u64::from(negative);
        if !negative {
            return;
        }
        let now = Instant::now();
        if state.negative.len() >= MAX_REMEMBERED {
            state.negative.retain(|_, until| *until > now);
        }
        if state.negative.len() >= MAX_REMEMBERED
            && let Some(oldest) = state.negative.iter().min_by_key(|(_, until)| **until).map(|(k, _)| k.clone())
        {
            state.negative.remove(&oldest);
        }
        state.negative.insert(key.to_string(), now + NEGATIVE_TTL);
    }

    /// What the run sent upstream, and how many requests the bounds of it refused.
    pub fn totals(&self) -> (Upstream, u64) {
        let state = self.state();
        (state.run, state.refused_upstream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RegistrySettings {
        RegistrySettings {
            npm: None,
            pypi: None,
            hosts: vec![],
            port: 4873,
            max_response_bytes: 1 << 20,
            requests_per_second: 5,
            upstream_per_second: 1000,
            max_upstream_requests: 10,
            max_not_found: 3,
            cache_bytes: 1 << 20,
            metadata_ttl: Duration::from_secs(60),
            cache_dir: None,
        }
    }

    #[test]
    fn each_bound_refuses_past_it_saying_which() {
        let bounds = Bounds::new(&settings());
        // The sandbox's rate: 5 in a burst, then refused; another sandbox has its own.
        assert!((0..5).all(|_| bounds.admit("a").is_ok()));
        assert!(bounds.admit("a").unwrap_err().contains("registries.requests_per_second"));
        assert!(bounds.admit("b").is_ok());
        // Negative answers: counted, remembered, and past 3 nothing more goes out.
        for n in 0..3 {
            bounds.send_upstream("a").unwrap();
            bounds.answered("a", &format!("https://r/x{n}"), 404);
        }
        assert!(bounds.remembered_missing("https://r/x0") && !bounds.remembered_missing("https://r/y"));
        assert!(bounds.send_upstream("a").unwrap_err().contains("registries.max_not_found"));
        // Another sandbox: its own count, until the run's (twice a sandbox's) is reached.
        for n in 0..3 {
            bounds.send_upstream("b").unwrap();
            bounds.answered("b", &format!("https://r/z{n}"), 404);
        }
        assert!(bounds.send_upstream("c").unwrap_err().contains("the run"));
        // Requests not answered yet count against the negative answers' bound until they are.
        let bounds = Bounds::new(&settings());
        assert!((0..3).all(|_| bounds.send_upstream("a").is_ok()));
        assert!(bounds.send_upstream("a").unwrap_err().contains("registries.max_not_found"));
        bounds.answered("a", "https://r/ok", 200);
        assert!(bounds.send_upstream("a").is_ok());
        // Requests sent: 10 a sandbox.
        let bounds = Bounds::new(&RegistrySettings { max_not_found: 100, ..settings() });
        assert!((0..10).all(|_| bounds.send_upstream("a").is_ok()));
        assert!(bounds.send_upstream("a").unwrap_err().contains("registries.max_upstream_requests"));
        assert_eq!(bounds.totals(), (Upstream { sent: 10, not_found: 0, pending: 10 }, 1));
        // The run's rate.
        let bounds =
            Bounds::new(&RegistrySettings { upstream_per_second: 4, max_upstream_requests: 100, ..settings() });
        assert!((0..4).all(|i| bounds.send_upstream(&format!("s{i}")).is_ok()));
        assert!(bounds.send_upstream("s9").unwrap_err().contains("registries.upstream_per_second"));
    }
}
