//! Raw HTTP for tests: a signed POST with given headers, a request held half-sent, stalled or
//! trickled, and raw bytes for requests no HTTP client would send.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Posts `body` with `headers` to `url`.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    headers: &[(String, String)],
) -> reqwest::Response {
    let mut request = client.post(url).body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    request.send().await.expect("request sent")
}

/// Opens a raw connection and sends a request's head and the first part of its body, holding
/// the request in flight until the rest is written.
pub async fn start_slow_request(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> TcpStream {
    start_request(addr, path, headers, body.len(), &body[..body.len() / 2]).await
}

/// Opens a raw connection and sends a POST's head declaring `content_length` bytes, then only
/// `first` of them: a body that stalls.
pub async fn start_request(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    content_length: usize,
    first: &[u8],
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head =
        format!("POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {content_length}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(first).await.unwrap();
    stream
}

/// Reads what the server sends until it closes (or resets) the connection, at most 10 s: the
/// whole answer.
pub async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read_all = async {
        while let Ok(n @ 1..) = stream.read(&mut buffer).await {
            answer.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("the server closes the connection within 10s");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `bytes` as they are on a new connection and returns everything the server answers
/// before it closes the connection.
pub async fn exchange_raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    read_to_close(&mut stream).await
}

/// Sends the rest of a slow request's body and returns the response's status line and headers.
pub async fn finish_slow_request(mut stream: TcpStream, body: &[u8]) -> String {
    stream.write_all(&body[body.len() / 2..]).await.unwrap();
    let mut response = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut response))
        .await
        .expect("response within 10s")
        .unwrap();
    String::from_utf8_lossy(&response[..n]).into_owned()
}

/// How [`send_slowly`] frames a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` declares the whole body.
    Length,
    /// `Transfer-Encoding: chunked`, one HTTP chunk per write.
    Chunked,
}

/// Sends `POST path` with `headers` and a body of `total` bytes in writes of `chunk` bytes with
/// `pause` between them, as a client does that writes its whole body before it reads; returns the
/// connection for the answer, or the first write error (a reset by a server that closed early).
pub async fn send_slowly(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    framing: Framing,
    total: usize,
    chunk: usize,
    pause: Duration,
) -> std::io::Result<TcpStream> {
    let body = vec![b'x'; total];
    send_body_slowly(addr, path, headers, framing, &body, chunk, pause).await
}

/// [`send_slowly`] with the body's bytes given.
pub async fn send_body_slowly(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    framing: Framing,
    body: &[u8],
    chunk: usize,
    pause: Duration,
) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: test\r\n");
    match framing {
        Framing::Length => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
        Framing::Chunked => head.push_str("Transfer-Encoding: chunked\r\n"),
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    for data in body.chunks(chunk) {
        if framing == Framing::Chunked {
            stream
                .write_all(format!("{:x}\r\n", data.len()).as_bytes())
                .await?;
        }
        stream.write_all(data).await?;
        if framing == Framing::Chunked {
            stream.write_all(b"\r\n").await?;
        }
        tokio::time::sleep(pause).await;
    }
    if framing == Framing::Chunked {
        stream.write_all(b"0\r\n\r\n").await?;
    }
    stream.flush().await?;
    Ok(stream)
}

/// Reads one answer: its status line and headers (returned) and its `Content-Length` body
/// (consumed, so the connection is ready for the next answer), at most 10 s.
pub async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await? == 0 {
                return Ok(());
            }
            head.push(byte[0]);
        }
        let length = String::from_utf8_lossy(&head)
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await?;
        Ok::<_, std::io::Error>(())
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .map_err(|_| std::io::Error::other("no answer within 10s"))??;
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// Sends `POST path`'s head declaring `declared` body bytes, then one byte every `pause` until the
/// server answers (as a client does whose body trickles), and returns the answer's head. What
/// ends the trickle is the server's deadline, not the client: if every declared byte is sent
/// first, the answer is simply awaited (at most 10 s, as in [`read_head`]).
pub async fn trickle(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    declared: usize,
    pause: Duration,
) -> std::io::Result<String> {
    let stream = start_request(addr, path, headers, declared, b"").await;
    let (mut reader, mut writer) = stream.into_split();
    let drip = async {
        for _ in 0..declared {
            // A write error is the server closing after its answer: the answer is read below.
            if writer.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        head = read_head(&mut reader) => head,
        () = drip => unreachable!("the drip never ends by itself"),
    }
}
