//! The per-RPC metrics, named and labelled as grpc-go's Prometheus interceptors
//! (go-grpc-prometheus) name them: `grpc_server_started_total`, `grpc_server_handled_total`
//! and `grpc_server_handling_seconds`, labelled `grpc_type`, `grpc_service`, `grpc_method`
//! and, for handled calls, `grpc_code`.
//!
//! Every served method reports its started calls and its `OK` count from the start, at 0, so
//! that a rate over them has a first sample; other codes appear once they have been answered,
//! and a method's handling times once it has been called.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use tonic::Code;

use crate::grpc::rpc_stats::{
    HANDLING_BUCKETS, MethodSnapshot, MethodStats, RpcKind, RpcStats, all_codes, code_label,
};

fn method_labels(method: &MethodStats) -> [(&'static str, &str); 3] {
    [
        ("grpc_method", method.method.as_str()),
        ("grpc_service", method.service.as_str()),
        ("grpc_type", method.kind.label()),
    ]
}

/// Writes the per-RPC metrics of `stats`.
pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    stats: &RpcStats,
) -> Result<(), std::fmt::Error> {
    let methods: Vec<(&MethodStats, MethodSnapshot)> = stats
        .methods()
        .iter()
        .map(|method| (method, method.snapshot()))
        // The catch-all for unknown paths appears only once such a call came.
        .filter(|(method, snapshot)| method.kind != RpcKind::Unknown || snapshot.started > 0)
        .collect();

    let mut started = encoder.encode_descriptor(
        "grpc_server_started",
        "RPCs started on the server, by method.",
        None,
        MetricType::Counter,
    )?;
    for (method, snapshot) in &methods {
        started
            .encode_family(&method_labels(method))?
            .encode_counter::<NoLabelSet, _, u64>(&snapshot.started, None)?;
    }

    let mut handled = encoder.encode_descriptor(
        "grpc_server_handled",
        "RPCs completed on the server, by method and gRPC code, whatever the code.",
        None,
        MetricType::Counter,
    )?;
    for (method, snapshot) in &methods {
        for code in all_codes() {
            let count = snapshot.handled[code as usize];
            if count == 0 && code != Code::Ok {
                continue;
            }
            let [name, service, kind] = method_labels(method);
            let labels = [("grpc_code", code_label(code)), name, service, kind];
            handled
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
        }
    }

    let mut handling = encoder.encode_descriptor(
        "grpc_server_handling_seconds",
        "How long RPCs took, from reaching the services to their gRPC status, by method.",
        None,
        MetricType::Histogram,
    )?;
    for (method, snapshot) in methods.iter().filter(|(_, s)| s.started > 0) {
        super::histogram(
            &mut handling.encode_family(&method_labels(method))?,
            &HANDLING_BUCKETS,
            &snapshot.buckets,
            snapshot.handling_seconds,
        )?;
    }
    Ok(())
}
