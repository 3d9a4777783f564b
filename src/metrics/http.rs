//! The metrics endpoint: `GET /metrics` over HTTP/1.1, as Prometheus scrapes, on a listener
//! of its own (the gRPC port speaks only HTTP/2), with `GET /livez` and `GET /readyz` beside
//! it for probes that speak HTTP (Kubernetes' gRPC probes cannot use TLS). Anything else is
//! answered 404 or 405.

use std::convert::Infallible;
use std::time::Duration;

use futures_util::StreamExt;
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
    // Accepting waits a moment after failing, as when out of file descriptors.
    let mut incoming = std::pin::pin!(crate::grpc::accepting::accepted(listener));
    loop {
        tokio::select! {
            accepted = incoming.next() => match accepted {
                Some(Ok(stream)) => {
                    let sources = sources.clone();
                    connections.spawn(serve_connection(stream, sources));
                }
                Some(Err(error)) => tracing::debug!(%error, "cannot accept a metrics connection"),
                None => return,
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
    answer_to(request.method(), request.uri().path(), sources)
}

/// The paths served, each with what it answers.
const PATHS: &str = "/metrics, /livez or /readyz";

fn answer_to(method: &Method, path: &str, sources: &MetricsSources) -> Response<String> {
    let respond = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(body)
            .expect("a valid response")
    };
    let text = "text/plain; charset=utf-8";
    let (status, content_type, body) = match path {
        "/metrics" => (StatusCode::OK, CONTENT_TYPE, render(sources)),
        // Alive while the process answers at all.
        "/livez" => (StatusCode::OK, text, "ok\n".to_owned()),
        // Ready while serving; not once shutdown has begun, so no new calls are sent here.
        "/readyz" if sources.serving.is_serving() => (StatusCode::OK, text, "serving\n".to_owned()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            text,
            "shutting down\n".to_owned(),
        ),
        _ => {
            let body = format!("not found: the paths served are {PATHS}\n");
            return respond(StatusCode::NOT_FOUND, text, body);
        }
    };
    match *method {
        Method::GET => respond(status, content_type, body),
        Method::HEAD => respond(status, content_type, String::new()),
        _ => {
            let mut response = respond(
                StatusCode::METHOD_NOT_ALLOWED,
                text,
                format!("method not allowed: GET {path}\n"),
            );
            response.headers_mut().insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static("GET, HEAD"),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readiness_follows_the_serving_state_and_liveness_does_not() {
        let sources = super::super::test_sources();
        let status = |path: &str| answer_to(&Method::GET, path, &sources).status();
        assert_eq!(status("/livez"), StatusCode::OK);
        assert_eq!(status("/readyz"), StatusCode::OK);
        sources.serving.shut_down();
        assert_eq!(status("/livez"), StatusCode::OK);
        assert_eq!(status("/readyz"), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status("/health"), StatusCode::NOT_FOUND);
        let posted = answer_to(&Method::POST, "/readyz", &sources);
        assert_eq!(posted.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
