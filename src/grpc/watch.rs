//! One `WatchServices` stream: the tenant's snapshot, SYNCED, then its live changes, each
//! message encoded from the registered tools' kept bytes ([`super::discovery_wire`]).

use std::sync::Arc;

use tokio::sync::broadcast;
use tonic::Status;

use super::convert;
use super::discovery_wire::{SharedMessage, WatchServicesResponseWire, encoded_event};
use super::serving::{ServingState, shutting_down};
use crate::envelope::RequestMeta;
use crate::invoke::health::ProviderHealthBook;
use crate::pb;
use crate::registry::store::RegistryEvent;
use crate::registry::{RegistryError, ServiceEntry, ServiceName};

/// One WatchServices stream: the snapshot, SYNCED, then live changes. The response stream
/// polls the registry's broadcast receiver of the tenant itself (no task or channel per
/// watcher), so a change costs one wake-up per watcher of its tenant; the first watcher to
/// send a change encodes it for all (see [`super::discovery_wire`]).
pub(super) struct Watch {
    meta: RequestMeta,
    only: Option<ServiceName>,
    revision: u64,
    /// The services of the snapshot not sent yet, each encoded as it is sent.
    snapshot: std::vec::IntoIter<Arc<ServiceEntry>>,
    /// Whether SYNCED has been sent.
    synced: bool,
    events: broadcast::Receiver<Arc<RegistryEvent>>,
    stopping: tokio::sync::watch::Receiver<bool>,
    health: Arc<ProviderHealthBook>,
    done: bool,
}

type WatchItem = Result<WatchServicesResponseWire, Status>;

impl Watch {
    pub(super) fn start(
        meta: RequestMeta,
        only: Option<ServiceName>,
        start: crate::registry::store::WatchStart,
        serving: &ServingState,
        health: &Arc<ProviderHealthBook>,
    ) -> Self {
        let crate::registry::store::WatchStart {
            revision,
            mut services,
            events,
        } = start;
        services.retain(|s| only.as_ref().is_none_or(|only| *only == s.name));
        Self {
            meta,
            only,
            revision,
            snapshot: services.into_iter(),
            synced: false,
            events,
            stopping: serving.subscribe(),
            health: Arc::clone(health),
            done: false,
        }
    }

    fn wants(&self, event: &RegistryEvent) -> bool {
        // The receiver carries only the tenant's events (`RegistryStore::watch`).
        event.revision > self.revision
            && self.only.as_ref().is_none_or(|only| *only == event.service)
    }

    fn message(&self, event: SharedMessage) -> WatchItem {
        Ok(WatchServicesResponseWire {
            meta: Some(self.meta.response()),
            event: Some(event),
        })
    }

    /// The snapshot's next message (ADDED for each service, then SYNCED), if any is left.
    fn next_of_snapshot(&mut self) -> Option<SharedMessage> {
        let head = |kind: pb::ServiceEventType, name: String| pb::ServiceEvent {
            r#type: kind as i32,
            revision: self.revision,
            service_name: name,
            ..Default::default()
        };
        if let Some(service) = self.snapshot.next() {
            let parts = (
                head(pb::ServiceEventType::Added, service.name.to_string()),
                pb::ServiceEvent::default(),
            );
            return Some(encoded_event(parts, Some(&service), &self.health));
        }
        if self.synced {
            return None;
        }
        self.synced = true;
        let parts = (
            head(pb::ServiceEventType::Synced, String::new()),
            pb::ServiceEvent::default(),
        );
        Some(encoded_event(parts, None, &self.health))
    }

    /// The next message of the stream; `None` ends it.
    pub(super) async fn next(mut self) -> Option<(WatchItem, Self)> {
        if self.done {
            return None;
        }
        if let Some(event) = self.next_of_snapshot() {
            let message = self.message(event);
            return Some((message, self));
        }
        loop {
            let received = tokio::select! {
                received = self.events.recv() => received,
                () = shutting_down(&mut self.stopping) => {
                    self.done = true;
                    return Some((Err(Status::unavailable("the control plane is shutting down; watch another instance or retry")), self));
                }
            };
            match received {
                Ok(event) if self.wants(&event) => {
                    // Every watcher of this change sends the same event: encode it once.
                    let health = &self.health;
                    let encode = || {
                        let parts = convert::event_parts(&event);
                        encoded_event(parts, event.entry.as_deref(), health)
                    };
                    let wire = event.wire.get_or_init(|| Arc::new(encode()));
                    let encoded = wire
                        .downcast_ref::<SharedMessage>()
                        .cloned()
                        .unwrap_or_else(encode);
                    let message = self.message(encoded);
                    return Some((message, self));
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    self.done = true;
                    return Some((Err(RegistryError::WatchLagged { missed }.into()), self));
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}
