//! Discovery answers built from the bytes each registered tool keeps.
//!
//! Every registered tool keeps its `ToolRegistration` encoded ([`convert::encoded_tool`]): the
//! bytes are about the size of its schema text, while the decoded form is a tree of
//! `google.protobuf.Struct` values, about 20 KB of memory per KB of schema. The answers that
//! carry tools (`RegisterService`'s, which echoes the tools registered, `GetTool`,
//! `ListTools`, `SearchTools`, and the events of `WatchServices`) are sent as wire twins of
//! their messages: the same fields and numbers, with each tool (and each watch event) kept as
//! encoded bytes ([`SharedMessage`]) that are written out as they are, never decoded and
//! encoded again. The bytes are the ones the generated messages would
//! encode, field for field (tests compare them), so clients read the same messages.
//!
//! Every watcher of a tenant is sent the same `ServiceEvent` for a change; only the envelope
//! around it (`meta`: a new envelope id and time, the watcher's correlation id) is its own. The
//! event is encoded once, by the first watcher to send it, and every watcher sends those bytes
//! (shared, not copied) in its own envelope: with 1,000 watchers, a change of a service with
//! large schemas costs a thousand copies of bytes, not a thousand copies of decoded schemas. A
//! watcher's snapshot is encoded the same way, one service at a time as it is sent.
//!
//! [`DiscoveryServer`] serves `DiscoveryService` with those five methods answered through
//! [`DiscoveryWire`]; every other method goes to the generated server unchanged
//! ([`super::wire_server`]).

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::Stream;
use futures_util::future::BoxFuture;
use prost::encoding::{DecodeContext, WireType, encode_key, encode_varint};
use prost::{DecodeError, Message};
use tonic::body::Body;
use tonic::{Request, Status};

use super::convert;
use super::raw_message::RawMessage;
use super::wire_server::{Call, Compression, OwnMethods, WireServer, unary};
use crate::invoke::health::ProviderHealthBook;
use crate::pb;
use crate::pb::discovery_service_server::DiscoveryServiceServer;
use crate::registry::ServiceEntry;
use crate::registry::model::RegisteredTool;

/// The path of `DiscoveryService.WatchServices`.
pub const WATCH_SERVICES: &str = "/toolplane.v1.DiscoveryService/WatchServices";
/// The path of `DiscoveryService.GetTool`.
pub const GET_TOOL: &str = "/toolplane.v1.DiscoveryService/GetTool";
/// The path of `DiscoveryService.ListTools`.
pub const LIST_TOOLS: &str = "/toolplane.v1.DiscoveryService/ListTools";
/// The path of `DiscoveryService.SearchTools`.
pub const SEARCH_TOOLS: &str = "/toolplane.v1.DiscoveryService/SearchTools";
/// The path of `DiscoveryService.RegisterService`.
pub const REGISTER_SERVICE: &str = "/toolplane.v1.DiscoveryService/RegisterService";

/// An embedded message already encoded, shared: cloning it shares its bytes, encoding it
/// writes them as they are. Decoding one keeps each field's bytes as they arrived (as
/// [`RawMessage`] does).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SharedMessage(Bytes);

impl SharedMessage {
    /// The encoded `ToolRegistration` of `tool` of `service`.
    pub fn tool(tool: &RegisteredTool, service: &ServiceEntry) -> Self {
        Self(convert::encoded_tool(tool, service))
    }
}

impl std::fmt::Debug for SharedMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedMessage({} bytes)", self.0.len())
    }
}

impl Message for SharedMessage {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Only tests, and the bench baseline once as it starts, decode one: copying the bytes
        // on each field is simplest.
        let mut raw = RawMessage::from_encoded(BytesMut::from(&self.0[..]));
        raw.merge_field(tag, wire_type, buf, ctx)?;
        self.0 = Bytes::copy_from_slice(raw.as_bytes());
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

/// `toolplane.v1.WatchServicesResponse` with its `event` kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchServicesResponseWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `event`: an encoded `toolplane.v1.ServiceEvent`.
    #[prost(message, optional, tag = "2")]
    pub event: Option<SharedMessage>,
}

/// `toolplane.v1.GetToolResponse` with its tool kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetToolResponseWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `tool`: an encoded `toolplane.v1.ToolRegistration`.
    #[prost(message, optional, tag = "2")]
    pub tool: Option<SharedMessage>,
}

/// `toolplane.v1.ListToolsResponse` with its tools kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListToolsResponseWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `tools`: encoded `toolplane.v1.ToolRegistration`s.
    #[prost(message, repeated, tag = "2")]
    pub tools: Vec<SharedMessage>,
    /// `next_page_token`.
    #[prost(string, tag = "3")]
    pub next_page_token: String,
}

/// `toolplane.v1.ToolMatch` with its tool kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ToolMatchWire {
    /// `tool`: an encoded `toolplane.v1.ToolRegistration`.
    #[prost(message, optional, tag = "1")]
    pub tool: Option<SharedMessage>,
    /// `score`.
    #[prost(double, tag = "2")]
    pub score: f64,
}

/// `toolplane.v1.SearchToolsResponse` with its tools kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SearchToolsResponseWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `matches`.
    #[prost(message, repeated, tag = "2")]
    pub matches: Vec<ToolMatchWire>,
    /// `total_matches`.
    #[prost(int32, tag = "3")]
    pub total_matches: i32,
}

/// `toolplane.v1.RegisterServiceResponse` with its tools kept encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterServiceResponseWire {
    /// `meta`.
    #[prost(message, optional, tag = "1")]
    pub meta: Option<pb::Meta>,
    /// `lease_id`.
    #[prost(string, tag = "2")]
    pub lease_id: String,
    /// `expires_at`.
    #[prost(message, optional, tag = "3")]
    pub expires_at: Option<prost_types::Timestamp>,
    /// `tools`: encoded `toolplane.v1.ToolRegistration`s.
    #[prost(message, repeated, tag = "4")]
    pub tools: Vec<SharedMessage>,
}

/// A `WatchServices` stream of wire twins.
pub type WireWatchStream =
    Pin<Box<dyn Stream<Item = Result<WatchServicesResponseWire, Status>> + Send>>;

/// The discovery methods that carry tools, answered with wire twins.
pub trait DiscoveryWire: Send + Sync + 'static {
    /// Answers a `RegisterService` call.
    fn register_service_wire(
        &self,
        request: Request<pb::RegisterServiceRequest>,
    ) -> impl Future<Output = Result<RegisterServiceResponseWire, Status>> + Send;
    /// Answers a `GetTool` call.
    fn get_tool_wire(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> impl Future<Output = Result<GetToolResponseWire, Status>> + Send;
    /// Answers a `ListTools` call.
    fn list_tools_wire(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> impl Future<Output = Result<ListToolsResponseWire, Status>> + Send;
    /// Answers a `SearchTools` call.
    fn search_tools_wire(
        &self,
        request: Request<pb::SearchToolsRequest>,
    ) -> impl Future<Output = Result<SearchToolsResponseWire, Status>> + Send;
    /// Answers a `WatchServices` call.
    fn watch_wire(
        &self,
        request: Request<pb::WatchServicesRequest>,
    ) -> impl Future<Output = Result<WireWatchStream, Status>> + Send;
}

/// Writes `bytes` as the embedded message field `tag`.
fn put_message(tag: u32, bytes: &[u8], buf: &mut BytesMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(bytes.len() as u64, buf);
    buf.put_slice(bytes);
}

/// A live service's `DiscoveryInfo`, encoded with its tools' kept bytes.
fn encoded_discovery_info(service: &ServiceEntry, health: &ProviderHealthBook) -> BytesMut {
    let (head, tail) = convert::discovery_info_parts(service, health);
    let mut buf = BytesMut::new();
    head.encode_raw(&mut buf);
    for tool in service.tools() {
        put_message(4, &convert::encoded_tool(tool, service), &mut buf);
    }
    tail.encode_raw(&mut buf);
    buf
}

/// The `ServiceEvent` of `head` and `tail` (see [`convert::event_parts`]) with `service`
/// between them, encoded.
pub fn encoded_event(
    (head, tail): (pb::ServiceEvent, pb::ServiceEvent),
    service: Option<&ServiceEntry>,
    health: &ProviderHealthBook,
) -> SharedMessage {
    let mut buf = BytesMut::new();
    head.encode_raw(&mut buf);
    if let Some(service) = service {
        put_message(4, &encoded_discovery_info(service, health), &mut buf);
    }
    tail.encode_raw(&mut buf);
    SharedMessage(buf.freeze())
}

/// Serves `toolplane.v1.DiscoveryService`: `RegisterService`, `GetTool`, `ListTools`,
/// `SearchTools` and `WatchServices` through [`DiscoveryWire`] (see the module docs), every other method through
/// the generated server, configured alike.
pub type DiscoveryServer<T> = WireServer<DiscoveryServiceServer<T>, DiscoveryWireMethods<T>>;

/// The methods of `DiscoveryService` served through [`DiscoveryWire`].
#[derive(Debug)]
pub struct DiscoveryWireMethods<T>(PhantomData<fn() -> T>);

impl<T: DiscoveryWire> OwnMethods for DiscoveryWireMethods<T> {
    type Api = T;

    fn owns(path: &str) -> bool {
        matches!(
            path,
            REGISTER_SERVICE | GET_TOOL | LIST_TOOLS | SEARCH_TOOLS | WATCH_SERVICES
        )
    }

    fn serve(
        api: Arc<T>,
        compression: Compression,
        request: http::Request<Body>,
    ) -> BoxFuture<'static, http::Response<Body>> {
        match request.uri().path() {
            REGISTER_SERVICE => {
                let call: Call<T, pb::RegisterServiceRequest, RegisterServiceResponseWire> =
                    |api, request| {
                        Box::pin(async move { api.register_service_wire(request).await })
                    };
                unary(api, call, compression, request)
            }
            GET_TOOL => {
                let call: Call<T, pb::GetToolRequest, GetToolResponseWire> =
                    |api, request| Box::pin(async move { api.get_tool_wire(request).await });
                unary(api, call, compression, request)
            }
            LIST_TOOLS => {
                let call: Call<T, pb::ListToolsRequest, ListToolsResponseWire> =
                    |api, request| Box::pin(async move { api.list_tools_wire(request).await });
                unary(api, call, compression, request)
            }
            SEARCH_TOOLS => {
                let call: Call<T, pb::SearchToolsRequest, SearchToolsResponseWire> =
                    |api, request| Box::pin(async move { api.search_tools_wire(request).await });
                unary(api, call, compression, request)
            }
            // WATCH_SERVICES, the last path `owns` names.
            _ => Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<
                    WatchServicesResponseWire,
                    pb::WatchServicesRequest,
                >::default();
                compression
                    .grpc(codec)
                    .server_streaming(WatchCall(api), request)
                    .await
            }),
        }
    }
}

/// One `WatchServices` call of the API.
struct WatchCall<T>(Arc<T>);

impl<T: DiscoveryWire> tonic::server::ServerStreamingService<pb::WatchServicesRequest>
    for WatchCall<T>
{
    type Response = WatchServicesResponseWire;
    type ResponseStream = WireWatchStream;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<pb::WatchServicesRequest>) -> Self::Future {
        let api = Arc::clone(&self.0);
        Box::pin(async move { api.watch_wire(request).await.map(tonic::Response::new) })
    }
}

/// The generated form `M` of the wire twin `wire` (for the generated server's methods).
pub fn decoded<M: Message + Default>(wire: &impl Message) -> Result<M, Status> {
    M::decode(wire.encode_to_vec().as_slice())
        .map_err(|error| Status::internal(format!("an answer does not decode: {error}")))
}

#[cfg(test)]
#[path = "discovery_wire_tests.rs"]
mod tests;
