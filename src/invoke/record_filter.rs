//! Which records a listing keeps.

use super::records::{InvocationRecord, InvocationStatus};

/// Filters of a record listing; they combine with AND.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFilter {
    /// Only this tool.
    pub tool_name: Option<String>,
    /// Only this service.
    pub service_name: Option<String>,
    /// Only this correlation id.
    pub correlation_id: Option<String>,
    /// Only this status.
    pub status: Option<InvocationStatus>,
    /// Only calls made in this W3C trace.
    pub trace_id: Option<String>,
}

impl RecordFilter {
    pub(super) fn matches(&self, record: &InvocationRecord) -> bool {
        self.tool_name
            .as_ref()
            .is_none_or(|t| *t == record.tool_name)
            && self
                .service_name
                .as_ref()
                .is_none_or(|s| *s == record.service_name)
            && self
                .correlation_id
                .as_ref()
                .is_none_or(|c| *c == record.correlation_id)
            && self.status.is_none_or(|s| s == record.status)
            && self.trace_id.as_ref().is_none_or(|t| *t == record.trace_id)
    }
}
