//! A root in a sandbox attacking its socket, as plain bytes: connections opened and left
//! silent, and HTTP/2 streams opened by the thousand on one connection (hand-made frames, so no
//! client library politely waits for the server's stream limit).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the server did to a flood of streams on one connection.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Streams {
    /// Streams the server reset (refused past its limit, or ended).
    pub reset: u32,
    /// Whether it sent GOAWAY or closed the connection.
    pub closed: bool,
}

/// Opens `n` connections to `socket` and leaves them silent; returns those that connected.
pub fn idle_connections(socket: &Path, n: usize) -> Vec<UnixStream> {
    (0..n).filter_map(|_| UnixStream::connect(socket).ok()).collect()
}

/// How many of `connections` the server closed (EOF or an error on read) within `wait`.
pub fn closed_by_server(connections: &[UnixStream], wait: Duration) -> usize {
    let deadline = Instant::now() + wait;
    let mut closed = vec![false; connections.len()];
    while Instant::now() < deadline && closed.iter().any(|c| !c) {
        for (c, done) in connections.iter().zip(closed.iter_mut()).filter(|(_, d)| !**d) {
            let _ = c.set_nonblocking(true);
            let mut buf = [0u8; 4096];
            // The server's SETTINGS may come first; EOF or a reset says it closed.
            loop {
                match (&*c).read(&mut buf) {
                    Ok(0) => {
                        *done = true;
                        break;
                    }
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        *done = true;
                        break;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    closed.iter().filter(|c| **c).count()
}

/// The header block of the agent's session call (HPACK, no Huffman, no indexing).
fn session_headers() -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    let literal = |block: &mut Vec<u8>, index: &[u8], value: &str| {
        block.extend_from_slice(index);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    };
    literal(&mut block, &[0x04], "/sandbench.v1.Agent/Session"); // :path
    literal(&mut block, &[0x01], "controller"); // :authority
    literal(&mut block, &[0x0f, 0x10], "application/grpc"); // content-type
    block.extend_from_slice(&[0x00, 0x02, b't', b'e', 0x08]);
    block.extend_from_slice(b"trailers");
    block
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Opens `n` streams of the session call on one new connection, each left without a message,
/// and reads what the server answers for `wait` (acking its SETTINGS and PINGs).
pub fn open_streams(socket: &Path, n: u32, wait: Duration) -> std::io::Result<Streams> {
    let mut conn = UnixStream::connect(socket)?;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    let headers = session_headers();
    for k in 0..n {
        out.extend(frame(0x1, 0x4, 1 + 2 * k, &headers));
    }
    // A refused connection may already be closed: what was written is what it got.
    let _ = conn.write_all(&out);
    conn.set_read_timeout(Some(Duration::from_millis(100)))?;
    let deadline = Instant::now() + wait;
    let mut seen = Streams::default();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    while Instant::now() < deadline && !seen.closed {
        match conn.read(&mut chunk) {
            Ok(0) => seen.closed = true,
            Ok(got) => buf.extend_from_slice(&chunk[..got]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => seen.closed = true,
        }
        while buf.len() >= 9 {
            let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let payload: Vec<u8> = buf[9..9 + len].to_vec();
            buf.drain(..9 + len);
            match kind {
                0x3 => seen.reset += 1,
                0x7 => seen.closed = true,
                0x4 if flags & 1 == 0 => {
                    let _ = conn.write_all(&frame(0x4, 1, 0, &[]));
                }
                0x6 if flags & 1 == 0 => {
                    let _ = conn.write_all(&frame(0x6, 1, 0, &payload));
                }
                _ => {}
            }
        }
    }
    Ok(seen)
}
