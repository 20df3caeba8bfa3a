//! A delaying TCP proxy in front of the AWS stand-in: every chunk is held for a while on
//! its way to the stand-in and on its way back, so provider calls are in flight long enough
//! for a kill to land inside one. It can be taken down (port closed, every connection
//! dropped: a provider outage) and brought back on the same port.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct DelayProxy {
    pub port: u16,
    upstream: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    task: Option<JoinHandle<()>>,
}

impl DelayProxy {
    pub async fn start(upstream: SocketAddr, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let task = Some(tokio::spawn(serve(listener, upstream, delay_ms.clone())));
        Self {
            port,
            upstream,
            delay_ms,
            task,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// Provider outage: the port refuses connections and open ones are dropped.
    pub fn down(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// The provider is back, on the same port.
    pub async fn up(&mut self) {
        if self.task.is_some() {
            return;
        }
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("rebind the delay proxy on {}: {e}", self.port),
            }
        };
        self.task = Some(tokio::spawn(serve(
            listener,
            self.upstream,
            self.delay_ms.clone(),
        )));
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.down();
    }
}

async fn serve(listener: TcpListener, upstream: SocketAddr, delay_ms: Arc<AtomicU64>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        let delay_ms = delay_ms.clone();
        connections.spawn(async move {
            let Ok(outbound) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            let up = pump(ri, wo, delay_ms.clone());
            let down = pump(ro, wi, delay_ms);
            tokio::select! {
                _ = up => {}
                _ = down => {}
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn pump<R, W>(mut from: R, mut to: W, delay_ms: Arc<AtomicU64>)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay = delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
