//! The loopback HTTP origin: serves the release folder made by prepare to the installer on
//! `127.0.0.1:<port>`, at its root or under a path (`/releases/v1.0.0/<file>`, the reference's
//! layout), until the sandbox ends. GET and HEAD of regular files only, reached
//! without following any link ([`crate::safefs`]): the builder made the folder, and a link it
//! planted (`x -> /proc/1/environ`) must not hand root's files to the workload.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;

use crate::journal::lock;

/// What an origin serves: the folder `root` under the URL path `prefix` (no slash at either end;
/// empty, at the root).
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub root: PathBuf,
    pub prefix: String,
}

/// A running origin; what it serves can be changed (a new prepare).
#[derive(Clone)]
pub struct Origin {
    served: Arc<Mutex<Served>>,
    pub port: u16,
}

impl Origin {
    /// Binds `127.0.0.1:port` (0 picks a free port) and serves `served` on a thread.
    pub fn start(served: Served, port: u16) -> anyhow::Result<Origin> {
        let listener = listen_loopback(port).with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
        let port = listener.local_addr()?.port();
        let origin = Origin { served: Arc::new(Mutex::new(served)), port };
        let shared = origin.served.clone();
        std::thread::Builder::new().name("origin".into()).spawn(move || {
            for stream in listener.incoming().flatten() {
                let served = lock(&shared).clone();
                let _ = std::thread::Builder::new().name("origin-conn".into()).spawn(move || {
                    let _ = handle(stream, &served);
                });
            }
        })?;
        Ok(origin)
    }

    pub fn serve(&self, served: Served) {
        *lock(&self.served) = served;
    }
}

/// A listening socket on 127.0.0.1, made with socket(2)/bind(2)/listen(2) directly: std's
/// `TcpListener::bind` drags the libc resolver into a static binary, which the agent must not
/// contain.
pub(crate) fn listen_loopback(port: u16) -> std::io::Result<TcpListener> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, bind, listen, socket_with, sockopt};
    let socket = socket_with(AddressFamily::INET, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&socket, true)?;
    bind(&socket, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))?;
    listen(&socket, 128)?;
    Ok(TcpListener::from(socket))
}

fn handle(mut stream: TcpStream, served: &Served) -> std::io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Skip the headers.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if method != "GET" && method != "HEAD" {
        return respond(&mut stream, "405 Method Not Allowed", b"", method == "HEAD");
    }
    match open(served, target) {
        Some((mut file, len)) => {
            let header = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(header.as_bytes())?;
            if method == "GET" {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = file.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    stream.write_all(&buf[..n])?;
                }
            }
            stream.flush()
        }
        None => respond(&mut stream, "404 Not Found", b"not found\n", method == "HEAD"),
    }
}

/// The regular file a request target names under the served folder and its size: below the
/// prefix, reached through no link, and not a hard link to a file of someone else than the
/// builder (or root, for SHA256SUMS).
fn open(served: &Served, target: &str) -> Option<(std::fs::File, u64)> {
    let relative = resolve(Path::new(""), target)?;
    let relative = relative.strip_prefix(&served.prefix).ok()?;
    let dir = crate::safefs::open_dir(&served.root).ok()?;
    let (file, stat) = crate::safefs::open_regular(&dir, relative).ok()?;
    let owners = [0, sandbench_proto::plan::BUILDER_UID];
    if stat.st_nlink > 1 && !owners.contains(&stat.st_uid) {
        return None;
    }
    Some((file, stat.st_size as u64))
}

fn respond(stream: &mut TcpStream, status: &str, body: &[u8], head: bool) -> std::io::Result<()> {
    let header = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    stream.write_all(header.as_bytes())?;
    if !head {
        stream.write_all(body)?;
    }
    stream.flush()
}

/// Maps a request target to a file under `root`; None for anything that would leave it.
pub fn resolve(root: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['?', '#']).next()?;
    let decoded = String::from_utf8(sandbench_proto::percent_decode(path)?).ok()?;
    let relative = Path::new(decoded.trim_start_matches('/'));
    if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(root.join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_only_paths_inside_the_root() {
        let root = Path::new("/srv");
        assert_eq!(resolve(root, "/releases/v1/a%20b.tgz?x=1"), Some(PathBuf::from("/srv/releases/v1/a b.tgz")));
        assert_eq!(resolve(root, "/../etc/passwd"), None);
        assert_eq!(resolve(root, "/a/%2e%2e/%2e%2e/etc"), None);
        assert_eq!(resolve(root, "/bad%zz"), None);
    }

    #[test]
    fn serves_files_over_loopback() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("v1")).unwrap();
        std::fs::write(dir.path().join("v1/pkg.tgz"), b"tarball").unwrap();
        let origin = Origin::start(Served { root: dir.path().to_path_buf(), prefix: String::new() }, 0).unwrap();
        let get = |path: &str| {
            let mut s =
                TcpStream::connect(std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, origin.port))).unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("/v1/pkg.tgz");
        assert!(ok.starts_with("HTTP/1.1 200 OK") && ok.ends_with("\r\n\r\ntarball"), "{ok}");
        assert!(get("/v1/missing").starts_with("HTTP/1.1 404"));
        assert!(get("/v1").starts_with("HTTP/1.1 404"));
        // The reference's layout: the release folder under `releases/v<version>/`, nothing else.
        origin.serve(Served { root: dir.path().join("v1"), prefix: "releases/v0.0.0-benchmark".into() });
        let ok = get("/releases/v0.0.0-benchmark/pkg.tgz");
        assert!(ok.starts_with("HTTP/1.1 200 OK") && ok.ends_with("\r\n\r\ntarball"), "{ok}");
        for outside in
            ["/pkg.tgz", "/releases/pkg.tgz", "/releases/v0.0.0-benchmarkx/pkg.tgz", "/releases/v0.0.0-benchmark"]
        {
            assert!(get(outside).starts_with("HTTP/1.1 404"), "{outside} was served");
        }
    }

    #[test]
    fn serves_nothing_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let release = dir.path().join("release");
        std::fs::create_dir_all(&release).unwrap();
        std::fs::write(dir.path().join("secret"), b"SANDBENCH_TOKEN=abc").unwrap();
        std::os::unix::fs::symlink("/proc/1/environ", release.join("x")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), release.join("y")).unwrap();
        std::os::unix::fs::symlink(dir.path(), release.join("up")).unwrap();
        std::fs::write(release.join("ok"), b"fine").unwrap();
        let at = |root: PathBuf| Served { root, prefix: String::new() };
        for target in ["/x", "/y", "/up/secret", "/..%2fsecret"] {
            assert!(open(&at(release.clone()), target).is_none(), "{target} was served");
        }
        assert_eq!(open(&at(release.clone()), "/ok").map(|(_, len)| len), Some(4));
        // A release folder that is itself a link serves nothing.
        std::os::unix::fs::symlink(&release, dir.path().join("linked")).unwrap();
        assert!(open(&at(dir.path().join("linked")), "/ok").is_none());
    }
}
