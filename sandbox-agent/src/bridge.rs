//! The registry bridge's end in the sandbox (`network = "registries"`): plain HTTP on
//! `127.0.0.1:<port>`, each request carried to the controller on the session's connection
//! (`Fetch`) and its answer written back. The agent does no DNS and reaches nothing itself:
//! the controller decides what is forwarded (GET and HEAD to the allowed registries) and
//! refuses the rest with a reason, which goes back to the product as it is.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sandbench_proto::v1::agent_client::AgentClient;
use sandbench_proto::v1::{FetchRequest, fetch_reply};
use tonic::transport::Channel;

use crate::journal::lock;

/// Connections served at once; past it, a 503.
const MAX_CONNECTIONS: usize = 32;
const MAX_LINE: u64 = 8 * 1024 + 64;
const MAX_HEADERS: usize = 100;

/// The session's client, to carry requests on.
#[derive(Clone)]
struct Link {
    client: AgentClient<Channel>,
    handle: tokio::runtime::Handle,
    sandbox_id: String,
    token: String,
}

fn link() -> &'static Mutex<Option<Link>> {
    static LINK: OnceLock<Mutex<Option<Link>>> = OnceLock::new();
    LINK.get_or_init(Mutex::default)
}

/// The session's client, once a session is accepted (called from within the runtime).
pub fn connected(client: AgentClient<Channel>, sandbox_id: &str, token: &str) {
    *lock(link()) = Some(Link {
        client,
        handle: tokio::runtime::Handle::current(),
        sandbox_id: sandbox_id.to_string(),
        token: token.to_string(),
    });
}

/// Serves the bridge on `127.0.0.1:port` from now on (once; again on the same port does
/// nothing).
pub fn serve(port: u16) -> anyhow::Result<()> {
    static SERVING: OnceLock<Mutex<Option<u16>>> = OnceLock::new();
    let mut serving = lock(SERVING.get_or_init(Mutex::default));
    if *serving == Some(port) {
        return Ok(());
    }
    let listener = crate::origin::listen_loopback(port)
        .with_context(|| format!("cannot serve the registry bridge on 127.0.0.1:{port}"))?;
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("bridge".into()).spawn(move || {
        for mut stream in listener.incoming().flatten() {
            if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                open.fetch_sub(1, Ordering::SeqCst);
                let _ = respond(&mut stream, 503, "too many connections to the registry bridge at once\n");
                continue;
            }
            let open = open.clone();
            let spawned = std::thread::Builder::new().name("bridge-conn".into()).spawn(move || {
                let _ = handle(stream);
                open.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                tracing::warn!("cannot start a thread for a bridged request");
            }
        }
    })?;
    *serving = Some(port);
    Ok(())
}

/// A request body read and dropped (the bridge forwards none) when it is at most this long, so
/// that the answer is not lost to a reset; a longer one closes the connection after the answer.
const MAX_DRAINED: u64 = 1 << 20;

/// The request line's method and target, and the Accept header, its body (if small) read and
/// dropped; None when it is malformed.
fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<(String, String, String)>> {
    let mut line = String::new();
    reader.by_ref().take(MAX_LINE).read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(_version)) = (parts.next(), parts.next(), parts.next()) else {
        return Ok(None);
    };
    let (method, target) = (method.to_string(), target.to_string());
    let mut accept = String::new();
    let mut body = 0u64;
    for _ in 0..MAX_HEADERS {
        let mut header = String::new();
        if reader.by_ref().take(MAX_LINE).read_line(&mut header)? == 0 || header.trim().is_empty() {
            if body <= MAX_DRAINED {
                std::io::copy(&mut reader.by_ref().take(body), &mut std::io::sink())?;
            }
            return Ok(Some((method, target, accept)));
        }
        let Some((name, value)) = header.split_once(':') else { continue };
        if name.trim().eq_ignore_ascii_case("accept") {
            accept = value.trim().to_string();
        } else if name.trim().eq_ignore_ascii_case("content-length") {
            body = value.trim().parse().unwrap_or(u64::MAX);
        }
    }
    Ok(None)
}

fn handle(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(120)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some((method, target, accept)) = read_request(&mut reader)? else {
        return respond(&mut stream, 400, "a malformed HTTP request\n");
    };
    let Some(link) = lock(link()).clone() else {
        return respond(&mut stream, 503, "the agent is not connected to its controller yet\n");
    };
    let request =
        FetchRequest { sandbox_id: link.sandbox_id.clone(), token: link.token.clone(), method, target, accept };
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let mut client = link.client.clone();
    link.handle.spawn(async move {
        let mut replies = match client.fetch(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                let _ = tx.send(Err(status.message().to_string())).await;
                return;
            }
        };
        loop {
            match replies.message().await {
                Ok(Some(reply)) => {
                    if tx.send(Ok(reply)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(status) => {
                    let _ = tx.send(Err(status.message().to_string())).await;
                    return;
                }
            }
        }
    });
    let head = match rx.blocking_recv() {
        Some(Ok(reply)) => match reply.body {
            Some(fetch_reply::Body::Head(head)) => head,
            _ => return respond(&mut stream, 502, "the controller answered without a head\n"),
        },
        Some(Err(why)) => return respond(&mut stream, 502, &format!("the controller refused the request: {why}\n")),
        None => return respond(&mut stream, 502, "the controller did not answer\n"),
    };
    let status = u16::try_from(head.status).unwrap_or(502);
    let content_type: String = head.content_type.chars().filter(|c| !c.is_control()).take(200).collect();
    write!(
        stream,
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        head.content_length
    )?;
    while let Some(Ok(reply)) = rx.blocking_recv() {
        if let Some(fetch_reply::Body::Chunk(data)) = reply.body {
            stream.write_all(&data)?;
        }
    }
    stream.flush()
}

fn respond(stream: &mut TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    let body = format!("sandbench registry bridge: {body}");
    write!(
        stream,
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        reason(status),
        body.len()
    )?;
    stream.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_request_line_and_accept_only() {
        let text = "GET /@types%2fnode HTTP/1.1\r\nHost: x\r\naccept: application/json\r\nAuthorization: no\r\n\r\n";
        let got = read_request(&mut std::io::Cursor::new(text)).unwrap();
        assert_eq!(got, Some(("GET".into(), "/@types%2fnode".into(), "application/json".into())));
        // A small body is read and dropped.
        let mut post = std::io::Cursor::new("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcNEXT");
        assert_eq!(read_request(&mut post).unwrap().unwrap().0, "POST");
        assert_eq!(post.position(), post.get_ref().len() as u64 - 4);
        assert_eq!(read_request(&mut std::io::Cursor::new("garbage\r\n\r\n")).unwrap(), None);
        let many = format!("GET / HTTP/1.1\r\n{}", "X: y\r\n".repeat(200));
        assert_eq!(read_request(&mut std::io::Cursor::new(many)).unwrap(), None);
    }
}
