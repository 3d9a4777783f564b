//! `toolplane_log_lines_dropped_total`: the log lines the server dropped because stderr's
//! reader fell behind (see [`crate::cli::serve::init_tracing`]). Counted by the log's writer;
//! reported once the server's log is set up (not when toolplane is used as a library).

use std::sync::OnceLock;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use tracing_appender::non_blocking::ErrorCounter;

/// The process's log writer's count of dropped lines: one log per process, as one stderr.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Reports `dropped`, the count of the process's log writer, from now on; a later call
/// (a second log set up in one process) changes nothing.
pub fn watch(dropped: ErrorCounter) {
    let _ = DROPPED.set(dropped);
}

/// Writes the counter, when the log is set up.
pub(super) fn encode(encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let Some(dropped) = DROPPED.get() else {
        return Ok(());
    };
    let count = u64::try_from(dropped.dropped_lines()).unwrap_or(u64::MAX);
    encoder
        .encode_descriptor(
            "toolplane_log_lines_dropped",
            "Log lines dropped because stderr's reader fell behind by more than 128,000 lines.",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&count, None)
}
