//! A generated gRPC server with some methods served by code of their own: the methods whose
//! messages have wire twins ([`super::invoke_wire`], [`super::discovery_wire`]) are decoded
//! and encoded through the twins' codec, with the compression the generated server is
//! configured with; every other method goes to the generated server unchanged.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tonic::Status;
use tonic::body::Body;
use tonic::codec::{Codec, CompressionEncoding, EnabledCompressionEncodings};
use tonic::server::{Grpc, NamedService};

/// A server tonic generated for a service whose implementation is `A`.
pub trait GeneratedServer<A>:
    Clone
    + Send
    + 'static
    + tonic::codegen::Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>,
    >
{
    /// The server of `api`.
    fn from_api(api: Arc<A>) -> Self;
    /// Accepts requests compressed with `encoding`.
    fn accept_compressed(self, encoding: CompressionEncoding) -> Self;
    /// Compresses responses with `encoding` when the caller accepts it.
    fn send_compressed(self, encoding: CompressionEncoding) -> Self;
}

/// Implements [`GeneratedServer`] for a generated server of a service trait.
macro_rules! generated_server {
    ($server:ident, $service:path) => {
        impl<T: $service> GeneratedServer<T> for $server<T> {
            fn from_api(api: Arc<T>) -> Self {
                Self::from_arc(api)
            }
            fn accept_compressed(self, encoding: CompressionEncoding) -> Self {
                $server::accept_compressed(self, encoding)
            }
            fn send_compressed(self, encoding: CompressionEncoding) -> Self {
                $server::send_compressed(self, encoding)
            }
        }
    };
}

use crate::pb::discovery_service_server::{DiscoveryService, DiscoveryServiceServer};
use crate::pb::tool_invoke_service_server::{ToolInvokeService, ToolInvokeServiceServer};
generated_server!(DiscoveryServiceServer, DiscoveryService);
generated_server!(ToolInvokeServiceServer, ToolInvokeService);

/// The compression a server is configured with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Compression {
    accepted: EnabledCompressionEncodings,
    sent: EnabledCompressionEncodings,
}

impl Compression {
    /// tonic's server-side handling of one call with `codec`, compressing as configured.
    pub fn grpc<C: Codec>(self, codec: C) -> Grpc<C> {
        Grpc::new(codec).apply_compression_config(self.accepted, self.sent)
    }
}

/// The methods a [`WireServer`] serves itself.
pub trait OwnMethods: Send + Sync + 'static {
    /// The service's implementation.
    type Api: Send + Sync + 'static;
    /// Whether the method at `path` (`/package.Service/Method`) is served here.
    fn owns(path: &str) -> bool;
    /// Serves one call of a method [`Self::owns`].
    fn serve(
        api: Arc<Self::Api>,
        compression: Compression,
        request: http::Request<Body>,
    ) -> BoxFuture<'static, http::Response<Body>>;
}

/// A call of a method of `Api` taking `Q` and answering `R`.
pub type Call<Api, Q, R> = fn(Arc<Api>, tonic::Request<Q>) -> BoxFuture<'static, Result<R, Status>>;

/// Serves `request` as a unary call of `call`, its messages read and written by prost (as the
/// generated server does: the same compression, 4 MB requests).
pub fn unary<A, Q, R>(
    api: Arc<A>,
    call: Call<A, Q, R>,
    compression: Compression,
    request: http::Request<Body>,
) -> BoxFuture<'static, http::Response<Body>>
where
    A: Send + Sync + 'static,
    Q: prost::Message + Default + Send + 'static,
    R: prost::Message + Send + 'static,
{
    Box::pin(async move {
        let codec = tonic_prost::ProstCodec::<R, Q>::default();
        compression
            .grpc(codec)
            .unary(Unary { api, call }, request)
            .await
    })
}

struct Unary<A, Q, R> {
    api: Arc<A>,
    call: Call<A, Q, R>,
}

impl<A, Q, R> tonic::server::UnaryService<Q> for Unary<A, Q, R>
where
    A: Send + Sync + 'static,
    R: Send + 'static,
{
    type Response = R;
    type Future = BoxFuture<'static, Result<tonic::Response<R>, Status>>;

    fn call(&mut self, request: tonic::Request<Q>) -> Self::Future {
        let answer = (self.call)(Arc::clone(&self.api), request);
        Box::pin(async move { answer.await.map(tonic::Response::new) })
    }
}

/// The generated server `G` with the methods of `M` served by `M` (see the module docs).
pub struct WireServer<G, M: OwnMethods> {
    api: Arc<M::Api>,
    generated: G,
    compression: Compression,
    method: PhantomData<fn() -> M>,
}

impl<G, M: OwnMethods> std::fmt::Debug for WireServer<G, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireServer")
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

impl<G: Clone, M: OwnMethods> Clone for WireServer<G, M> {
    fn clone(&self) -> Self {
        Self {
            api: Arc::clone(&self.api),
            generated: self.generated.clone(),
            compression: self.compression,
            method: PhantomData,
        }
    }
}

impl<G: GeneratedServer<M::Api>, M: OwnMethods> WireServer<G, M> {
    /// Serves `api`.
    pub fn new(api: M::Api) -> Self {
        let api = Arc::new(api);
        Self {
            generated: G::from_api(Arc::clone(&api)),
            api,
            compression: Compression::default(),
            method: PhantomData,
        }
    }

    /// Accepts requests compressed with `encoding`.
    pub fn accept_compressed(mut self, encoding: CompressionEncoding) -> Self {
        self.generated = self.generated.accept_compressed(encoding);
        self.compression.accepted.enable(encoding);
        self
    }

    /// Compresses responses with `encoding` when the caller accepts it.
    pub fn send_compressed(mut self, encoding: CompressionEncoding) -> Self {
        self.generated = self.generated.send_compressed(encoding);
        self.compression.sent.enable(encoding);
        self
    }
}

impl<G: NamedService, M: OwnMethods> NamedService for WireServer<G, M> {
    const NAME: &'static str = G::NAME;
}

impl<G: GeneratedServer<M::Api>, M: OwnMethods> tonic::codegen::Service<http::Request<Body>>
    for WireServer<G, M>
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if !M::owns(request.uri().path()) {
            return self.generated.call(request);
        }
        M::serve(Arc::clone(&self.api), self.compression, request)
            .map(Ok)
            .boxed()
    }
}
