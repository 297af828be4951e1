//! Finds the sandbox-agent executable to ship, and checks it is static: it must run in an empty
//! container, so it may not need a dynamic loader.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Environment variable naming the agent to ship.
pub const AGENT_ENV: &str = "SANDBENCH_AGENT";

/// The agent to ship: `explicit`, else `$SANDBENCH_AGENT`, else beside this executable (or one
/// folder up, for test executables under `deps/`).
pub fn locate(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match explicit.map(Path::to_path_buf).or_else(|| std::env::var_os(AGENT_ENV).map(PathBuf::from)) {
        Some(path) => path,
        None => {
            let exe = std::env::current_exe().context("cannot find this executable's path")?;
            let dir = exe.parent().context("this executable has no folder")?;
            let candidates = [dir.join("sandbox-agent"), dir.join("../sandbox-agent")];
            match candidates.iter().find(|p| p.is_file()) {
                Some(found) => found.clone(),
                None => bail!(
                    "cannot find sandbox-agent beside {} (looked at {}); build it with `cargo build` or name it with --agent / {AGENT_ENV}",
                    exe.display(),
                    candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    };
    let path = path.canonicalize().with_context(|| format!("agent binary {} not found", path.display()))?;
    check_static(&path)?;
    Ok(path)
}

/// Fails unless `path` is an x86-64 ELF executable without a program interpreter.
pub fn check_static(path: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match elf_interpreter(&bytes) {
        Err(why) => bail!("{} is not a usable agent: {why}", path.display()),
        Ok(Some(interp)) => bail!(
            "{} is dynamically linked (interpreter {interp}); it must be static to run in an empty sandbox. \
             Build it with `cargo build` from the workspace root, whose .cargo/config.toml adds +crt-static",
            path.display()
        ),
        Ok(None) => Ok(()),
    }
}

/// The PT_INTERP of a 64-bit little-endian ELF file, if any.
fn elf_interpreter(bytes: &[u8]) -> Result<Option<String>, String> {
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| bytes.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |o: usize| bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize);
    if bytes.get(0..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    if u16_at(0x12) != Some(0x3e) {
        return Err("not an x86-64 executable".into());
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return Err("truncated ELF header".into());
    };
    for i in 0..phnum {
        let header = phoff + i * phentsize;
        const PT_INTERP: u32 = 3;
        if u32_at(header) == Some(PT_INTERP) {
            let (Some(offset), Some(size)) = (u64_at(header + 8), u64_at(header + 32)) else {
                return Err("truncated program header".into());
            };
            let raw = bytes.get(offset..offset + size).ok_or("interpreter outside the file")?;
            return Ok(Some(String::from_utf8_lossy(raw).trim_end_matches('\0').to_string()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_static_from_dynamic_executables() {
        // This test executable is built like the agent: static.
        let me = std::env::current_exe().unwrap();
        check_static(&me).unwrap();
        // A system binary is dynamic.
        let err = check_static(Path::new("/bin/sh")).unwrap_err().to_string();
        assert!(err.contains("dynamically linked"), "{err}");
        let err = check_static(Path::new("/etc/hostname")).unwrap_err().to_string();
        assert!(err.contains("not a 64-bit"), "{err}");
    }
}
