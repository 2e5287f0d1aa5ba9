//! The HTTP endpoint Prometheus scrapes, shared by servers and mounts:
//! `GET /metrics` answers with a registry's metrics in the Prometheus text
//! format (0.0.4, what every scraper reads); another path is 404, another
//! method 405. HTTP/1.1 by hyper, one task per connection on the caller's
//! runtime: a scrape a second is a few hundred microseconds of one task.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::ALLOW;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::exposition::{text, Registry, CONTENT_TYPE};

/// The one path served.
pub const PATH: &str = "/metrics";

/// How long a connection may take to send a request's headers: a client
/// that connects and says nothing holds a task no longer than this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Listens on `addr` for scrapes; the caller names the address in its
/// error (which setting or option it came from).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers scrapes on `listener` with `registry`'s metrics until the task
/// is dropped or aborted.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was
                // taken: the next accept may succeed; don't spin meanwhile.
                tracing::warn!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = answer(&registry, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!("metrics endpoint: a connection ended: {e}");
            }
        });
    }
}

fn answer(registry: &Registry, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r
    };
    if req.uri().path() != PATH {
        return reply(
            StatusCode::NOT_FOUND,
            format!("only {PATH} is served here\n"),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{PATH} answers GET\n"),
        );
        r.headers_mut()
            .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let Ok(body) = text(registry) else {
        return reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reading the metrics failed\n".into(),
        );
    };
    let mut r = reply(StatusCode::OK, body);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(CONTENT_TYPE),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{counter, Collector, DescriptorEncoder};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Debug)]
    struct One;
    impl Collector for One {
        fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
            counter(&mut enc, "scraped", "A counter.", None, 7)
        }
    }

    async fn ask(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_the_registry_on_its_path_only() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut registry = Registry::with_prefix("shoal");
        registry.register_collector(Box::new(One));
        let server = tokio::spawn(serve(listener, Arc::new(registry)));
        let close = "Host: x\r\nConnection: close\r\n\r\n";
        let ok = ask(addr, &format!("GET /metrics HTTP/1.1\r\n{close}")).await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        assert!(ok.contains("\nshoal_scraped_total 7\n"), "{ok}");
        let elsewhere = ask(addr, &format!("GET / HTTP/1.1\r\n{close}")).await;
        assert!(elsewhere.starts_with("HTTP/1.1 404"), "{elsewhere}");
        let post = ask(addr, &format!("POST /metrics HTTP/1.1\r\n{close}")).await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        server.abort();
    }
}
