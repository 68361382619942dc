//! Accepting connections so that no client can lock the others out.
//!
//! `axum::serve` reads request headers without a deadline and accepts without bound: a
//! client that opens thousands of connections and never finishes a header holds them
//! all, and every agent and dashboard is refused once file descriptors run out. Here each
//! connection must finish each request's header (and TLS handshake) within
//! `header_read_timeout` (an idle keep-alive connection is closed by the same rule), one
//! address holds at most `max_connections_per_ip` connections, and the server at most
//! `max_connections`: a connection over a cap is closed at once and counted.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::Service;
use tracing::{debug, info, warn};

/// How long a stopping server waits for requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Bounds on connections (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Time to send a request's header (and to finish the TLS handshake); also how long
    /// an idle keep-alive connection stays open. Longer than an agent's window, so an
    /// agent's connection is reused from one window to the next.
    pub header_read_timeout: Duration,
    /// Open connections in all; lowered to what the process's file-descriptor limit
    /// allows.
    pub max_connections: usize,
    /// Open connections from one IP address; 0: no bound (behind a proxy that all
    /// clients come through).
    pub max_connections_per_ip: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_read_timeout: Duration::from_secs(20),
            max_connections: 8192,
            max_connections_per_ip: 256,
        }
    }
}

/// Connections refused at a cap, for the log and the tests.
#[derive(Debug, Default)]
pub struct ConnCounters {
    pub refused_total_cap: AtomicU64,
    pub refused_ip_cap: AtomicU64,
}

/// Open connections, in all and per address.
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One connection's place under the caps, given back when it closes.
struct Slot {
    open: Arc<Mutex<Open>>,
    ip: IpAddr,
}

impl Slot {
    fn take(open: &Arc<Mutex<Open>>, ip: IpAddr, limits: &ConnLimits) -> Result<Slot, Cap> {
        let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
        if o.total >= limits.max_connections {
            return Err(Cap::Total);
        }
        let n = o.per_ip.entry(ip).or_insert(0);
        if limits.max_connections_per_ip > 0 && *n >= limits.max_connections_per_ip {
            return Err(Cap::PerIp);
        }
        *n += 1;
        o.total += 1;
        Ok(Slot {
            open: open.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut o = self.open.lock().unwrap_or_else(|p| p.into_inner());
        o.total -= 1;
        if let Some(n) = o.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                o.per_ip.remove(&self.ip);
            }
        }
    }
}

enum Cap {
    Total,
    PerIp,
}

/// Turns an accepted TCP stream into the stream HTTP is read from (TLS or not).
pub(crate) trait Handshake: Clone + Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn handshake(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;
}

/// Plain HTTP.
#[derive(Clone)]
pub(crate) struct PlainTcp;

impl Handshake for PlainTcp {
    type Stream = TcpStream;
    async fn handshake(&self, tcp: TcpStream) -> std::io::Result<TcpStream> {
        Ok(tcp)
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets requests in flight
/// finish (for at most 30 s).
pub(crate) async fn serve<H: Handshake>(
    listener: TcpListener,
    router: Router,
    handshake: H,
    limits: ConnLimits,
    counters: Arc<ConnCounters>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let limits = ConnLimits {
        max_connections: limits.max_connections.min(descriptor_budget()),
        ..limits
    };
    info!(
        max_connections = limits.max_connections,
        per_ip = limits.max_connections_per_ip,
        header_read_timeout_s = limits.header_read_timeout.as_secs_f64(),
        "accepting connections"
    );
    let open = Arc::new(Mutex::new(Open {
        total: 0,
        per_ip: HashMap::new(),
    }));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // Finished connections leave the set as the loop goes.
        while tasks.try_join_next().is_some() {}
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or memory, or a connection reset while queued:
                    // wait a little rather than spin, and go on.
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = match Slot::take(&open, peer.ip(), &limits) {
            Ok(s) => s,
            Err(cap) => {
                let (counter, which) = match cap {
                    Cap::Total => (&counters.refused_total_cap, "the server's"),
                    Cap::PerIp => (&counters.refused_ip_cap, "its address's"),
                };
                if counter.fetch_add(1, Ordering::Relaxed) % 1000 == 0 {
                    warn!(%peer, "connection refused: {which} connection cap is reached");
                }
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        tasks.spawn(connection(
            tcp,
            peer,
            slot,
            router.clone(),
            handshake.clone(),
            limits.header_read_timeout,
            stop_rx.clone(),
        ));
    }
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            "{} connections still open after {} s; closing them",
            tasks.len(),
            SHUTDOWN_GRACE.as_secs()
        );
        tasks.shutdown().await;
    }
}

async fn connection<H: Handshake>(
    tcp: TcpStream,
    peer: SocketAddr,
    _slot: Slot,
    router: Router,
    handshake: H,
    header_read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let stream = match tokio::time::timeout(header_read_timeout, handshake.handshake(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            debug!(%peer, "handshake failed: {e}");
            return;
        }
        Err(_) => {
            debug!(%peer, "handshake timed out");
            return;
        }
    };
    // Handlers see the client's address (rate limits are per address).
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        router.clone().call(req)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let finished = tokio::select! {
        r = conn.as_mut() => Some(r),
        // The guard `wait_for` returns is dropped here, before the next await.
        _ = async { let _ = stop.wait_for(|stopping| *stopping).await; } => None,
    };
    let result = match finished {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        debug!(%peer, "connection closed: {e}");
    }
}

/// Connections the process can hold: its file-descriptor limit (raised to the hard
/// limit first, as servers do), less a reserve for the database, logs and webhooks.
fn descriptor_budget() -> usize {
    const RESERVE: u64 = 128;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct given, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return usize::MAX;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        return usize::MAX;
    }
    lim.rlim_cur.saturating_sub(RESERVE).max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_per_address_and_in_all_and_come_back_when_dropped() {
        let limits = ConnLimits {
            header_read_timeout: Duration::from_secs(1),
            max_connections: 3,
            max_connections_per_ip: 2,
        };
        let open = Arc::new(Mutex::new(Open {
            total: 0,
            per_ip: HashMap::new(),
        }));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = Slot::take(&open, a, &limits).ok().unwrap();
        let _a2 = Slot::take(&open, a, &limits).ok().unwrap();
        assert!(matches!(Slot::take(&open, a, &limits), Err(Cap::PerIp)));
        let _b1 = Slot::take(&open, b, &limits).ok().unwrap();
        assert!(matches!(Slot::take(&open, b, &limits), Err(Cap::Total)));
        drop(a1);
        let _b2 = Slot::take(&open, b, &limits).ok().unwrap();
        assert_eq!(open.lock().unwrap().total, 3);
    }
}
