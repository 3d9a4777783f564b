//! The provider's connection to its control plane, and the TLS files it serves and connects
//! with, read again while it runs.
//!
//! An `https://` control plane is connected to as [`ProviderConfig::control_plane_tls`] says.
//! Certificates are renewed on disk (cert-manager, Vault agents) well before they expire, and a
//! provider runs for longer than a certificate lives: every
//! [`ProviderConfig::tls_reload_interval`] the files are read again, and when they changed the
//! served TLS is rebuilt for new connections, and registrations and heartbeats go over a new
//! connection made with the renewed client certificate; a bearer token file
//! ([`ProviderConfig::control_plane_token_file`]) is read again by the first call after each
//! interval or SIGHUP, and a changed token sent from then on. Files that
//! cannot be used (a certificate written before its key) are logged at WARN and the previous
//! ones kept.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use super::server::{ProviderConfig, ProviderError};
use crate::client::{BearerAuth, ClientChannel, InvalidBearerToken};
use crate::grpc::server_tls::{ServedTls, watched_files};
use crate::grpc::tls_reload;
use crate::pb::discovery_service_client::DiscoveryServiceClient;

/// How long a registration or heartbeat may wait on the control plane before it fails.
const CONTROL_PLANE_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// While a call waits, how long the connection to the control plane may be silent before it
/// is sent an HTTP/2 PING, and how long that PING may go unanswered before the connection is
/// closed.
const CONTROL_PLANE_PING_INTERVAL: Duration = Duration::from_secs(2);
const CONTROL_PLANE_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// The channel registrations and heartbeats go over; replaced whole when the control-plane
/// TLS files are renewed.
#[derive(Debug, Clone)]
pub(super) struct ControlPlane {
    channel: Arc<ArcSwap<Channel>>,
    /// The bearer token calls send (its file read again every `tls_reload_interval` and on
    /// SIGHUP).
    auth: BearerAuth,
}

impl ControlPlane {
    /// A channel to the control plane `config` names (connected when first used); its TLS
    /// files are read now.
    pub(super) fn new(config: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            channel: Arc::new(ArcSwap::from_pointee(channel(config)?)),
            auth: bearer_auth(config)?,
        })
    }

    /// A client on the current channel, sending the control-plane bearer token if any.
    pub(super) fn client(&self) -> DiscoveryServiceClient<ClientChannel> {
        let channel = Channel::clone(&self.channel.load());
        DiscoveryServiceClient::new(self.auth.clone().on(channel))
    }

    /// Reads the TLS files again and makes the next calls go over a new connection made with
    /// them; on an error the current channel stays.
    fn reload(&self, config: &ProviderConfig) -> Result<(), ProviderError> {
        self.channel.store(Arc::new(channel(config)?));
        Ok(())
    }
}

/// The token `config` gives, read from its file when it names one (and read again every
/// `tls_reload_interval` and on SIGHUP).
fn bearer_auth(config: &ProviderConfig) -> Result<BearerAuth, ProviderError> {
    let problem = |error: InvalidBearerToken| ProviderError::ControlPlaneToken(error.to_string());
    match (
        &config.control_plane_token,
        &config.control_plane_token_file,
    ) {
        (Some(_), Some(_)) => Err(ProviderError::ControlPlaneToken(
            "give the token or its file, not both".to_owned(),
        )),
        (None, Some(path)) => {
            BearerAuth::from_file(path, config.tls_reload_interval).map_err(problem)
        }
        (token, None) => Ok(BearerAuth::new(token.clone())),
    }
}

fn channel(config: &ProviderConfig) -> Result<Channel, ProviderError> {
    let endpoint = Endpoint::from_shared(config.control_plane.clone())
        .map_err(|_| ProviderError::ControlPlane(config.control_plane.clone()))?
        .connect_timeout(Duration::from_secs(2))
        // A connection to a control plane whose host vanished without closing it is found by
        // an unanswered PING while a call waits on it, and closed (the channel dials again);
        // each call is bounded too, so the lease is renewed or registered again.
        .http2_keep_alive_interval(CONTROL_PLANE_PING_INTERVAL)
        .keep_alive_timeout(CONTROL_PLANE_PING_TIMEOUT)
        .timeout(CONTROL_PLANE_CALL_TIMEOUT);
    Ok(config.control_plane_tls.apply_to(endpoint)?.connect_lazy())
}

/// Reads the served TLS files and the control-plane TLS files every
/// `config.tls_reload_interval`, and when the process asks (SIGHUP, where it listens for it:
/// [`crate::grpc::hangups::read_again_on_sighup`]), until `serving` turns false, and rebuilds
/// what changed (the control-plane token file is read again by the calls, see
/// [`BearerAuth::from_file`]). An interval of zero reads them only at the start and when
/// asked.
pub(super) fn reload_tls_files(
    config: &ProviderConfig,
    served: Option<ServedTls>,
    control_plane: &ControlPlane,
    serving: &watch::Receiver<bool>,
) {
    let interval = config.tls_reload_interval;
    if let (Some(tls), Some(files)) = (served, config.tls.clone()) {
        let paths = watched_files(&files);
        let rebuild = move || tls.reload(&files).map_err(|error| error.to_string());
        tokio::spawn(tls_reload::watch(
            "provider served",
            paths,
            interval,
            rebuild,
            serving.clone(),
        ));
    }
    let files = &config.control_plane_tls;
    let paths: Vec<_> = [&files.ca_file, &files.cert_file, &files.key_file]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    if !paths.is_empty() {
        let (control_plane, config) = (control_plane.clone(), config.clone());
        let rebuild = move || {
            control_plane
                .reload(&config)
                .map_err(|error| error.to_string())
        };
        tokio::spawn(tls_reload::watch(
            "provider to control plane",
            paths,
            interval,
            rebuild,
            serving.clone(),
        ));
    }
}
