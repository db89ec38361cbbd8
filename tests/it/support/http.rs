//! Raw HTTP for tests: a signed POST with given headers, and a request held half-sent.

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
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..body.len() / 2]).await.unwrap();
    stream
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
