//! Per-RPC counts and handling times, kept as grpc-go's Prometheus interceptors
//! (go-grpc-prometheus) keep them, so that dashboards and alerts written for those work on
//! toolplane: calls started and handled (by gRPC code) per method, and how long each method's
//! calls took. Filled by [`super::rpc_metering`] as calls are answered, read by
//! [`crate::metrics`] when scraped.
//!
//! The methods are those of the services toolplane serves, read from their descriptors at
//! start-up; a call to any other path counts under one `unknown` method, so label values stay a
//! bounded set whatever callers send. Each method's numbers are relaxed atomics: a call costs a
//! few uncontended increments, never a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prost::Message;
use tonic::Code;

/// The upper bounds, in seconds, of the handling-time buckets (a last, unbounded bucket
/// follows): from 0.1 ms, a discovery read's least, to the 60 s of `max_invoke_timeout`.
/// Streams (WatchServices) count their whole life, so most fall in the last bucket.
pub const HANDLING_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// Every gRPC code, in number order (`Code::Ok` is 0).
const CODES: usize = 17;

/// The name Prometheus's gRPC metrics give a code (grpc-go's `codes.Code.String()`).
pub fn code_label(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// How a method's messages flow (the `grpc_type` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    /// One request, one answer.
    Unary,
    /// One request, a stream of answers.
    ServerStream,
    /// A stream of requests, one answer.
    ClientStream,
    /// Streams both ways.
    BidiStream,
    /// A path no served method has.
    Unknown,
}

impl RpcKind {
    /// The `grpc_type` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unary => "unary",
            Self::ServerStream => "server_stream",
            Self::ClientStream => "client_stream",
            Self::BidiStream => "bidi_stream",
            Self::Unknown => "unknown",
        }
    }
}

/// One method's numbers.
#[derive(Debug)]
pub struct MethodStats {
    /// The full service name (`toolplane.v1.DiscoveryService`).
    pub service: String,
    /// The method's name (`GetTool`).
    pub method: String,
    /// How its messages flow.
    pub kind: RpcKind,
    started: AtomicU64,
    handled: [AtomicU64; CODES],
    buckets: [AtomicU64; HANDLING_BUCKETS.len() + 1],
    handling_micros: AtomicU64,
}

/// A method's numbers as read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodSnapshot {
    /// Calls started.
    pub started: u64,
    /// Calls answered, by code (index: the code's number).
    pub handled: [u64; CODES],
    /// Handling times in [`HANDLING_BUCKETS`] (not cumulative; the last holds the longer).
    pub buckets: [u64; HANDLING_BUCKETS.len() + 1],
    /// Handling times added up, in seconds.
    pub handling_seconds: f64,
}

impl MethodStats {
    fn new(service: &str, method: &str, kind: RpcKind) -> Self {
        Self {
            service: service.to_owned(),
            method: method.to_owned(),
            kind,
            started: AtomicU64::new(0),
            handled: std::array::from_fn(|_| AtomicU64::new(0)),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            handling_micros: AtomicU64::new(0),
        }
    }

    /// Reads the numbers (each on its own; a call being counted may show in some only).
    pub fn snapshot(&self) -> MethodSnapshot {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        MethodSnapshot {
            started: read(&self.started),
            handled: std::array::from_fn(|code| read(&self.handled[code])),
            buckets: std::array::from_fn(|bucket| read(&self.buckets[bucket])),
            handling_seconds: read(&self.handling_micros) as f64 / 1e6,
        }
    }
}

/// The numbers of every method toolplane serves, and of calls to any other path.
#[derive(Debug)]
pub struct RpcStats {
    /// Every served method, then the `unknown` one.
    methods: Vec<MethodStats>,
    /// `/service/method` paths and their place in `methods`, sorted by path.
    paths: Vec<(String, usize)>,
}

/// Why the methods could not be read from the descriptors.
#[derive(Debug, thiserror::Error)]
#[error("a file descriptor set does not decode: {0}")]
pub struct DescriptorError(#[from] prost::DecodeError);

impl RpcStats {
    /// The methods of the services named in `services` (full names), as described in the
    /// encoded file descriptor sets `descriptor_sets`.
    pub fn for_services(
        descriptor_sets: &[&[u8]],
        services: &[&str],
    ) -> Result<Self, DescriptorError> {
        let mut methods = Vec::new();
        let mut paths = Vec::new();
        for set in descriptor_sets {
            let set = prost_types::FileDescriptorSet::decode(*set)?;
            for file in &set.file {
                for service in &file.service {
                    let name = match file.package() {
                        "" => service.name().to_owned(),
                        package => format!("{package}.{}", service.name()),
                    };
                    if !services.contains(&name.as_str())
                        || methods.iter().any(|m: &MethodStats| m.service == name)
                    {
                        continue;
                    }
                    for method in &service.method {
                        let kind = match (method.client_streaming(), method.server_streaming()) {
                            (false, false) => RpcKind::Unary,
                            (false, true) => RpcKind::ServerStream,
                            (true, false) => RpcKind::ClientStream,
                            (true, true) => RpcKind::BidiStream,
                        };
                        paths.push((format!("/{name}/{}", method.name()), methods.len()));
                        methods.push(MethodStats::new(&name, method.name(), kind));
                    }
                }
            }
        }
        methods.push(MethodStats::new("unknown", "unknown", RpcKind::Unknown));
        paths.sort();
        Ok(Self { methods, paths })
    }

    /// Where the numbers of the method at `path` are kept (the `unknown` method's place for
    /// a path no served method has).
    pub fn method_of(&self, path: &str) -> usize {
        match self
            .paths
            .binary_search_by(|(known, _)| known.as_str().cmp(path))
        {
            Ok(found) => self.paths[found].1,
            Err(_) => self.methods.len() - 1,
        }
    }

    /// Counts a call to the method at `method` (from [`Self::method_of`]) as started.
    pub fn started(&self, method: usize) {
        self.methods[method].started.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a call to the method at `method` as answered with `code` after `took`.
    pub fn handled(&self, method: usize, code: Code, took: Duration) {
        let stats = &self.methods[method];
        stats.handled[code as usize].fetch_add(1, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        let bucket = HANDLING_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(HANDLING_BUCKETS.len());
        stats.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        stats.handling_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Counts a call to the method at `path` refused with `code` before it reached the
    /// services (so before the metering layer saw it), as started and handled at once.
    pub fn refused(&self, path: &str, code: Code) {
        let method = self.method_of(path);
        self.started(method);
        self.handled(method, code, Duration::ZERO);
    }

    /// Every method, the `unknown` one last.
    pub fn methods(&self) -> &[MethodStats] {
        &self.methods
    }
}

/// Every gRPC code, in number order.
pub fn all_codes() -> impl Iterator<Item = Code> {
    (0..CODES as i32).map(Code::from_i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> RpcStats {
        RpcStats::for_services(
            &[
                crate::pb::FILE_DESCRIPTOR_SET,
                tonic_health::pb::FILE_DESCRIPTOR_SET,
            ],
            &["toolplane.v1.DiscoveryService", "grpc.health.v1.Health"],
        )
        .expect("descriptors decode")
    }

    #[test]
    fn the_named_services_methods_are_found_by_path_and_others_are_unknown() {
        let stats = stats();
        let get_tool = &stats.methods()[stats.method_of("/toolplane.v1.DiscoveryService/GetTool")];
        assert_eq!(
            (get_tool.service.as_str(), get_tool.method.as_str()),
            ("toolplane.v1.DiscoveryService", "GetTool")
        );
        assert_eq!(get_tool.kind, RpcKind::Unary);
        let watch = &stats.methods()[stats.method_of("/grpc.health.v1.Health/Watch")];
        assert_eq!(watch.kind, RpcKind::ServerStream);
        for path in [
            "/toolplane.v1.ToolInvokeService/InvokeTool",
            "/toolplane.v1.DiscoveryService/Nope",
            "",
            "/",
        ] {
            let unknown = &stats.methods()[stats.method_of(path)];
            assert_eq!(unknown.kind, RpcKind::Unknown, "{path:?} is not served");
        }
    }

    #[test]
    fn a_handled_call_counts_under_its_code_and_its_time() {
        let stats = stats();
        let method = stats.method_of("/toolplane.v1.DiscoveryService/GetTool");
        stats.started(method);
        stats.started(method);
        stats.handled(method, Code::Ok, Duration::from_micros(90));
        stats.handled(method, Code::NotFound, Duration::from_secs(100));
        let snapshot = stats.methods()[method].snapshot();
        assert_eq!(snapshot.started, 2);
        assert_eq!(snapshot.handled[Code::Ok as usize], 1);
        assert_eq!(snapshot.handled[Code::NotFound as usize], 1);
        assert_eq!(snapshot.buckets[0], 1, "90 µs is under the first bound");
        assert_eq!(
            snapshot.buckets[HANDLING_BUCKETS.len()],
            1,
            "past every bound"
        );
        assert!((snapshot.handling_seconds - 100.00009).abs() < 1e-9);
    }

    #[test]
    fn every_code_has_its_grpc_go_name() {
        let labels: Vec<_> = all_codes().map(code_label).collect();
        assert_eq!(labels.len(), CODES);
        assert_eq!(labels[1], "Canceled");
        assert_eq!(labels[16], "Unauthenticated");
        for (number, code) in all_codes().enumerate() {
            assert_eq!(code as usize, number);
        }
    }
}
