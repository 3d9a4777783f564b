//! One `WatchServices` stream: the tenant's snapshot, SYNCED, then its live changes, each
//! message encoded from the registered tools' kept bytes ([`super::discovery_wire`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_util::{Stream, StreamExt};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tonic::Status;

use super::convert;
use super::discovery_wire::{SharedMessage, WatchServicesResponseWire, encoded_event};
use super::serving::{ServingState, shutting_down};
use crate::envelope::RequestMeta;
use crate::invoke::health::ProviderHealthBook;
use crate::pb;
use crate::registry::store::{AfterSnapshot, BufferedEvent, RegistryEvent, WatchStart};
use crate::registry::{RegistryError, ServiceEntry, ServiceName};

/// One WatchServices stream: the snapshot, SYNCED, then live changes. The response stream
/// polls the registry's broadcast receiver of the tenant itself (no task or channel per
/// watcher), so a change costs one wake-up per watcher of its tenant; the first watcher to
/// send a change encodes it for all (see [`super::discovery_wire`]). It ends after an error
/// (lagged behind, or the server shutting down) or when the registry closes the channel.
pub(super) struct Watch {
    meta: RequestMeta,
    only: Option<ServiceName>,
    /// Which events are news to the watcher.
    after: AfterSnapshot,
    /// The services of the snapshot not sent yet, each encoded as it is sent.
    snapshot: std::vec::IntoIter<Arc<ServiceEntry>>,
    /// Whether SYNCED has been sent.
    synced: bool,
    events: BroadcastStream<Arc<BufferedEvent>>,
    /// What the tenant's channel holds for a watcher behind, in bytes (for the error of one
    /// further behind).
    max_buffered_bytes: u64,
    /// Completes when the server starts shutting down.
    stopping: Pin<Box<dyn Future<Output = ()> + Send>>,
    health: Arc<ProviderHealthBook>,
    done: bool,
}

type WatchItem = Result<WatchServicesResponseWire, Status>;

impl Watch {
    pub(super) fn start(
        meta: RequestMeta,
        only: Option<ServiceName>,
        start: WatchStart,
        serving: &ServingState,
        health: &Arc<ProviderHealthBook>,
    ) -> Self {
        let after = start.after_snapshot();
        let WatchStart {
            mut services,
            events,
            max_buffered_bytes,
            ..
        } = start;
        services.retain(|s| only.as_ref().is_none_or(|only| *only == s.name));
        Self {
            meta,
            only,
            after,
            snapshot: services.into_iter(),
            synced: false,
            events: BroadcastStream::new(events),
            max_buffered_bytes,
            stopping: {
                let mut serving = serving.subscribe();
                Box::pin(async move { shutting_down(&mut serving).await })
            },
            health: Arc::clone(health),
            done: false,
        }
    }

    /// The buffered event, if it is news of a service the watcher follows; an error when the
    /// tenant's channel let it go, the watcher being too far behind.
    fn wanted(&mut self, buffered: &BufferedEvent) -> Result<Option<Arc<RegistryEvent>>, Status> {
        // The receiver carries only the tenant's events (`RegistryStore::watch`).
        if buffered.revision <= self.after.revision()
            || self
                .only
                .as_ref()
                .is_some_and(|only| *only != buffered.service)
        {
            return Ok(None);
        }
        let event = buffered.event().ok_or(RegistryError::WatchLaggedBytes {
            max_bytes: self.max_buffered_bytes,
        })?;
        Ok(self.after.is_news(&event).then_some(event))
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
            revision: self.after.revision(),
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

    /// The message for a change every watcher of its tenant sends: the first to send it
    /// encodes it, the others send the same bytes.
    fn change(&self, event: &RegistryEvent) -> WatchItem {
        let encode = || {
            let parts = convert::event_parts(event);
            encoded_event(parts, event.entry.as_deref(), &self.health)
        };
        let wire = event.wire.get_or_init(|| Arc::new(encode()));
        let encoded = wire
            .downcast_ref::<SharedMessage>()
            .cloned()
            .unwrap_or_else(encode);
        self.message(encoded)
    }
}

/// Written by hand rather than with `stream::unfold` over an async function, which made a
/// new receive future, and a new shutdown future registered with (and then removed from) the
/// server's shared notifier, for every message: a profile of 10,000 watchers put about a tenth
/// of the delivery's CPU there. Here the receive future is reused and the shutdown future is
/// made once, and polled only when no change is waiting.
impl Stream for Watch {
    type Item = WatchItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchItem>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(event) = this.next_of_snapshot() {
            return Poll::Ready(Some(this.message(event)));
        }
        // Changes are sent before the shutdown is noticed: a watcher that is behind catches
        // up first (the tenant's channel bounds how far behind it can be).
        while let Poll::Ready(received) = this.events.poll_next_unpin(cx) {
            match received {
                Some(Ok(buffered)) => match this.wanted(&buffered) {
                    Ok(Some(event)) => return Poll::Ready(Some(this.change(&event))),
                    Ok(None) => {}
                    Err(lagged) => {
                        this.done = true;
                        return Poll::Ready(Some(Err(lagged)));
                    }
                },
                Some(Err(BroadcastStreamRecvError::Lagged(missed))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(RegistryError::WatchLagged { missed }.into())));
                }
                None => {
                    this.done = true;
                    return Poll::Ready(None);
                }
            }
        }
        ready!(this.stopping.as_mut().poll(cx));
        this.done = true;
        Poll::Ready(Some(Err(Status::unavailable(
            "the control plane is shutting down; watch another instance or retry",
        ))))
    }
}
