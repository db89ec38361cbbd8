//! The benchmark's upstream: answers every request `201` with the same small JSON body, over
//! keep-alive HTTP/1.1. As fast as a server can be, so that what is measured is the proxy.
//!
//! Usage: `upstream LISTEN`

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const BODY: &[u8] = br#"{"id":"ord_0123456789","status":"created","amount":4200,"currency":"eur"}"#;

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    // Read the body, as a real service would, before answering.
    let _ = request.into_body().collect().await;
    let response = Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(BODY)))
        .unwrap();
    Ok(response)
}

#[tokio::main]
async fn main() {
    let listen = std::env::args().nth(1).expect("usage: upstream LISTEN");
    let listener = TcpListener::bind(&listen).await.unwrap();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer))
                .await;
        });
    }
}
