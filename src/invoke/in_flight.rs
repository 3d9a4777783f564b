//! A bound on the calls in flight per (tenant, service), as Envoy's circuit breakers bound
//! the requests open to an upstream: a provider that has slowed down or stopped answering
//! would otherwise gather calls without end, each holding its input, a stream on the
//! provider's connection and a timer, until their deadlines pass. Past the bound a call is
//! refused at once, so callers find out and back off rather than queue.

use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;

use crate::envelope::TenantId;

/// The calls in flight, counted per (tenant, service) while any are.
#[derive(Debug, Default)]
pub(super) struct InFlightCalls {
    /// The most calls in flight per (tenant, service); 0 sets no bound (and counts nothing).
    max: AtomicUsize,
    // A sharded map (dashmap) rather than one mutex: every call of every service takes and
    // gives back a slot here.
    counts: DashMap<(TenantId, String), usize>,
}

/// A call's slot, given back when it is dropped (the call ended, or was dropped midway).
#[derive(Debug)]
pub(super) struct InFlightCall<'a> {
    calls: &'a InFlightCalls,
    key: Option<(TenantId, String)>,
}

impl InFlightCalls {
    /// At most `max` calls in flight per (tenant, service); 0 sets no bound.
    pub(super) fn new(max: usize) -> Self {
        Self {
            max: AtomicUsize::new(max),
            counts: DashMap::new(),
        }
    }

    /// Bounds the calls from now on by `max` (0: no bound). Calls in flight keep their slots;
    /// those begun while there was no bound were not counted, so for a moment more may run.
    pub(super) fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// Takes a slot for a call to `service`, or answers the bound when all are taken.
    pub(super) fn begin(&self, tenant: TenantId, service: &str) -> Result<InFlightCall<'_>, usize> {
        let max = self.max.load(Ordering::Relaxed);
        if max == 0 {
            return Ok(InFlightCall {
                calls: self,
                key: None,
            });
        }
        let key = (tenant, service.to_owned());
        let mut count = self.counts.entry(key.clone()).or_insert(0);
        if *count >= max {
            return Err(max);
        }
        *count += 1;
        drop(count);
        Ok(InFlightCall {
            calls: self,
            key: Some(key),
        })
    }

    /// How many calls to `service` are in flight.
    #[cfg(test)]
    fn count(&self, tenant: TenantId, service: &str) -> usize {
        self.counts
            .get(&(tenant, service.to_owned()))
            .map_or(0, |count| *count)
    }
}

impl Drop for InFlightCall<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // A (tenant, service) with no call in flight takes no memory.
            self.calls.counts.remove_if_mut(&key, |_, count| {
                *count -= 1;
                *count == 0
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_past_the_bound_are_refused_until_one_ends() {
        let calls = InFlightCalls::new(2);
        let first = calls.begin(TenantId(1), "svc").expect("a slot");
        let second = calls.begin(TenantId(1), "svc").expect("a slot");
        assert_eq!(calls.begin(TenantId(1), "svc").expect_err("full"), 2);
        assert!(
            calls.begin(TenantId(2), "svc").is_ok(),
            "another tenant's service has its own slots"
        );
        assert!(calls.begin(TenantId(1), "other").is_ok());
        drop(first);
        let third = calls.begin(TenantId(1), "svc").expect("a slot again");
        assert_eq!(calls.count(TenantId(1), "svc"), 2);
        drop((second, third));
        assert_eq!(calls.count(TenantId(1), "svc"), 0);
        assert!(calls.counts.is_empty(), "nothing is kept for idle services");
    }

    /// Threads taking and giving back slots of a few services at once never hold more than
    /// the bound between them, and leave nothing counted.
    #[test]
    fn concurrent_calls_never_pass_the_bound() {
        const MAX: usize = 3;
        let calls = InFlightCalls::new(MAX);
        let held = [(); 2].map(|()| AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (calls, held) = (&calls, &held);
                scope.spawn(move || {
                    for round in 0..5_000 {
                        let service = (thread + round) % held.len();
                        let Ok(slot) = calls.begin(TenantId(1), &service.to_string()) else {
                            continue;
                        };
                        let now = held[service].fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= MAX, "{now} calls in flight to {service}");
                        std::thread::yield_now();
                        held[service].fetch_sub(1, Ordering::SeqCst);
                        drop(slot);
                    }
                });
            }
        });
        assert!(calls.counts.is_empty(), "nothing is kept for idle services");
    }

    #[test]
    fn no_bound_counts_nothing() {
        let calls = InFlightCalls::new(0);
        let held: Vec<_> = (0..100)
            .map(|_| calls.begin(TenantId(1), "svc").expect("no bound"))
            .collect();
        assert!(calls.counts.is_empty());
        drop(held);
    }
}
