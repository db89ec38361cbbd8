//! A real HTTP upstream for the Idempotency-Key proxy: it counts executions per
//! `Idempotency-Key` and path, records every request it saw, and answers what the test scripts
//! (status, headers, body size, a delay, a hold until released, or a dropped connection), or
//! misbehaves after its head (a short body then a reset, a stall, an endless body).
//!
//! Served by hyper directly, one connection at a time as a real service would, so that
//! "drop the connection" is a real reset the proxy sees and not a simulated error.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What the upstream answers to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// `None`: a small JSON body naming this execution (`{"execution":N,...}`), so that a second
    /// execution is told apart from a replay of the first by its bytes.
    pub body_size: Option<usize>,
    pub delay: Duration,
    /// Close the connection without answering (after `delay`).
    pub drop_connection: bool,
    /// What follows the head, when not the whole body.
    pub after_head: AfterHead,
}

/// How an upstream that sent its head goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterHead {
    /// The whole body, as `body_size` says.
    Body,
    /// `Content-Length: declared`, `sent` bytes of it, then the connection is reset.
    ShortThenReset { declared: usize, sent: usize },
    /// Not one byte of body, never an end.
    Stall,
    /// A chunked body that never ends (16 KiB every few milliseconds).
    Endless,
}

impl Default for Reply {
    fn default() -> Self {
        Self {
            status: 201,
            headers: Vec::new(),
            body_size: None,
            delay: Duration::ZERO,
            drop_connection: false,
            after_head: AfterHead::Body,
        }
    }
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn body_size(mut self, size: usize) -> Self {
        self.body_size = Some(size);
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// After the head: see [`AfterHead`].
    pub fn then(mut self, after_head: AfterHead) -> Self {
        self.after_head = after_head;
        self
    }

    pub fn dropped() -> Self {
        Self {
            drop_connection: true,
            ..Self::default()
        }
    }
}

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    /// Path and query, as sent.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap()
    }
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
    /// Per path a queue of replies: each request takes the front one, the last one stays.
    script: Mutex<HashMap<String, VecDeque<Reply>>>,
    /// When set, each request takes a permit before answering (0 permits = hold everything).
    gate: Mutex<Option<Arc<Semaphore>>>,
}

/// The upstream server; it lives as long as the test's runtime.
#[derive(Clone)]
pub struct Upstream {
    shared: Arc<Shared>,
    pub addr: SocketAddr,
}

impl Upstream {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let state = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        handle(Arc::clone(&state), request)
                    });
                    // An error here is the connection we dropped on purpose, or a client gone.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { shared, addr }
    }

    /// The base URL a proxy's `upstream` key points at.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request to `path` is answered with `reply` from now on.
    pub fn answer(&self, path: &str, reply: Reply) {
        self.answer_in_turn(path, vec![reply]);
    }

    /// Requests to `path` are answered with `replies` in turn; the last one stays.
    pub fn answer_in_turn(&self, path: &str, replies: Vec<Reply>) {
        assert!(!replies.is_empty());
        let mut script = self.shared.script.lock().unwrap();
        script.insert(path.to_owned(), replies.into());
    }

    /// Holds every request (after it is counted) until the returned semaphore gets permits.
    pub fn hold(&self) -> Arc<Semaphore> {
        let gate = Arc::new(Semaphore::new(0));
        *self.shared.gate.lock().unwrap() = Some(Arc::clone(&gate));
        gate
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// How many times the upstream executed a request carrying this `Idempotency-Key` header
    /// value (verbatim) to this path.
    pub fn executions(&self, key: &str, path: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.path() == path && s.header("idempotency-key") == Some(key))
            .count()
    }

    /// How many requests reached this path at all.
    pub fn hits(&self, path: &str) -> usize {
        self.seen().iter().filter(|s| s.path() == path).count()
    }

    /// The last request to reach `path`.
    pub fn last(&self, path: &str) -> Seen {
        self.seen()
            .into_iter()
            .rev()
            .find(|s| s.path() == path)
            .unwrap_or_else(|| panic!("the upstream saw no request to {path}"))
    }
}

type ReplyBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// The body that follows the head: `body` whole, or the misbehaviour `after_head` names.
fn reply_body(body: Bytes, after_head: AfterHead) -> ReplyBody {
    type Item = Result<Frame<Bytes>, std::io::Error>;
    match after_head {
        AfterHead::Body => Full::new(body)
            .map_err(|never| match never {})
            .boxed_unsync(),
        AfterHead::ShortThenReset { sent, .. } => {
            // The pause lets hyper flush the head and the short body before the error makes it
            // drop the connection, as a process that crashes mid-answer would.
            let short = Bytes::from(vec![b's'; sent]);
            let frames = futures_util::stream::unfold(Some(short), |short| async move {
                match short {
                    Some(short) => Some((Ok(Frame::data(short)), None)),
                    None => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let reset = std::io::Error::other("reset on purpose after a short body");
                        Some((Err(reset), None))
                    }
                }
            });
            StreamBody::new(frames).boxed_unsync()
        }
        AfterHead::Stall => StreamBody::new(futures_util::stream::pending::<Item>()).boxed_unsync(),
        AfterHead::Endless => {
            let chunks = futures_util::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Some((Ok(Frame::data(Bytes::from(vec![b'e'; 16 << 10]))), ()))
            });
            StreamBody::new(chunks).boxed_unsync()
        }
    }
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ReplyBody>, std::io::Error> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let seen = Seen {
        method: parts.method,
        target: parts
            .uri
            .path_and_query()
            .map_or("/".to_owned(), |p| p.as_str().to_owned()),
        headers: parts.headers,
        body,
    };
    let path = seen.path().to_owned();
    let key = seen.header("idempotency-key").unwrap_or("").to_owned();
    let execution = {
        let mut all = shared.seen.lock().unwrap();
        all.push(seen);
        all.len()
    };
    let reply = {
        let mut script = shared.script.lock().unwrap();
        match script.get_mut(&path) {
            Some(queue) if queue.len() > 1 => queue.pop_front().unwrap(),
            Some(queue) => queue[0].clone(),
            None => Reply::default(),
        }
    };
    let gate = shared.gate.lock().unwrap().clone();
    if let Some(gate) = gate {
        gate.acquire().await.unwrap().forget();
    }
    tokio::time::sleep(reply.delay).await;
    if reply.drop_connection {
        return Err(std::io::Error::other("dropped on purpose"));
    }
    let body = match reply.body_size {
        Some(size) => Bytes::from(vec![b'b'; size]),
        None => Bytes::from(format!(
            r#"{{"execution":{execution},"path":{path:?},"key":{key:?}}}"#
        )),
    };
    let mut response = Response::new(reply_body(body, reply.after_head));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap();
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    if let AfterHead::ShortThenReset { declared, .. } = reply.after_head {
        headers.insert("content-length", HeaderValue::from(declared));
    }
    for (name, value) in &reply.headers {
        headers.append(
            HeaderName::try_from(name.as_str()).unwrap(),
            HeaderValue::try_from(value.as_str()).unwrap(),
        );
    }
    Ok(response)
}
