//! Reads callgrind's output files (`callgrind.out.<pid>`, format version 1): the totals of every
//! event and each function's own (self) instruction count. The reader streams the file line by
//! line and keeps one number per function, so a large profile costs little memory; what it
//! cannot parse is an error naming the file and line, never a panic.
//!
//! Events with the cache simulation on: `Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw`. Estimated
//! cycles are L1 hits + 5 × last-level hits + 35 × RAM accesses (iai-callgrind's and gungraun's
//! formula): every access that did not miss L1 is an L1 hit, every L1 miss that did not miss the
//! last level an LL hit, every LL miss a RAM access.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, bail};
use sandbench_proto::lens::{Function, JIT, LL_HIT_CYCLES, RAM_CYCLES};

/// Functions one file may name; past it, costs go to the totals only (a file the product wrote
/// in callgrind's place cannot grow the agent's memory without bound).
const MAX_FUNCTIONS: usize = 200_000;
/// The largest output file read (node's are tens of MB).
const MAX_FILE_BYTES: u64 = 256 << 20;
/// Characters of a name kept.
const MAX_NAME: usize = 300;

/// Totals of one or more callgrind files, and the functions' own instruction counts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    /// Event name → total.
    pub events: HashMap<String, u64>,
    /// (object, function) → own instructions (`Ir`).
    pub functions: HashMap<(String, String), u64>,
    /// Files (processes) read.
    pub files: u32,
}

impl Counts {
    pub fn event(&self, name: &str) -> u64 {
        self.events.get(name).copied().unwrap_or(0)
    }

    pub fn instructions(&self) -> u64 {
        self.event("Ir")
    }

    /// Estimated cycles; without the cache events (no simulation), the instruction count.
    pub fn cycles(&self) -> u64 {
        let accesses = self.event("Ir") + self.event("Dr") + self.event("Dw");
        let l1_misses = self.event("I1mr") + self.event("D1mr") + self.event("D1mw");
        let ll_misses = self.event("ILmr") + self.event("DLmr") + self.event("DLmw");
        let l1_hits = accesses.saturating_sub(l1_misses);
        let ll_hits = l1_misses.saturating_sub(ll_misses);
        l1_hits + LL_HIT_CYCLES * ll_hits + RAM_CYCLES * ll_misses
    }

    /// Adds another file's counts.
    pub fn add(&mut self, other: Counts) {
        for (k, v) in other.events {
            *self.events.entry(k).or_default() += v;
        }
        for (k, v) in other.functions {
            *self.functions.entry(k).or_default() += v;
        }
        self.files += other.files;
    }

    /// The `limit` functions with the most own instructions, largest first; code without a
    /// symbol (a JIT's, named `0x…` by callgrind) grouped as one entry.
    pub fn top_functions(&self, limit: usize) -> Vec<Function> {
        let mut grouped: HashMap<(String, String), u64> = HashMap::new();
        for ((object, name), ir) in &self.functions {
            let key =
                if name.starts_with("0x") { (String::new(), JIT.to_string()) } else { (object.clone(), name.clone()) };
            *grouped.entry(key).or_default() += ir;
        }
        let mut list: Vec<Function> = grouped
            .into_iter()
            .filter(|(_, ir)| *ir > 0)
            .map(|((object, name), instructions)| Function { name, object: short_object(&object), instructions })
            .collect();
        list.sort_by(|a, b| b.instructions.cmp(&a.instructions).then_with(|| a.name.cmp(&b.name)));
        list.truncate(limit);
        list
    }
}

fn short_object(object: &str) -> String {
    if object == "???" { String::new() } else { object.rsplit('/').next().unwrap_or(object).to_string() }
}

/// Reads one callgrind file.
pub fn read_file(path: &Path) -> anyhow::Result<Counts> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = file.metadata()?.len();
    if len > MAX_FILE_BYTES {
        bail!("{} is {len} bytes, more than callgrind writes ({MAX_FILE_BYTES} at most read)", path.display());
    }
    parse(std::io::BufReader::new(file)).with_context(|| format!("cannot read the callgrind output {}", path.display()))
}

/// Names defined by compression (`fn=(3) name`, later `fn=(3)`), per kind.
#[derive(Default)]
struct Names {
    defined: HashMap<(&'static str, u64), String>,
}

impl Names {
    /// The name a `kind=` line's value stands for.
    fn resolve(&mut self, kind: &'static str, value: &str) -> anyhow::Result<String> {
        let Some(rest) = value.strip_prefix('(') else { return Ok(value.chars().take(MAX_NAME).collect()) };
        let Some((id, name)) = rest.split_once(')') else { bail!("unclosed name id") };
        let id: u64 = id.parse().context("bad name id")?;
        let name = name.trim_start();
        if name.is_empty() {
            Ok(self.defined.get(&(kind, id)).cloned().unwrap_or_else(|| format!("({id})")))
        } else {
            let name: String = name.chars().take(MAX_NAME).collect();
            if self.defined.len() < MAX_FUNCTIONS {
                self.defined.insert((kind, id), name.clone());
            }
            Ok(name)
        }
    }
}

/// Names of the same kind share ids: `cob`/`ob`, `cfn`/`fn`, `cfi`/`cfl`/`fi`/`fe`/`fl`.
fn kind_of(key: &str) -> Option<&'static str> {
    match key {
        "ob" | "cob" => Some("ob"),
        "fn" | "cfn" => Some("fn"),
        "fl" | "fi" | "fe" | "cfi" | "cfl" => Some("fl"),
        _ => None,
    }
}

/// Parses callgrind's format from `reader`.
pub fn parse(reader: impl BufRead) -> anyhow::Result<Counts> {
    let mut names = Names::default();
    let mut events: Vec<String> = Vec::new();
    let mut positions = 1usize;
    let mut totals: Option<Vec<u64>> = None;
    let mut summed: Vec<u64> = Vec::new();
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    let (mut object, mut function) = (String::new(), String::new());
    let mut after_calls = false;
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("line {}", n + 1))?;
        let line = line.trim_end();
        let at = || format!("line {}: {:?}", n + 1, line.chars().take(120).collect::<String>());
        let Some(first) = line.chars().next() else { continue };
        if first.is_ascii_digit() || matches!(first, '+' | '-' | '*') {
            let costs = cost_line(line, positions).with_context(at)?;
            if after_calls {
                after_calls = false;
                continue;
            }
            if summed.len() < costs.len() {
                summed.resize(costs.len(), 0);
            }
            for (s, c) in summed.iter_mut().zip(&costs) {
                *s += c;
            }
            let ir = costs.first().copied().unwrap_or(0);
            let key = (object.clone(), function.clone());
            if functions.len() < MAX_FUNCTIONS || functions.contains_key(&key) {
                *functions.entry(key).or_default() += ir;
            }
            continue;
        }
        if first == '#' {
            continue;
        }
        let Some((key, value)) = line.split_once([':', '=']) else { continue };
        let value = value.trim();
        match key {
            "events" => events = value.split_whitespace().map(str::to_string).collect(),
            "positions" => positions = value.split_whitespace().count().max(1),
            "summary" | "totals" => totals = Some(numbers(value).with_context(at)?),
            "calls" => after_calls = true,
            _ => {
                if let Some(kind) = kind_of(key) {
                    let name = names.resolve(kind, value).with_context(at)?;
                    match key {
                        "ob" => object = name,
                        "fn" => function = name,
                        _ => {}
                    }
                }
            }
        }
    }
    if events.is_empty() {
        bail!("no `events:` line (not a callgrind file?)");
    }
    let values = totals.unwrap_or(summed);
    let events = events.into_iter().zip(values.into_iter().chain(std::iter::repeat(0))).collect();
    Ok(Counts { events, functions, files: 1 })
}

/// A cost line's event columns (its position columns skipped; missing trailing columns are 0).
fn cost_line(line: &str, positions: usize) -> anyhow::Result<Vec<u64>> {
    numbers_from(line.split_whitespace().skip(positions))
}

fn numbers(text: &str) -> anyhow::Result<Vec<u64>> {
    numbers_from(text.split_whitespace())
}

fn numbers_from<'a>(words: impl Iterator<Item = &'a str>) -> anyhow::Result<Vec<u64>> {
    words.map(|w| w.parse::<u64>().with_context(|| format!("{w:?} is not a count"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 42
cmd:  node work.js
part: 1

positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 1000 300 100 10 20 5 2 4 1

ob=(1) /usr/bin/node
fl=(1) ???
fn=(1) Builtins_InterpreterEntryTrampoline
0 600 200 50 5 10 2 1 2
cfn=(2) v8::internal::Runtime_Foo
calls=3 0
0 300 90 40 4 9 3 1 2 1
fn=(2)
0 200 90 40 4 9 3 1 2 1
ob=(2)
fn=(3) 0x0000000012345678
+2 150 10 10 1 1
fn=(4) 0x00000000deadbeef
* 50
";

    #[test]
    fn totals_cycles_and_own_counts() {
        let c = parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(c.instructions(), 1000);
        // accesses 1400, L1 misses 35, LL misses 7: 1365 + 5 × 28 + 35 × 7.
        assert_eq!(c.cycles(), 1365 + 140 + 245);
        let own = |f: &str| c.functions.iter().find(|((_, n), _)| n == f).map(|(_, v)| *v);
        // The line after `calls=` is the callee's inclusive cost, not the caller's own.
        assert_eq!(own("Builtins_InterpreterEntryTrampoline"), Some(600));
        assert_eq!(own("v8::internal::Runtime_Foo"), Some(200));
        let top = c.top_functions(5);
        assert_eq!(top[0].name, "Builtins_InterpreterEntryTrampoline");
        assert_eq!(top[0].object, "node");
        assert_eq!(top[1], Function { name: JIT.into(), object: String::new(), instructions: 200 });
        assert_eq!(top.len(), 3);
    }

    #[test]
    fn files_add_up_and_bad_input_is_an_error_not_a_panic() {
        let mut a = parse(SAMPLE.as_bytes()).unwrap();
        a.add(parse(SAMPLE.as_bytes()).unwrap());
        assert_eq!((a.instructions(), a.files), (2000, 2));
        assert!(parse("events: Ir\n0 x\n".as_bytes()).unwrap_err().to_string().contains("line 2"));
        assert!(parse("nothing here\n".as_bytes()).is_err());
        assert!(parse("events: Ir\nfn=(x\n".as_bytes()).is_err());
        // Without a summary the cost lines are summed; no cache events: cycles are instructions.
        let c = parse("events: Ir\nfn=f\n0 7\n0 3\n".as_bytes()).unwrap();
        assert_eq!((c.instructions(), c.cycles()), (10, 10));
        for garbage in ["\u{0}\u{1}", "events:\n+", "events: Ir\ncalls=\n", "fn=(18446744073709551616) x"] {
            let _ = parse(garbage.as_bytes());
        }
    }
}
