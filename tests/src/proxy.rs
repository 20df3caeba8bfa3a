//! A TCP forwarder to stand between a client and PostgreSQL, so a test can cut the
//! database off (every connection dropped, the port closed) and bring it back on the
//! same port, without disturbing other tests that share the server.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub port: u16,
    upstream: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding a fresh local port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut proxy = Self {
            port,
            upstream,
            task: None,
        };
        proxy.task = Some(tokio::spawn(serve(listener, upstream)));
        proxy
    }

    /// Closes the port and every forwarded connection.
    pub fn cut(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Listens again on the same port.
    pub async fn restore(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.task = Some(tokio::spawn(serve(listener, self.upstream)));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

async fn serve(listener: TcpListener, upstream: SocketAddr) {
    // connections live in this task's JoinSet: aborting the task drops them all
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        connections.spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}
