//! The metrics endpoint: `GET /metrics` over HTTP/1.1, as Prometheus scrapes, on a listener
//! of its own (the gRPC port speaks only HTTP/2). Anything else is answered 404 or 405.

use std::convert::Infallible;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::{CONTENT_TYPE, MetricsSources, render};

/// How long a scraper may take to send its request's headers before its connection is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers scrapes on `listener` until dropped (dropping it closes its connections too).
pub async fn serve(listener: TcpListener, sources: MetricsSources) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let sources = sources.clone();
                    connections.spawn(serve_connection(stream, sources));
                }
                Err(error) => {
                    // As when out of file descriptors: wait rather than spin.
                    tracing::warn!(%error, "cannot accept a metrics connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: tokio::net::TcpStream, sources: MetricsSources) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let answer = answer(&request, &sources);
        async move { Ok::<_, Infallible>(answer) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "metrics connection ended");
    }
}

fn answer(request: &Request<Incoming>, sources: &MetricsSources) -> Response<String> {
    let respond = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(body)
            .expect("a valid response")
    };
    let text = "text/plain; charset=utf-8";
    if request.uri().path() != "/metrics" {
        return respond(
            StatusCode::NOT_FOUND,
            text,
            "not found: the metrics are at /metrics\n".to_owned(),
        );
    }
    match *request.method() {
        Method::GET => respond(StatusCode::OK, CONTENT_TYPE, render(sources)),
        Method::HEAD => respond(StatusCode::OK, CONTENT_TYPE, String::new()),
        _ => {
            let mut response = respond(
                StatusCode::METHOD_NOT_ALLOWED,
                text,
                "method not allowed: GET /metrics\n".to_owned(),
            );
            response.headers_mut().insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static("GET, HEAD"),
            );
            response
        }
    }
}
