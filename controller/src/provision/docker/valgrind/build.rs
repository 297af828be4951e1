//! The engine's side: what an image holds (its os-release and dpkg status, read through a
//! container that never starts) and the build contexts of the derived image.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::provision::DockerProvisioner;

/// The line the build's last step prints, naming the installed package's version.
pub const VERSION_MARK: &str = "sandbench-valgrind-version=";

/// Where the host's packages are put in the image while they are installed.
const DEBS_IN_IMAGE: &str = "/tmp/sandbench-valgrind";

/// What an image holds that decides where its valgrind can come from.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    /// `/etc/os-release` (or `/usr/lib/os-release`), when it has one.
    pub os_release: Option<String>,
    /// `/var/lib/dpkg/status`, when it has one.
    pub dpkg_status: Option<String>,
}

/// Reads the files of `image` that say its distribution and packages, through a container
/// created for that and removed whatever happens (nothing in the image runs).
pub async fn contents(docker: &DockerProvisioner, image: &str) -> Result<Contents, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("sandbench-inspect-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    docker.create_inert(&name, image).await.map_err(|e| e.to_string())?;
    let read = |path: &'static str| {
        let name = name.clone();
        async move { docker.download(&name, path).await.ok().filter(|b| !b.is_empty()) }
    };
    // On Debian /etc/os-release is a link to ../usr/lib/os-release; the archive holds the link.
    let os_release = match read("/etc/os-release").await {
        Some(bytes) => Some(bytes),
        None => read("/usr/lib/os-release").await,
    };
    let dpkg_status = read("/var/lib/dpkg/status").await;
    let removed = docker.remove(&name).await;
    let text = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
    removed.map_err(|e| e.to_string())?;
    Ok(Contents { os_release: text(os_release), dpkg_status: text(dpkg_status) })
}

/// The shell words of a Dockerfile's exec form (`["sh", "-c", "…"]`).
fn exec_form(script: &str) -> String {
    serde_json::to_string(&["/bin/sh", "-c", script]).unwrap_or_default()
}

/// `USER 0` around the install when the image runs as someone else, so the install runs as
/// root and the image keeps its user.
fn as_root(user: &str, steps: &str) -> String {
    match user {
        "" | "root" | "0" | "0:0" | "root:root" => steps.to_string(),
        user => format!("USER 0\n{steps}USER {user}\n"),
    }
}

/// The script that installs valgrind with the image's own package manager (network needed).
pub fn package_manager_script() -> String {
    [
        "set -e",
        "if command -v apt-get >/dev/null 2>&1; then",
        "  export DEBIAN_FRONTEND=noninteractive",
        "  apt-get -qq -o Acquire::Retries=0 -o Acquire::http::Timeout=15 update",
        "  apt-get -qq install -y --no-install-recommends valgrind",
        "  rm -rf /var/lib/apt/lists/*",
        "  v=$(dpkg-query -W -f='${Version}' valgrind)",
        "elif command -v apk >/dev/null 2>&1; then",
        "  apk add --no-cache valgrind",
        "  v=$(apk list -I valgrind 2>/dev/null | sed -n 's/^valgrind-\\([^ ]*\\) .*/\\1/p')",
        "elif command -v dnf >/dev/null 2>&1; then",
        "  dnf install -y valgrind && dnf clean all",
        "  v=$(rpm -q --qf '%{VERSION}-%{RELEASE}' valgrind)",
        "elif command -v yum >/dev/null 2>&1; then",
        "  yum install -y valgrind && yum clean all",
        "  v=$(rpm -q --qf '%{VERSION}-%{RELEASE}' valgrind)",
        "else",
        "  echo 'the image has no package manager sandbench knows (apt-get, apk, dnf, yum)' >&2",
        "  exit 3",
        "fi",
        &format!("echo \"{VERSION_MARK}$v\""),
    ]
    .join("\n")
}

/// The build context of valgrind from the image's own package manager.
pub fn package_manager_context(base_id: &str, user: &str) -> Result<Vec<u8>, String> {
    let dockerfile =
        format!("FROM {base_id}\n{}", as_root(user, &format!("RUN {}\n", exec_form(&package_manager_script()))));
    tar(&dockerfile, &[])
}

/// The build context of valgrind from these .deb files (downloaded by the host's apt): copied
/// in, installed with dpkg, removed.
pub fn debs_context(base_id: &str, user: &str, debs: &[PathBuf]) -> Result<Vec<u8>, String> {
    let version = format!("echo \"{VERSION_MARK}$(dpkg-query -W -f='${{Version}}' valgrind)\"");
    let install = match debs.is_empty() {
        true => format!("RUN {}\n", exec_form(&version)),
        false => format!(
            "COPY debs/ {DEBS_IN_IMAGE}/\nRUN {}\n",
            exec_form(&format!("set -e; dpkg -i {DEBS_IN_IMAGE}/*.deb; rm -rf {DEBS_IN_IMAGE}; {version}"))
        ),
    };
    tar(&format!("FROM {base_id}\n{}", as_root(user, &install)), debs)
}

/// A tar of the Dockerfile and, under `debs/`, these files.
fn tar(dockerfile: &str, debs: &[PathBuf]) -> Result<Vec<u8>, String> {
    let mut builder = tar::Builder::new(Vec::new());
    let fail = |e: std::io::Error| format!("cannot write the build context: {e}");
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(dockerfile.len() as u64);
    builder.append_data(&mut header, "Dockerfile", dockerfile.as_bytes()).map_err(fail)?;
    for deb in debs {
        let name = deb.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let bytes = std::fs::read(deb).map_err(fail)?;
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, format!("debs/{name}"), bytes.as_slice()).map_err(fail)?;
    }
    builder.into_inner().map_err(fail)
}

/// The version the build's output names (the mark line of its last step).
pub fn version_in(output: &str) -> Option<String> {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix(VERSION_MARK))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_install_as_root_and_keep_the_images_user() {
        let ctx = debs_context("sha256:ab", "node", &[]).unwrap();
        let mut archive = tar::Archive::new(ctx.as_slice());
        let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
        assert!(text.starts_with("FROM sha256:ab\nUSER 0\nRUN [\"/bin/sh\",\"-c\","), "{text}");
        assert!(text.ends_with("USER node\n"), "{text}");
        assert!(!as_root("", "RUN x\n").contains("USER"));
        assert_eq!(version_in("Step 3/3\n sandbench-valgrind-version=1:3.19.0-1\n"), Some("1:3.19.0-1".into()));
        assert_eq!(version_in(&format!("{VERSION_MARK}\n")), None);
        assert!(package_manager_script().contains("apt-get") && package_manager_script().ends_with("$v\""));
    }
}
