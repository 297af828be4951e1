//! `sandbench bench`: the backbone's figures, measured side by side in one run on one image —
//! provision-to-Hello per sandbox against a bare create+start+wait of a trivial container through
//! the same API, observation throughput over the socket, and the agent's idle RSS. Its sandboxes
//! are sessions of a spec of the image alone (a run's defaults: 2 CPUs, 4 GB, 20 GB of disk), as a
//! run would make them, and its ledger entry (`bench-<time>`) charges them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sandbench_proto::v1::{Command, RunPhase, command};

use crate::cost::SandboxRecord;
use crate::cost::ledger::{Entry, Ledger, RunStart};
use crate::display::Display;
use crate::observations::server::HubConfig;
use crate::provision::docker::AGENT_PATH_IN_SANDBOX;
use crate::provision::{AgentShipping, DockerProvisioner, Engine};
use crate::spec::Plan;
use crate::station::session::Session;
use crate::station::{Station, StationOptions};

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Image to run both the sandboxes and the bare containers in.
    #[arg(long, default_value = "node:24-bookworm")]
    pub image: String,
    /// Sandboxes (and bare containers) to time, alternating.
    #[arg(long, default_value_t = 10)]
    pub samples: usize,
    /// Observations each sandbox streams in the throughput test.
    #[arg(long, default_value_t = 100_000)]
    pub observations: u64,
    /// Sandboxes streaming at once in the second throughput test.
    #[arg(long, default_value_t = 4)]
    pub streams: usize,
    /// How the agent gets into the sandbox.
    #[arg(long, value_enum, default_value_t = Shipping::Bind)]
    pub shipping: Shipping,
    /// The sandbox-agent executable to ship (default: beside this one).
    #[arg(long, env = crate::agent_binary::AGENT_ENV)]
    pub agent: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shipping {
    Bind,
    Upload,
}

impl From<Shipping> for AgentShipping {
    fn from(s: Shipping) -> Self {
        match s {
            Shipping::Bind => AgentShipping::Bind,
            Shipping::Upload => AgentShipping::Upload,
        }
    }
}

struct Bench {
    /// The Docker backend itself, for the figures only Docker has (a bare container, the agent's
    /// host pid); sandboxes go through the station.
    docker: Arc<DockerProvisioner>,
    station: Arc<Station>,
    /// The spec of the image alone the sandboxes are made from.
    plan: Plan,
    args: BenchArgs,
    live: Vec<Session>,
    /// Every sandbox removed so far, charged.
    records: Vec<SandboxRecord>,
    display: Display,
}

/// The spec bench's sandboxes are made from: the image, and a run's defaults for the rest.
fn bench_plan(dir: &std::path::Path, image: &str) -> anyhow::Result<Plan> {
    let path = dir.join("bench.toml");
    let image = toml::Value::String(image.to_string());
    let text = format!("name = \"sandbench-bench\"\n\n[sandbox]\nimage = {image}\n\n[install]\ncommand = \"true\"\n");
    crate::spec::parse(&path, &text).map_err(|e| anyhow::anyhow!("--image: {e}"))
}

/// `sandbench bench` on `engine`, its sandboxes charged in the ledger at `ledger` (None: none).
pub async fn run(engine: &Engine, args: BenchArgs, ledger: Option<PathBuf>) -> anyhow::Result<()> {
    if args.samples == 0 || args.streams == 0 {
        bail!("--samples and --streams must be at least 1");
    }
    let docker = engine.docker().await?;
    let dir =
        tempfile::Builder::new().prefix("sandbench-bench-").tempdir().context("cannot create a temporary folder")?;
    // The sandboxes' run and the ledger's row have one id.
    let started = std::time::SystemTime::now();
    let run_id = format!("bench-{}", crate::report::stamp(started));
    let options = StationOptions {
        dir: dir.path().to_path_buf(),
        run_id: run_id.clone(),
        image: Some(args.image.clone()),
        valgrind: false,
        agent: args.agent.clone(),
        hub: HubConfig::default(),
    };
    let plan = bench_plan(dir.path(), &args.image)?;
    let display = Display::new();
    let station = Arc::new(Station::open(docker.clone(), options, &mut |line| display.line(line)).await?);
    let mut entry = match &ledger {
        Some(path) => {
            let start = RunStart {
                run_id,
                spec: plan.name.clone(),
                repository: String::new(),
                base_rev: args.image.clone(),
                base_commit: String::new(),
                head_rev: args.image.clone(),
                head_commit: String::new(),
                started_at: crate::report::timestamp(started),
                run_dir: dir.path().display().to_string(),
                owner: crate::provision::docker::owner_id(),
                usd_per_hour: plan.hourly_usd(),
            };
            match Ledger::open(path).and_then(|ledger| Entry::begin(ledger, &start, false)) {
                Ok(entry) => Some(entry),
                Err(err) => {
                    station.close().await;
                    return Err(err.context(format!("cannot record the benchmark in the ledger {}", path.display())));
                }
            }
        }
        None => None,
    };
    let mut bench =
        Bench { docker, station, plan, args, live: Vec::new(), records: Vec::new(), display: display.clone() };

    let result = bench.measure().await;
    let cleanup = bench.cleanup().await;
    let leftovers = bench.station.close().await;
    if let Some(entry) = entry.as_mut() {
        let status = if result.is_ok() && cleanup.is_ok() { "completed" } else { "failed" };
        let finished = crate::report::timestamp(std::time::SystemTime::now());
        if let Err(err) = entry.finish(status, &finished, &bench.records) {
            display.warning(&format!("cannot record the benchmark in the ledger: {err:#}"));
        }
    }
    let report = result?;
    cleanup?;
    if !leftovers.is_empty() {
        bail!("{}", leftovers.join("; "));
    }
    display.result(&report);
    Ok(())
}

impl Bench {
    fn run_id(&self) -> &str {
        self.station.run_id()
    }

    async fn launch(&mut self, role: String) -> anyhow::Result<Session> {
        let agent_plan = self.plan.agent_plan("");
        let made = (role.as_str(), self.args.shipping.into(), &[][..]);
        let session = Session::launch(&self.station, &self.plan, agent_plan, made).await?;
        self.live.push(session.clone());
        Ok(session)
    }

    async fn teardown(&mut self, id: &str) -> anyhow::Result<()> {
        if let Some(pos) = self.live.iter().position(|s| s.id() == id) {
            let ended = self.live.remove(pos).teardown("bench").await;
            self.records.push(ended.record);
            if let Some(err) = ended.teardown.removal_error {
                bail!(err);
            }
        }
        Ok(())
    }

    async fn cleanup(&mut self) -> anyhow::Result<()> {
        let ids: Vec<String> = self.live.iter().map(|s| s.id().to_string()).collect();
        for id in ids {
            self.teardown(&id).await?;
        }
        Ok(())
    }

    async fn measure(&mut self) -> anyhow::Result<String> {
        let (bare, hello) = self.provisioning().await?;
        let single = self.stream("one", 1).await?;
        let many = self.stream("many", self.args.streams).await?;
        Ok(self.table(&bare, &hello, &single, &many))
    }

    /// Bare containers and sandboxes, alternating: how long each took to run, to say Hello.
    async fn provisioning(&mut self) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
        let samples = self.args.samples;
        let mut bare = Vec::with_capacity(samples);
        let mut hello = Vec::with_capacity(samples);
        let bind = format!("{}:{}:ro", self.station.agent().display(), AGENT_PATH_IN_SANDBOX);
        // One of each first, untimed, so caches are warm for both.
        self.bare_once("warm", &bind).await?;
        let warm = self.launch("warm".into()).await?;
        self.teardown(warm.id()).await?;
        for i in 0..samples {
            self.display.status("provisioning", &format!("sample {}/{samples}", i + 1));
            bare.push(self.bare_once(&i.to_string(), &bind).await?);
            let session = self.launch(format!("s{i}")).await?;
            hello.push(session.live().provision_to_hello);
            self.teardown(session.id()).await?;
        }
        self.display.done("provisioning", &format!("{samples} samples"));
        Ok((bare, hello))
    }

    /// The figures side by side, with their targets.
    fn table(&self, bare: &[Duration], hello: &[Duration], single: &StreamFigures, many: &StreamFigures) -> String {
        let samples = self.args.samples;
        let (bare_median, hello_median) = (median(bare), median(hello));
        let ratio = hello_median.as_secs_f64() / bare_median.as_secs_f64();
        let per_sandbox_min = many.rates.iter().copied().fold(f64::INFINITY, f64::min);
        let fresh_max = single.fresh_rss_bytes.iter().chain(&many.fresh_rss_bytes).copied().max().unwrap_or(0);
        let rss_max = single.idle_rss_bytes.iter().chain(&many.idle_rss_bytes).copied().max().unwrap_or(0);
        let check = |ok: bool| if ok { "ok" } else { "MISSED" };
        let mut out = String::new();
        out.push_str(&format!(
            "sandbench backbone benchmark — image {}, Docker API {}, agent {}, {} samples\n\n",
            self.args.image,
            self.docker.api_version(),
            match self.args.shipping {
                Shipping::Bind => "bind-mounted",
                Shipping::Upload => "uploaded",
            },
            samples
        ));
        out.push_str(&format!("{:<44} {:>14} {:>22}  target\n", "figure", "median", "min .. max"));
        out.push_str(&format!(
            "{:<44} {:>11.1} ms {:>22}\n",
            "bare create+start+wait (trivial container)",
            ms(bare_median),
            range_ms(bare)
        ));
        out.push_str(&format!(
            "{:<44} {:>11.1} ms {:>22}\n",
            "provision-to-Hello (sandbox)",
            ms(hello_median),
            range_ms(hello)
        ));
        out.push_str(&format!("{:<44} {:>13.2}× {:>22}  ≤ 1.10× {}\n", "ratio", ratio, "", check(ratio <= 1.1)));
        out.push_str(&format!(
            "{:<44} {:>9.0} obs/s {:>22}  ≥ 50,000 {}\n",
            "throughput, 1 sandbox",
            single.rates[0],
            "",
            check(single.rates[0] >= 50_000.0)
        ));
        out.push_str(&format!(
            "{:<44} {:>9.0} obs/s {:>22}  ≥ 50,000 {}\n",
            format!("throughput, {} sandboxes at once (slowest)", self.args.streams),
            per_sandbox_min,
            format!("total {:.0} obs/s", many.rates.iter().sum::<f64>()),
            check(per_sandbox_min >= 50_000.0)
        ));
        out.push_str(&format!(
            "{:<44} {:>11.1} MB {:>22}  ≤ 10 MB {}\n",
            "agent idle RSS after Hello (largest)",
            fresh_max as f64 / 1e6,
            "",
            check(fresh_max <= 10_000_000)
        ));
        out.push_str(&format!(
            "{:<44} {:>11.1} MB {:>22}  ≤ 10 MB {}\n",
            "agent idle RSS after streaming (largest)",
            rss_max as f64 / 1e6,
            "",
            check(rss_max <= 10_000_000)
        ));
        out
    }

    async fn bare_once(&self, tag: &str, bind: &str) -> anyhow::Result<Duration> {
        let name = format!("sandbench-{}-bare{tag}", self.run_id());
        let cmd = vec![AGENT_PATH_IN_SANDBOX.to_string(), "--version".to_string()];
        let took = self.docker.run_bare(&name, &self.args.image, cmd, vec![bind.to_string()], self.run_id()).await?;
        Ok(took)
    }

    /// Streams `observations` from `count` sandboxes at once; per-sandbox rates and idle RSS.
    async fn stream(&mut self, label: &str, count: usize) -> anyhow::Result<StreamFigures> {
        let mut sandboxes = Vec::new();
        for i in 0..count {
            sandboxes.push(self.launch(format!("{label}{i}")).await?);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut fresh_rss_bytes = Vec::new();
        for live in &sandboxes {
            let pid = self.docker.main_pid(live.id()).await?.context("the agent is not running")?;
            fresh_rss_bytes.push(rss_bytes(pid)?);
        }
        self.display.line(&format!("streaming {} observations from {count} sandbox(es)", self.args.observations));
        let plan = serde_json::to_vec(&serde_json::json!({ "observations": self.args.observations }))?;
        let waits = sandboxes.iter().map(|live| {
            let hub = self.station.hub();
            let plan = plan.clone();
            let id = live.id().to_string();
            async move {
                let command = Command {
                    command_id: format!("{id}-stream"),
                    body: Some(command::Body::RunPhase(RunPhase {
                        phase: sandbench_proto::Phase::Synthetic.to_string(),
                        trial: 0,
                        plan,
                        stepwise: false,
                    })),
                };
                let begun = Instant::now();
                hub.send(&id, command.clone()).await?;
                let outcome = hub.wait_done(&id, &command.command_id, Duration::from_secs(600)).await?;
                let took = begun.elapsed();
                if !outcome.error.is_empty() {
                    bail!("{id}: the stream failed: {}", outcome.error);
                }
                anyhow::Ok(took)
            }
        });
        let took = futures_util::future::try_join_all(waits).await?;
        let mut rates = Vec::new();
        for (live, took) in sandboxes.iter().zip(took) {
            let status = self.station.hub().status(live.id()).context("sandbox vanished")?.borrow().clone();
            if status.observations != self.args.observations {
                bail!("{} delivered {} observations, not {}", live.id(), status.observations, self.args.observations);
            }
            rates.push(self.args.observations as f64 / took.as_secs_f64());
        }
        // Let the agents go idle, then read their resident memory from the host's /proc.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut idle_rss_bytes = Vec::new();
        for live in &sandboxes {
            let pid = self.docker.main_pid(live.id()).await?.context("the agent is not running")?;
            idle_rss_bytes.push(rss_bytes(pid)?);
        }
        for live in sandboxes {
            self.teardown(live.id()).await?;
        }
        Ok(StreamFigures { rates, fresh_rss_bytes, idle_rss_bytes })
    }
}

struct StreamFigures {
    rates: Vec<f64>,
    /// Idle after Hello, before any work.
    fresh_rss_bytes: Vec<u64>,
    /// Idle again after streaming.
    idle_rss_bytes: Vec<u64>,
}

fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS")?;
    Ok(kib * 1024)
}

fn median(samples: &[Duration]) -> Duration {
    let secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(crate::stats::median(&secs).unwrap_or(0.0))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn range_ms(samples: &[Duration]) -> String {
    let min = samples.iter().min().copied().unwrap_or_default();
    let max = samples.iter().max().copied().unwrap_or_default();
    format!("{:.1} .. {:.1} ms", ms(min), ms(max))
}
