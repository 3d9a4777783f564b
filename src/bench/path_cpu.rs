//! The CPU time a benchmarked call costs on its whole path: the load generator (this
//! process), the relay it calls (toolplane or the pass-through), if any, and the provider, read
//! from `/proc` before and after a measurement, with how busy the whole machine was meanwhile.
//! With the machine near fully busy, the saturation throughput of two paths is in the inverse
//! ratio of their whole-path CPU per call, which is what these numbers are for.

use std::time::Duration;

use super::procs::{self, ChildProcess};

/// The processes a measured call passes through.
pub(super) struct Target<'a> {
    /// toolplane or the pass-through; none for the direct call.
    relay: Option<&'a ChildProcess>,
    /// The bench provider.
    provider: &'a ChildProcess,
}

/// CPU time per call, in microseconds, of each process on a call's path, and how busy the
/// whole machine was meanwhile. The load generator is this process.
#[derive(Debug, Clone, Copy)]
pub(super) struct PathCpu {
    /// The load generator (this process).
    pub(super) load_generator: f64,
    /// toolplane or the pass-through; none for the direct call.
    pub(super) relay: Option<f64>,
    /// The bench provider.
    pub(super) provider: f64,
    /// The share of the machine's CPU time that was busy (all CPUs), in percent.
    pub(super) busy_percent: f64,
}

impl PathCpu {
    /// The server the load generator called: the relay, or the provider for the direct call.
    pub(super) fn server(&self) -> f64 {
        self.relay.unwrap_or(self.provider)
    }

    /// The two ends every path has: the load generator and the provider.
    pub(super) fn ends(&self) -> f64 {
        self.load_generator + self.provider
    }

    /// Every process on the path.
    pub(super) fn whole(&self) -> f64 {
        self.ends() + self.relay.unwrap_or(0.0)
    }
}

/// The CPU time used so far by each process on a path and by the machine.
pub(super) struct CpuReading {
    load_generator: Duration,
    relay: Option<Duration>,
    provider: Duration,
    machine: (u64, u64),
}

impl<'a> Target<'a> {
    /// A call to `relay`, which forwards it to `provider`.
    pub(super) fn relayed(relay: &'a ChildProcess, provider: &'a ChildProcess) -> Self {
        Self {
            relay: Some(relay),
            provider,
        }
    }

    /// A call straight to `provider`.
    pub(super) fn direct(provider: &'a ChildProcess) -> Self {
        Self {
            relay: None,
            provider,
        }
    }

    /// What the load generator calls: the relay, or the provider for the direct call.
    pub(super) fn endpoint(&self) -> String {
        self.relay.unwrap_or(self.provider).endpoint()
    }

    /// Reads the CPU time used so far by each process on the path and by the machine.
    pub(super) fn read_cpu(&self) -> CpuReading {
        CpuReading {
            load_generator: procs::cpu_time(std::process::id()).unwrap_or_default(),
            relay: self.relay.map(ChildProcess::cpu_time),
            provider: self.provider.cpu_time(),
            machine: procs::machine_ticks().unwrap_or_default(),
        }
    }
}

impl CpuReading {
    /// Per call, what was used between `self` and `later`.
    pub(super) fn per_call_until(&self, later: &Self, calls: u64) -> PathCpu {
        let us = |before: Duration, after: Duration| {
            after.saturating_sub(before).as_secs_f64() * 1e6 / calls.max(1) as f64
        };
        let busy = later.machine.0.saturating_sub(self.machine.0);
        let total = later.machine.1.saturating_sub(self.machine.1);
        PathCpu {
            load_generator: us(self.load_generator, later.load_generator),
            relay: self.relay.zip(later.relay).map(|(b, a)| us(b, a)),
            provider: us(self.provider, later.provider),
            busy_percent: 100.0 * busy as f64 / total.max(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(load_generator: u64, relay: Option<u64>, provider: u64, busy: u64) -> CpuReading {
        CpuReading {
            load_generator: Duration::from_millis(load_generator),
            relay: relay.map(Duration::from_millis),
            provider: Duration::from_millis(provider),
            machine: (busy, busy * 2),
        }
    }

    #[test]
    fn per_call_cpu_adds_up_the_processes_on_the_path() {
        let before = reading(1_000, Some(2_000), 3_000, 100);
        let after = reading(1_020, Some(2_045), 3_015, 190);
        let cpu = before.per_call_until(&after, 1_000);
        assert!((cpu.server() - 45.0).abs() < 1e-9);
        assert!((cpu.ends() - 35.0).abs() < 1e-9);
        assert!((cpu.whole() - 80.0).abs() < 1e-9);
        // 90 busy ticks of 180 in all.
        assert!((cpu.busy_percent - 50.0).abs() < 1e-9);

        let direct = reading(0, None, 0, 0).per_call_until(&reading(20, None, 15, 10), 1_000);
        assert!((direct.server() - 15.0).abs() < 1e-9);
        assert!((direct.whole() - 35.0).abs() < 1e-9);
    }
}
