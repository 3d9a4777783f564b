//! The process's own numbers, under the names every Prometheus client library gives them
//! (client_golang's process collector): CPU time, resident and virtual memory, open and
//! allowed file descriptors, threads and start time. Read from `/proc/self` when scraped
//! (Linux only; elsewhere none are reported).

use prometheus_client::encoding::DescriptorEncoder;

/// What `/proc/self` says, read once per scrape.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ProcessNumbers {
    cpu_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    open_fds: u64,
    max_fds: Option<u64>,
    threads: u64,
    start_time_seconds: f64,
}

#[cfg(target_os = "linux")]
fn read() -> procfs::ProcResult<ProcessNumbers> {
    use procfs::process::{LimitValue, Process};
    let me = Process::myself()?;
    let stat = me.stat()?;
    let ticks = procfs::ticks_per_second() as f64;
    Ok(ProcessNumbers {
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        resident_bytes: stat.rss * procfs::page_size(),
        virtual_bytes: stat.vsize,
        open_fds: me.fd_count()? as u64,
        max_fds: match me.limits()?.max_open_files.soft_limit {
            LimitValue::Value(limit) => Some(limit),
            LimitValue::Unlimited => None,
        },
        threads: u64::try_from(stat.num_threads).unwrap_or_default(),
        start_time_seconds: procfs::boot_time_secs()? as f64 + stat.starttime as f64 / ticks,
    })
}

/// Writes the process metrics; none when `/proc/self` cannot be read.
pub(super) fn encode(encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    #[cfg(target_os = "linux")]
    match read() {
        Ok(numbers) => write(encoder, &numbers)?,
        Err(error) => tracing::debug!(%error, "process metrics left out: /proc/self unreadable"),
    }
    #[cfg(not(target_os = "linux"))]
    let _ = encoder;
    Ok(())
}

fn write(encoder: &mut DescriptorEncoder, numbers: &ProcessNumbers) -> Result<(), std::fmt::Error> {
    use prometheus_client::encoding::NoLabelSet;
    use prometheus_client::metrics::MetricType;
    encoder
        .encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, u64>(&numbers.cpu_seconds, None)?;
    let mut gauge = |name: &str, help: &str, value: f64| {
        encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&value)
    };
    gauge(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        numbers.resident_bytes as f64,
    )?;
    gauge(
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        numbers.virtual_bytes as f64,
    )?;
    gauge(
        "process_open_fds",
        "Number of open file descriptors.",
        numbers.open_fds as f64,
    )?;
    if let Some(max_fds) = numbers.max_fds {
        gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            max_fds as f64,
        )?;
    }
    gauge(
        "process_threads",
        "Number of OS threads in the process.",
        numbers.threads as f64,
    )?;
    gauge(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        numbers.start_time_seconds,
    )
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_running_with_memory_and_files() {
        let numbers = read().expect("/proc/self is readable");
        assert!(numbers.resident_bytes > 0, "{numbers:?}");
        assert!(
            numbers.virtual_bytes >= numbers.resident_bytes,
            "{numbers:?}"
        );
        assert!(
            numbers.open_fds >= 3,
            "stdin, stdout, stderr at least: {numbers:?}"
        );
        assert!(numbers.threads >= 1, "{numbers:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        assert!(
            numbers.start_time_seconds <= now + 1.0 && numbers.start_time_seconds > now - 86_400.0,
            "started within the last day: {numbers:?}"
        );
    }
}
