//! One keep-alive HTTP/1.1 connection per concurrency slot, speaking just enough HTTP for a load test.
//!
//! Why not a general client: the generator shares two cores with the daemon it measures, so every
//! microsecond it spends is taken from the thing under test. A request here is bytes serialised
//! once (or, for timestamped schemes, into a reused buffer), written with one syscall, and an
//! answer parsed in place with `httparse`: no header maps, no body streams, no pool. The servers
//! it talks to (hookonce, the baseline, adnanh/webhook) answer with small bodies framed by
//! `Content-Length` or chunked encoding; both are handled, and anything else closes the connection.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the generator keeps of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// `Idempotency-Replayed: true`: hookonce recognised a duplicate.
    pub replayed: bool,
}

pub struct Connection {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    buffer: Vec<u8>,
}

fn protocol(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

impl Connection {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            stream: None,
            buffer: Vec::with_capacity(4096),
        }
    }

    /// Sends one serialised request and reads its answer, within `timeout`.
    ///
    /// Any error drops the connection so the next call starts a fresh one. A connection that was
    /// reused and closed by the server before sending a byte (an idle keep-alive timeout) is
    /// retried once on a new connection, as browsers do; webhook deliveries are idempotent here.
    pub async fn send(&mut self, request: &[u8], timeout: Duration) -> io::Result<Answer> {
        let result = tokio::time::timeout(timeout, async {
            let reused = self.stream.is_some();
            match self.exchange(request).await {
                Err(e) if reused && e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.stream = None;
                    self.exchange(request).await
                }
                other => other,
            }
        })
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "request timed out")));
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn exchange(&mut self, request: &[u8]) -> io::Result<Answer> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
        }
        let stream = self.stream.as_mut().expect("connected above");
        stream.write_all(request).await?;
        self.buffer.clear();
        let (answer, head_len, framing, close) = loop {
            if read_more(stream, &mut self.buffer).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if let Some(head) = parse_head(&self.buffer)? {
                break head;
            }
        };
        match framing {
            Framing::Length(length) => {
                while self.buffer.len() < head_len + length {
                    if read_more(stream, &mut self.buffer).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
            }
            Framing::Chunked => {
                while !chunked_complete(&self.buffer[head_len..])? {
                    if read_more(stream, &mut self.buffer).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
            }
        }
        if close {
            self.stream = None;
        }
        Ok(answer)
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> io::Result<usize> {
    if buffer.capacity() - buffer.len() < 1024 {
        buffer.reserve(4096);
    }
    stream.read_buf(buffer).await
}

enum Framing {
    Length(usize),
    Chunked,
}

/// Parses the status line and headers once they are complete.
fn parse_head(buffer: &[u8]) -> io::Result<Option<(Answer, usize, Framing, bool)>> {
    let mut headers = [httparse::EMPTY_HEADER; 24];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buffer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(protocol("unparsable HTTP response")),
    };
    let status = response.code.ok_or_else(|| protocol("no status code"))?;
    let mut framing = None;
    let mut close = response.version == Some(0);
    let mut replayed = false;
    for header in response.headers.iter() {
        let value = header.value;
        if header.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(value).map_err(|_| protocol("bad content-length"))?;
            let length = text.trim().parse().map_err(|_| protocol("bad length"))?;
            framing = Some(Framing::Length(length));
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            framing = Some(Framing::Chunked);
        } else if header.name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case(b"close");
        } else if header.name.eq_ignore_ascii_case("idempotency-replayed") {
            replayed = value.eq_ignore_ascii_case(b"true");
        }
    }
    // No framing means "until the connection closes", which keep-alive cannot use: take the
    // status, and drop the connection so that whatever body follows is discarded with it.
    let framing = framing.unwrap_or_else(|| {
        close = true;
        Framing::Length(0)
    });
    Ok(Some((
        Answer { status, replayed },
        head_len,
        framing,
        close,
    )))
}

/// Whether a chunked body is complete (it ends with the zero-length chunk and its blank line).
fn chunked_complete(mut body: &[u8]) -> io::Result<bool> {
    loop {
        let (consumed, size) = match httparse::parse_chunk_size(body) {
            Ok(httparse::Status::Complete(parsed)) => parsed,
            Ok(httparse::Status::Partial) => return Ok(false),
            Err(_) => return Err(protocol("bad chunk size")),
        };
        let size = usize::try_from(size).map_err(|_| protocol("chunk too large"))?;
        // The chunk's data and its CRLF; the last chunk has no data but ends with a blank line.
        let needed = consumed + size + 2;
        if body.len() < needed {
            return Ok(false);
        }
        if size == 0 {
            return Ok(true);
        }
        body = &body[needed..];
    }
}

/// Writes the request line and the fixed headers every request carries.
pub fn request_head(out: &mut Vec<u8>, path: &str, host: &str, body_len: usize) {
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\nContent-Length: ");
    out.extend_from_slice(body_len.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_chunked_bodies_are_framed() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 17\r\nidempotency-replayed: true\r\n\r\n";
        let (answer, len, framing, close) = parse_head(head).unwrap().unwrap();
        assert_eq!(
            answer,
            Answer {
                status: 200,
                replayed: true
            }
        );
        assert_eq!(len, head.len());
        assert!(matches!(framing, Framing::Length(17)));
        assert!(!close);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n").unwrap().is_none());
        assert!(!chunked_complete(b"5\r\nhello\r\n").unwrap());
        assert!(chunked_complete(b"5\r\nhello\r\n0\r\n\r\n").unwrap());
    }
}
