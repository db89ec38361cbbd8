//! The freezer: a TCP relay between the daemon and Redis that can be told to stop passing client
//! bytes after the next script call, to freeze a daemon's conversation with Redis at a chosen
//! point (for crash-window tests). Not to be confused with the product's Idempotency-Key proxy.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const OPEN: u8 = 0;
/// Pass client writes until one carries an `EVALSHA` (a script call), then freeze. Other
/// commands (the daemon's periodic readiness `PING`) pass until then.
const ONE_MORE: u8 = 1;
const FROZEN: u8 = 2;

#[derive(Clone)]
pub struct Freezer {
    pub addr: SocketAddr,
    state: Arc<AtomicU8>,
}

impl Freezer {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(AtomicU8::new(OPEN));
        let shared = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        pipe(client, server, state).await;
                    }
                });
            }
        });
        Self { addr, state }
    }

    /// After the next script call is passed on, pass nothing more from clients.
    pub fn freeze_after_next_script(&self) {
        self.state.store(ONE_MORE, Ordering::SeqCst);
    }
}

async fn pipe(client: TcpStream, server: TcpStream, state: Arc<AtomicU8>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            match state.load(Ordering::SeqCst) {
                FROZEN => std::future::pending::<()>().await,
                ONE_MORE if contains(&buffer[..n], b"EVALSHA") => {
                    state.store(FROZEN, Ordering::SeqCst)
                }
                _ => {}
            }
            if server_write.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    };
    let downstream = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    };
    tokio::select! {
        () = upstream => {},
        () = downstream => {},
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
