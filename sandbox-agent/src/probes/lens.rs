//! The instruction lens: a step run once more under `valgrind --tool=callgrind
//! --trace-children=yes` with the cache simulation at a fixed geometry, so its counts are the
//! same on every machine whatever its load.
//!
//! **V8 made deterministic.** `NODE_OPTIONS` refuses `--predictable`, so the lens puts a `node` of
//! its own first on PATH (`/opt/sandbench/lens/bin/node`, a shell script) that execs the real one
//! with `--predictable --hash-seed=N --random-seed=N` and a preload that points
//! `process.execPath` at the wrapper: a CLI started through `#!/usr/bin/env node` gets the flags,
//! and so does every `node` it spawns with `process.execPath`. A `node` started by absolute path
//! does not (the README says so). CPython gets `PYTHONHASHSEED=N` unless the step sets one.
//!
//! **State.** Each run gets an empty `TMPDIR` of its own (Node's compile cache lives there: the
//! count is that of a cold compile cache) and runs after the user's processes were stopped; the
//! home is as the trial's timed runs left it ([`STATE`]).
//!
//! **A start in the terminal** is counted from the spawn to the typed probe's echo: one fixed
//! probe is typed once the program takes raw input, and once it is echoed and the user's
//! processes have gone idle, every process of the user gets SIGUSR2, whose default action ends it
//! on the spot: valgrind writes the counts at that moment, and no exit path runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rustix::process::Signal;
use sandbench_proto::lens::{LensPlan, Profile};

use super::callgrind::{self, Counts};
use super::command::{self, ShellCommand};
use super::processes;
use super::terminal::{Launch, Terminal};
use crate::users::User;

/// Where valgrind is looked for (the derived image installs Debian's package).
const VALGRIND: [&str; 2] = ["/usr/bin/valgrind", "/usr/local/bin/valgrind"];
/// The lens's own files, readable by every user.
const LENS_DIR: &str = "/opt/sandbench/lens";
/// Functions a profile keeps.
const TOP_FUNCTIONS: usize = 200;
/// Files of one lens run read (callgrind writes one per process of the tree).
const MAX_FILES: usize = 512;
/// What every lens run sees, in the report's words.
pub const STATE: &str = "cold compile cache (an empty TMPDIR of its own), the user's other processes stopped, the home as the trial's timed runs left it";
/// The probe typed into a start under the lens: fixed, so every run reads the same bytes.
const PROBE: &str = "b5a9d0e1fr";
/// How long the user's processes must use no CPU after the echo before the counts are taken.
const IDLE: Duration = Duration::from_millis(600);

/// A lens ready to run steps as one user.
pub struct Lens {
    valgrind: PathBuf,
    out: PathBuf,
    tmp: PathBuf,
    env: BTreeMap<String, String>,
    user: (u32, u32),
    timeout: Duration,
}

impl Lens {
    /// Checks valgrind is in the sandbox, writes the node wrapper, and makes the user's lens
    /// folders. `env` is the step's environment.
    pub fn new(plan: &LensPlan, user: &User, env: &BTreeMap<String, String>) -> anyhow::Result<Lens> {
        let valgrind = VALGRIND.iter().map(PathBuf::from).find(|p| p.is_file()).ok_or_else(|| {
            anyhow!("valgrind is not in this sandbox's image (looked in {}): the lens runs in the image sandbench derives with valgrind", VALGRIND.join(", "))
        })?;
        let path = env.get("PATH").cloned().unwrap_or_else(|| DEFAULT_PATH.into());
        let wrapper_dir = Path::new(LENS_DIR).join("bin");
        let wrapped = match find_in_path(&path, "node", &wrapper_dir) {
            Some(node) => {
                write_wrapper(&node, plan.seed)?;
                Some(wrapper_dir.as_path())
            }
            None => None,
        };
        let env = lens_env(env, wrapped, plan.seed);
        let scratch = crate::users::scratch_dir(user);
        let lens = Lens {
            valgrind,
            out: scratch.join("lens-out"),
            tmp: scratch.join("lens-tmp"),
            env,
            user: (user.uid, user.gid),
            timeout: Duration::from_secs_f64(plan.timeout_s),
        };
        Ok(lens)
    }

    /// Fresh, empty output and temporary folders owned by the user.
    fn fresh_folders(&mut self) -> anyhow::Result<()> {
        for dir in [&self.out, &self.tmp] {
            match std::fs::remove_dir_all(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("cannot empty {}", dir.display())),
            }
            std::fs::create_dir(dir).with_context(|| format!("cannot make {}", dir.display()))?;
            std::os::unix::fs::lchown(dir, Some(self.user.0), Some(self.user.1))?;
        }
        self.env.insert("TMPDIR".into(), self.tmp.display().to_string());
        Ok(())
    }

    fn valgrind_args(&self) -> Vec<String> {
        vec![
            "--tool=callgrind".into(),
            "--trace-children=yes".into(),
            "--cache-sim=yes".into(),
            // A fixed geometry: the same estimate on every machine (valgrind would read the host's).
            "--I1=32768,8,64".into(),
            "--D1=32768,8,64".into(),
            "--LL=8388608,16,64".into(),
            "--dump-line=no".into(),
            "--vgdb=no".into(),
            format!("--callgrind-out-file={}/callgrind.out.%p", self.out.display()),
            format!("--log-file={}/valgrind.%p.log", self.out.display()),
        ]
    }

    /// Runs a shell command under the lens (output to `sink`), and counts it.
    pub fn run_command(
        &mut self,
        run: &str,
        cwd: &Path,
        sink: &mut dyn FnMut(sandbench_proto::v1::LogStream, &[u8]),
    ) -> anyhow::Result<Profile> {
        self.fresh_folders()?;
        let mut line = format!("exec {}", quote(&self.valgrind.display().to_string()));
        for arg in self.valgrind_args() {
            line.push(' ');
            line.push_str(&quote(&arg));
        }
        line.push_str(" /bin/sh -c ");
        line.push_str(&quote(run));
        let shell = ShellCommand {
            run: line,
            env: self.env.clone(),
            cwd: cwd.to_path_buf(),
            user: Some(self.user),
            timeout: self.timeout,
        };
        let started = Instant::now();
        let done = command::run(&shell, sink)?;
        let seconds = started.elapsed().as_secs_f64();
        if !done.status.success() {
            // valgrind's launcher says why it could not load a program on the command's stderr.
            let said: Vec<String> = done
                .output_text()
                .lines()
                .filter(|l| l.trim_start().starts_with("valgrind:"))
                .map(|l| l.trim().chars().take(300).collect())
                .take(4)
                .collect();
            let said = if said.is_empty() { String::new() } else { format!(": {}", said.join("; ")) };
            bail!("under valgrind `{run}` failed ({}){said}{}", command::describe(done.status), self.valgrind_errors());
        }
        self.profile(seconds)
    }

    /// Starts `program args` in a terminal under the lens and counts it from the spawn to the
    /// probe's echo (see the module's notes).
    pub fn run_start(&mut self, program: &str, args: &[String], cwd: &Path, uid: u32) -> anyhow::Result<Profile> {
        self.fresh_folders()?;
        let mut all = self.valgrind_args();
        all.push(program.to_string());
        all.extend(args.iter().cloned());
        let launch = Launch {
            program: self.valgrind.clone(),
            args: all,
            env: self.env.clone(),
            cwd: cwd.into(),
            user: Some(self.user),
        };
        let started = Instant::now();
        let mut term = Terminal::spawn(&launch)?;
        let counted = self.until_echo(&mut term, uid);
        // SIGUSR2 ends every process of the user where it stands; valgrind writes the counts.
        for p in processes::of_user(Path::new("/proc"), uid) {
            processes::signal_process(p.pid, Signal::USR2);
        }
        let gone = wait_gone(&mut term, uid, Duration::from_secs(60));
        let seconds = started.elapsed().as_secs_f64();
        let _ = term.close(None);
        counted?;
        gone?;
        self.profile(seconds)
    }

    fn until_echo(&self, term: &mut Terminal, uid: u32) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut typed = false;
        loop {
            if Instant::now() >= deadline {
                bail!(
                    "under valgrind the start did not {} within {:.0} s{}",
                    if typed { "echo the probe" } else { "take raw terminal input" },
                    self.timeout.as_secs_f64(),
                    self.valgrind_errors()
                );
            }
            term.pump(Duration::from_millis(20))?;
            if !typed {
                if term.raw_noecho()? {
                    term.send(PROBE.as_bytes())?;
                    typed = true;
                }
                continue;
            }
            if super::readiness::locate(term.screen(), PROBE).is_some() {
                break;
            }
        }
        // Idle: no CPU tick of the user's processes for IDLE.
        let mut last = processes::cpu_seconds(Path::new("/proc"), uid);
        let mut still_since = Instant::now();
        while still_since.elapsed() < IDLE {
            if Instant::now() >= deadline {
                bail!(
                    "under valgrind the start did not go idle after its echo within {:.0} s",
                    self.timeout.as_secs_f64()
                );
            }
            term.pump(Duration::from_millis(50))?;
            let now = processes::cpu_seconds(Path::new("/proc"), uid);
            if now != last {
                (last, still_since) = (now, Instant::now());
            }
        }
        Ok(())
    }

    /// Sums the callgrind files of the run.
    fn profile(&self, seconds: f64) -> anyhow::Result<Profile> {
        let mut counts = Counts::default();
        let entries = std::fs::read_dir(&self.out).with_context(|| format!("cannot list {}", self.out.display()))?;
        // One file per process callgrind followed; the folder is the user's, so it is bounded.
        for entry in entries.flatten().take(MAX_FILES) {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("callgrind.out.") && entry.file_type().is_ok_and(|t| t.is_file()) {
                counts.add(callgrind::read_file(&entry.path())?);
            }
        }
        if counts.files == 0 || counts.instructions() == 0 {
            bail!("callgrind wrote no counts{}", self.valgrind_errors());
        }
        Ok(Profile {
            instructions: counts.instructions(),
            cycles: counts.cycles(),
            processes: counts.files,
            functions: counts.top_functions(TOP_FUNCTIONS),
            state: STATE.into(),
            seconds,
        })
    }

    /// valgrind's own complaints from its logs (lines that name valgrind or an error), bounded.
    fn valgrind_errors(&self) -> String {
        let mut lines = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&self.out) {
            for entry in entries.flatten().take(MAX_FILES) {
                if !entry.file_name().to_string_lossy().starts_with("valgrind.") {
                    continue;
                }
                let Ok(mut file) = std::fs::File::open(entry.path()) else { continue };
                let Ok(bytes) = crate::context::capped_file(&mut file, 64 * 1024) else { continue };
                for line in String::from_utf8_lossy(&bytes).lines() {
                    let text = line.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()).trim();
                    let lower = text.to_lowercase();
                    if lower.starts_with("valgrind:")
                        || lower.contains("error")
                        || lower.contains("failed")
                        || lower.contains("fatal")
                    {
                        lines.push(text.chars().take(300).collect::<String>());
                    }
                }
            }
        }
        lines.dedup();
        lines.truncate(8);
        if lines.is_empty() { String::new() } else { format!(": {}", lines.join("; ")) }
    }
}

/// Waits until the user has no process left (pumping the terminal), up to `limit`.
fn wait_gone(term: &mut Terminal, uid: u32, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !processes::of_user(Path::new("/proc"), uid).is_empty() {
        if Instant::now() >= deadline {
            bail!("valgrind did not write its counts within {:.0} s of the signal", limit.as_secs_f64());
        }
        let _ = term.pump(Duration::from_millis(50));
    }
    Ok(())
}

/// The first `name` on `path` outside `skip`, resolved.
fn find_in_path(path: &str, name: &str, skip: &Path) -> Option<PathBuf> {
    path.split(':')
        .filter(|d| !d.is_empty() && Path::new(d) != skip)
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The `node` wrapper and its preload, rewritten for every lens (root-owned, world-readable).
fn write_wrapper(node: &Path, seed: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let bin = Path::new(LENS_DIR).join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("cannot make {}", bin.display()))?;
    let preload = Path::new(LENS_DIR).join("exec-path.cjs");
    let wrapper = bin.join("node");
    std::fs::write(
        &preload,
        format!("process.execPath = {};\n", serde_json::to_string(&wrapper.display().to_string())?),
    )?;
    let script = format!(
        "#!/bin/sh\n# sandbench's instruction lens: V8 made deterministic.\nexec {} --predictable --hash-seed={seed} --random-seed={seed} --require {} \"$@\"\n",
        quote(&node.display().to_string()),
        quote(&preload.display().to_string()),
    );
    std::fs::write(&wrapper, script)?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(&preload, std::fs::Permissions::from_mode(0o644))?;
    for dir in [Path::new(LENS_DIR), bin.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The PATH a step without one runs with.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A lens run's environment: the step's, with the node wrapper's folder (when one was written)
/// first on PATH, and `PYTHONHASHSEED` set to the seed unless the step sets it — CPython salts
/// its str and bytes hashes at random otherwise, and set and dict orders, so the count, vary.
fn lens_env(step: &BTreeMap<String, String>, wrapper_dir: Option<&Path>, seed: u32) -> BTreeMap<String, String> {
    let mut env = step.clone();
    if let Some(dir) = wrapper_dir {
        let path = step.get("PATH").map_or(DEFAULT_PATH, String::as_str);
        env.insert("PATH".into(), format!("{}:{path}", dir.display()));
    }
    env.entry("PYTHONHASHSEED".into()).or_insert_with(|| seed.to_string());
    env
}

/// Single-quoted for `/bin/sh`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote("it's $HOME")))
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"it's $HOME");
    }

    #[test]
    fn the_lens_environment_puts_the_wrapper_first_and_seeds_python() {
        let step = BTreeMap::from([("PATH".to_string(), "/a:/b".to_string())]);
        let env = lens_env(&step, Some(Path::new("/opt/sandbench/lens/bin")), 7);
        assert_eq!(env["PATH"], "/opt/sandbench/lens/bin:/a:/b");
        assert_eq!(env["PYTHONHASHSEED"], "7");
        let bare = lens_env(&BTreeMap::new(), None, 1);
        assert!(!bare.contains_key("PATH"), "no wrapper, no PATH of the lens's own");
        assert_eq!(bare["PYTHONHASHSEED"], "1");
        let own = BTreeMap::from([("PYTHONHASHSEED".to_string(), "0".to_string())]);
        assert_eq!(lens_env(&own, None, 3)["PYTHONHASHSEED"], "0", "the step's own seed is kept");
        let unset = lens_env(&BTreeMap::new(), Some(Path::new("/w")), 1);
        assert_eq!(unset["PATH"], format!("/w:{DEFAULT_PATH}"));
    }

    #[test]
    fn node_is_found_past_the_wrapper() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("node"), "").unwrap();
        std::fs::write(b.join("node"), "").unwrap();
        let path = format!("{}:{}", a.display(), b.display());
        assert_eq!(find_in_path(&path, "node", &a), Some(b.join("node")));
        assert_eq!(find_in_path(&path, "node", Path::new("/x")), Some(a.join("node")));
        assert_eq!(find_in_path("", "node", &a), None);
    }
}
