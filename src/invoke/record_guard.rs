//! The record of one invocation, written exactly once whatever way the invocation ends, and
//! the reason a record names for each engine error.

use std::sync::Arc;
use std::time::SystemTime;

use super::engine::Failed;
use super::error::InvokeError;
use super::records::{InvocationRecord, InvocationStatus, RecordDraft, RecordLog};

/// Writes the record of an invocation exactly once: on completion, as CANCELLED when the
/// caller goes away and the invocation future is dropped midway, or as FAILED (reason
/// `INTERNAL`) when toolplane itself panics midway (the server answers such a call INTERNAL).
pub(super) struct RecordGuard {
    pub(super) records: Arc<RecordLog>,
    pub(super) draft: Option<RecordDraft>,
}

impl RecordGuard {
    pub(super) fn finish(
        &mut self,
        status: InvocationStatus,
        reason: &str,
        output_sha256: String,
    ) -> Result<Arc<InvocationRecord>, InvokeError> {
        let mut draft = self.draft.take().expect("a record is finished once");
        draft.status = status;
        draft.error_reason = reason.to_owned();
        draft.output_sha256 = output_sha256;
        draft.finished_at = SystemTime::now();
        Ok(self.records.append(draft)?)
    }

    pub(super) fn fail(
        &mut self,
        status: InvocationStatus,
        reason: &str,
        error: InvokeError,
    ) -> Failed {
        match self.finish(status, reason, String::new()) {
            Ok(record) => Failed {
                error,
                record: Some(record),
            },
            Err(record_error) => Failed {
                error: record_error,
                record: None,
            },
        }
    }
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        let Some(draft) = &self.draft else { return };
        let (tenant, correlation_id, tool) = (
            draft.tenant.0,
            draft.correlation_id.clone(),
            draft.tool_name.clone(),
        );
        // Dropped while unwinding: the call's own work panicked, it was not called off.
        let (status, reason) = if std::thread::panicking() {
            (InvocationStatus::Failed, "INTERNAL")
        } else {
            (InvocationStatus::Cancelled, "CANCELLED")
        };
        if let Err(error) = self.finish(status, reason, String::new()) {
            tracing::error!(tenant, %correlation_id, %tool, %error, "cannot record an invocation that did not finish");
        }
    }
}

/// The reason written to a record for an engine error.
pub fn reason_of(error: &InvokeError) -> String {
    match error {
        InvokeError::InvalidInput { .. } => "VALIDATION_INPUT".to_owned(),
        InvokeError::Resolve(crate::registry::RegistryError::AmbiguousTool { .. }) => {
            "RESOURCE_AMBIGUOUS".to_owned()
        }
        InvokeError::Resolve(_) => "RESOURCE_NOT_FOUND".to_owned(),
        InvokeError::RateLimited { .. } => "RATE_LIMIT_EXCEEDED".to_owned(),
        InvokeError::TooManyInFlight { .. } => "RATE_LIMIT_CONCURRENCY".to_owned(),
        InvokeError::NoEndpoint { .. } => "TOOL_NO_ENDPOINT".to_owned(),
        InvokeError::ProviderUnhealthy { .. } => "TOOL_UNHEALTHY".to_owned(),
        InvokeError::NoInstanceOffers { .. } => "TOOL_UNAVAILABLE".to_owned(),
        InvokeError::Timeout { .. } => "TOOL_TIMEOUT".to_owned(),
        InvokeError::CheckTimeout { .. } | InvokeError::OutputCheckTimeout { .. } => {
            "VALIDATION_TIMEOUT".to_owned()
        }
        InvokeError::Provider { failure, .. } => failure.reason.clone(),
        InvokeError::Records(_) => "RECORDS_UNAVAILABLE".to_owned(),
        InvokeError::SchemaUnavailable { .. } => "SCHEMA_UNAVAILABLE".to_owned(),
    }
}
