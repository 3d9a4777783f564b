//! The provider's lease: registering with the control plane, heartbeating, registering again
//! when the control plane no longer knows the lease, and deregistering once the provider stops.

use std::time::Duration;

use tokio::sync::watch;

use super::control_plane::ControlPlane;
use crate::envelope::{TenantId, request_meta};
use crate::pb;

/// How long to wait before registering again after a failed attempt, at most.
const MAX_REGISTER_BACKOFF: Duration = Duration::from_secs(5);
/// How long to wait before trying again a heartbeat that failed (doubled at each failure in a
/// row, up to the heartbeat interval).
const FIRST_HEARTBEAT_RETRY: Duration = Duration::from_millis(100);

/// The envelope of a request in `tenant`, with a correlation id of its own.
fn meta(tenant: TenantId) -> Option<pb::Meta> {
    Some(request_meta(tenant, &uuid::Uuid::new_v4().to_string()))
}

/// A registration the control plane refused as not valid (INVALID_ARGUMENT): sending it again
/// cannot succeed, so the provider stops rather than trying again for ever.
#[derive(Debug)]
pub(super) struct Refused {
    /// What the control plane answered.
    pub(super) message: String,
}

/// Registers, heartbeats, registers again on NOT_FOUND, and deregisters once `serving`
/// turns false; ends early, answering [`Refused`], when a registration is refused as not
/// valid (other failures, such as an unreachable control plane or a quota, may pass and are
/// tried again). A heartbeat that failed otherwise is tried again after
/// [`heartbeat_retry`]'s wait instead of `interval`: waiting a whole interval after each
/// failure, two failures in a row (a call that waited out its timeout, then one more) let the
/// lease lapse at the default TTL, a third of which the interval is.
pub(super) async fn keep_registered(
    control_plane: ControlPlane,
    registration: pb::ServiceRegistration,
    tenant: TenantId,
    interval: Duration,
    mut serving: watch::Receiver<bool>,
) -> Result<(), Refused> {
    let service = registration.service_name.clone();
    let mut backoff = Duration::from_millis(100);
    let mut lease: Option<String> = None;
    // How long to wait before the next heartbeat while heartbeats fail; `None` after one that
    // succeeded.
    let mut heartbeat_backoff: Option<Duration> = None;
    loop {
        if !*serving.borrow() {
            break;
        }
        let Some(lease_id) = lease.clone() else {
            let request = pb::RegisterServiceRequest {
                meta: meta(tenant),
                registration: Some(registration.clone()),
            };
            match control_plane.client().register_service(request).await {
                Ok(answer) => {
                    tracing::info!(%service, "registered with the control plane");
                    lease = Some(answer.into_inner().lease_id);
                    backoff = Duration::from_millis(100);
                    heartbeat_backoff = None;
                }
                Err(status) if status.code() == tonic::Code::InvalidArgument => {
                    tracing::error!(%service, message = status.message(), "the control plane refused the registration as not valid; stopping");
                    return Err(Refused {
                        message: status.message().to_owned(),
                    });
                }
                Err(status) => {
                    tracing::warn!(%service, code = ?status.code(), message = status.message(), "registration failed; trying again");
                    if wait_or_stop(&mut serving, backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_REGISTER_BACKOFF);
                }
            }
            continue;
        };
        if wait_or_stop(&mut serving, heartbeat_backoff.unwrap_or(interval)).await {
            break;
        }
        let request = pb::HeartbeatRequest {
            meta: meta(tenant),
            service_name: service.clone(),
            lease_id,
        };
        match control_plane.client().heartbeat(request).await {
            Ok(_) => heartbeat_backoff = None,
            Err(status) if status.code() == tonic::Code::NotFound => {
                tracing::warn!(%service, "the control plane no longer knows our lease; registering again");
                lease = None;
            }
            Err(status) => {
                let retry_in = heartbeat_retry(heartbeat_backoff, interval);
                heartbeat_backoff = Some(retry_in);
                tracing::warn!(%service, code = ?status.code(), message = status.message(), ?retry_in, "heartbeat failed; will try again")
            }
        }
    }
    if let Some(lease_id) = lease {
        let request = pb::DeregisterServiceRequest {
            meta: meta(tenant),
            service_name: service.clone(),
            lease_id,
        };
        match tokio::time::timeout(
            Duration::from_secs(2),
            control_plane.client().deregister_service(request),
        )
        .await
        {
            Ok(Ok(_)) => tracing::info!(%service, "deregistered"),
            _ => tracing::warn!(%service, "could not deregister; the lease will expire"),
        }
    }
    Ok(())
}

/// How long to wait before trying again a heartbeat that failed, `backoff` being the wait
/// before it when it was itself a retry: [`FIRST_HEARTBEAT_RETRY`], doubled at each failure in
/// a row, never more than `interval`.
fn heartbeat_retry(backoff: Option<Duration>, interval: Duration) -> Duration {
    backoff
        .map_or(FIRST_HEARTBEAT_RETRY, |backoff| backoff.saturating_mul(2))
        .min(interval)
}

/// Waits `duration`; true when `serving` turned false (or its sender is gone: the server
/// stopped) meanwhile.
async fn wait_or_stop(serving: &mut watch::Receiver<bool>, duration: Duration) -> bool {
    let stopped = tokio::select! {
        () = tokio::time::sleep(duration) => false,
        _ = serving.wait_for(|serving| !*serving) => true,
    };
    stopped || !*serving.borrow()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed heartbeat is tried again after 100 ms, then twice as long at each failure in
    /// a row, never longer than the heartbeat interval.
    #[test]
    fn failed_heartbeats_are_tried_again_soon_then_less_often() {
        let interval = Duration::from_secs(1);
        let mut backoff = None;
        let waits: Vec<_> = (0..6)
            .map(|_| {
                let wait = heartbeat_retry(backoff, interval);
                backoff = Some(wait);
                wait.as_millis()
            })
            .collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        let short = Duration::from_millis(30);
        assert_eq!(
            heartbeat_retry(None, short),
            short,
            "never over the interval"
        );
    }
}
