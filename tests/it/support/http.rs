//! Raw HTTP for tests: a signed POST with given headers, a request held half-sent or stalled, and
//! raw bytes for requests no HTTP client would send.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
