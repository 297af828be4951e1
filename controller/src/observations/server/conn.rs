//! The connections agents open on a sandbox's socket, each bounded: how many one socket holds
//! at once (the accept loop takes a slot per connection, [`Guarded`] gives it back when the
//! connection ends), how long a connection may go before a Hello is accepted on it, and how
//! long it may stay silent. Root in a sandbox can open its socket as often as it likes; these
//! keep what that costs the controller small and fixed.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// Connections one socket holds at once: an agent uses one, and a reconnection may overlap the
/// old one while it closes; beyond, a connection is closed as soon as it is accepted.
pub const MAX_CONNECTIONS_PER_SOCKET: usize = 4;
/// HTTP/2 streams one connection may have open: an agent's session is one stream, and the
/// registry bridge's requests (`Fetch`) take up to 8 more.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 10;

/// Whether a Hello was accepted on a connection (set by the session, read by the connection).
#[derive(Debug, Clone, Default)]
pub struct Greeted(Arc<AtomicBool>);

impl Greeted {
    pub fn mark(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// An accepted connection holding its socket's slot: it fails (and hyper closes it) when no
/// Hello was accepted on it within `hello_timeout` of its accept, or when nothing was read from
/// it for `idle_timeout`.
pub struct Guarded {
    io: UnixStream,
    _slot: OwnedSemaphorePermit,
    greeted: Greeted,
    /// Until a Hello is accepted.
    hello_by: Option<Pin<Box<Sleep>>>,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
}

impl Guarded {
    pub fn new(io: UnixStream, slot: OwnedSemaphorePermit, hello_timeout: Duration, idle_timeout: Duration) -> Guarded {
        Guarded {
            io,
            _slot: slot,
            greeted: Greeted::default(),
            hello_by: Some(Box::pin(tokio::time::sleep(hello_timeout))),
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
        }
    }

    /// Why the connection must end now, if it must (registering the timers' wake-ups if not).
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if let Some(deadline) = &mut self.hello_by {
            if self.greeted.is_set() {
                self.hello_by = None;
            } else if deadline.as_mut().poll(cx).is_ready() {
                return Some(io::Error::new(io::ErrorKind::TimedOut, "no Hello accepted on the connection in time"));
            }
        }
        if self.idle.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(io::ErrorKind::TimedOut, "the connection was silent too long"));
        }
        None
    }
}

impl Connected for Guarded {
    type ConnectInfo = Greeted;

    fn connect_info(&self) -> Greeted {
        self.greeted.clone()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(err) = this.expired(cx) {
            return Poll::Ready(Err(err));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let next = Instant::now() + this.idle_timeout;
            this.idle.as_mut().reset(next);
        }
        read
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
