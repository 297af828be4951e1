//! Finds the sandbox-agent executable to ship, and checks it is static: it must run in an empty
//! container, so it may not need a dynamic loader.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Environment variable naming the agent to ship.
pub const AGENT_ENV: &str = "SANDBENCH_AGENT";
/// The target the static agent is built for (`cargo build-static`), beside the host builds.
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-gnu";
/// The profile of the agent that ships.
pub const STATIC_PROFILE: &str = "release";
const AGENT_NAME: &str = "sandbox-agent";

/// The agent to ship: `explicit`, else `$SANDBENCH_AGENT`, else the first static one of
/// [`candidates`] around this executable.
pub fn locate(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match explicit.map(Path::to_path_buf).or_else(|| std::env::var_os(AGENT_ENV).map(PathBuf::from)) {
        Some(path) => path,
        None => {
            let exe = std::env::current_exe().context("cannot find this executable's path")?;
            let dir = exe.parent().context("this executable has no folder")?;
            find_static(&candidates(dir))?
        }
    };
    let path = path.canonicalize().with_context(|| format!("agent binary {} not found", path.display()))?;
    check_static(&path)?;
    Ok(path)
}

/// Where the agent may be for an executable in `exe_dir`, in order: beside it (an installed
/// layout), one folder up (test executables are in `deps/`), and the workspace's static build,
/// `<target>/x86_64-unknown-linux-gnu/release/` (host executables are in `<target>/<profile>/`
/// or `<target>/<profile>/deps/`).
pub fn candidates(exe_dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![exe_dir.join(AGENT_NAME)];
    if let Some(up) = exe_dir.parent() {
        found.push(up.join(AGENT_NAME));
    }
    for target_dir in exe_dir.ancestors().skip(1).take(2) {
        found.push(target_dir.join(STATIC_TARGET).join(STATIC_PROFILE).join(AGENT_NAME));
    }
    found
}

/// The first static executable of `candidates`. The workspace's host build of the agent (beside
/// the controller, dynamic) is passed over.
pub fn find_static(candidates: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let mut passed_over = Vec::new();
    for path in candidates.iter().filter(|p| p.is_file()) {
        match check_static(path) {
            Ok(()) => return Ok(path.clone()),
            Err(err) => passed_over.push(format!("{err:#}")),
        }
    }
    let looked_at = candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    let mut message = format!(
        "cannot find a static sandbox-agent (looked at {looked_at}); build it with `cargo build-static --release` \
         or name one with --agent / {AGENT_ENV}"
    );
    for why in passed_over {
        message.push_str(&format!("\n  passed over: {why}"));
    }
    bail!(message)
}

/// Fails unless `path` is an x86-64 ELF executable without a program interpreter.
pub fn check_static(path: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match elf_interpreter(&bytes) {
        Err(why) => bail!("{} is not a usable agent: {why}", path.display()),
        Ok(Some(interp)) => bail!(
            "{} is dynamically linked (interpreter {interp}); it must be static to run in an empty sandbox. \
             Build it with `cargo build-static --release` from the workspace root (.cargo/config.toml)",
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

    /// A minimal x86-64 ELF header with one program header: PT_INTERP naming `interp`, or PT_LOAD.
    fn elf(interp: Option<&str>) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x40 + 0x38];
        bytes[0..4].copy_from_slice(b"\x7fELF");
        bytes[4] = 2; // 64-bit
        bytes[5] = 1; // little-endian
        bytes[0x12..0x14].copy_from_slice(&0x3eu16.to_le_bytes());
        bytes[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let kind: u32 = if interp.is_some() { 3 } else { 1 };
        bytes[0x40..0x44].copy_from_slice(&kind.to_le_bytes());
        if let Some(interp) = interp {
            let offset = bytes.len() as u64;
            bytes[0x48..0x50].copy_from_slice(&offset.to_le_bytes());
            bytes[0x60..0x68].copy_from_slice(&(interp.len() as u64 + 1).to_le_bytes());
            bytes.extend_from_slice(interp.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    #[test]
    fn tells_static_from_dynamic_executables() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        check_static(&write("static", &elf(None))).unwrap();
        let err = check_static(&write("dynamic", &elf(Some("/lib64/ld-linux-x86-64.so.2")))).unwrap_err();
        assert!(err.to_string().contains("dynamically linked (interpreter /lib64/ld-linux-x86-64.so.2)"), "{err}");
        let mut truncated = elf(Some("/lib64/ld-linux-x86-64.so.2"));
        truncated.truncate(0x70);
        assert!(check_static(&write("truncated", &truncated)).is_err());
        // Real files: a system binary is dynamic, a text file is no executable.
        let err = check_static(Path::new("/bin/sh")).unwrap_err().to_string();
        assert!(err.contains("dynamically linked"), "{err}");
        let err = check_static(Path::new("/etc/hostname")).unwrap_err().to_string();
        assert!(err.contains("not a 64-bit"), "{err}");
    }

    #[test]
    fn looks_beside_the_executable_then_in_the_static_build() {
        let target = Path::new("/w/target");
        let static_agent = target.join("x86_64-unknown-linux-gnu/release/sandbox-agent");
        let from_bin = candidates(&target.join("debug"));
        assert_eq!(from_bin[0], target.join("debug/sandbox-agent"));
        assert!(from_bin.contains(&static_agent), "{from_bin:?}");
        let from_test = candidates(&target.join("debug/deps"));
        assert_eq!(from_test[..2], [target.join("debug/deps/sandbox-agent"), target.join("debug/sandbox-agent")]);
        assert!(from_test.contains(&static_agent), "{from_test:?}");
    }

    #[test]
    fn passes_over_a_dynamic_agent_for_a_static_one() {
        let dir = tempfile::tempdir().unwrap();
        let dynamic = dir.path().join("debug/sandbox-agent");
        let static_agent = dir.path().join("x86_64-unknown-linux-gnu/release/sandbox-agent");
        for (path, interp) in [(&dynamic, Some("/lib64/ld-linux-x86-64.so.2")), (&static_agent, None)] {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, elf(interp)).unwrap();
        }
        let all = candidates(&dir.path().join("debug"));
        assert_eq!(find_static(&all).unwrap(), static_agent);
        std::fs::remove_file(&static_agent).unwrap();
        let err = find_static(&all).unwrap_err().to_string();
        assert!(err.contains("cargo build-static --release"), "{err}");
        assert!(err.contains("passed over:") && err.contains("dynamically linked"), "{err}");
    }
}
