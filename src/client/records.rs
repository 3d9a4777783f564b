//! Reading invocation records: a filtered listing followed across its pages, and one record
//! by its id.

use super::{ClientError, ToolplaneClient};
use crate::pb;
use crate::pb::tool_invoke_service_client::ToolInvokeServiceClient;

/// Which invocation records [`ToolplaneClient::records`] lists; unset filters pass all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordFilter<'a> {
    /// Only records of this tool.
    pub tool: Option<&'a str>,
    /// Only records of calls made in this W3C trace.
    pub trace_id: Option<&'a str>,
    /// Only records with this correlation id (an MCP session's calls share its session id).
    pub correlation_id: Option<&'a str>,
    /// Only records of this service.
    pub service: Option<&'a str>,
    /// Only records with this status.
    pub status: Option<pb::InvocationStatus>,
}

/// How many records [`ToolplaneClient::records`] answers with a limit of 0.
pub const DEFAULT_RECORDS: i32 = 100;

impl ToolplaneClient {
    /// Up to `limit` invocation records (newest first) that pass `filter` (0: up to
    /// [`DEFAULT_RECORDS`]), following the listing's pages: a page can come back short while
    /// older records are still being read from the server's record files.
    pub async fn records(
        &self,
        filter: &RecordFilter<'_>,
        limit: i32,
    ) -> Result<Vec<pb::InvocationRecord>, ClientError> {
        // A negative limit is sent as it is, for the server's error.
        let wanted = if limit == 0 { DEFAULT_RECORDS } else { limit };
        let mut records = Vec::new();
        let mut page_token = String::new();
        loop {
            let left = wanted.saturating_sub(i32::try_from(records.len()).unwrap_or(i32::MAX));
            let request = pb::ListInvocationRecordsRequest {
                meta: self.meta(),
                tool_name: filter.tool.unwrap_or_default().to_owned(),
                trace_id: filter.trace_id.unwrap_or_default().to_owned(),
                correlation_id: filter.correlation_id.unwrap_or_default().to_owned(),
                service_name: filter.service.unwrap_or_default().to_owned(),
                status: filter.status.map_or(0, |status| status as i32),
                page_size: left,
                page_token,
            };
            let page = (ToolInvokeServiceClient::new(self.channel())
                .list_invocation_records(request)
                .await?)
                .into_inner();
            records.extend(page.records);
            page_token = page.next_page_token;
            if page_token.is_empty() || records.len() >= usize::try_from(wanted).unwrap_or(0) {
                return Ok(records);
            }
        }
    }

    /// The invocation record `invocation_id` names, from the server's memory or its record
    /// files (NOT_FOUND when it has none, or it is another tenant's).
    pub async fn record(&self, invocation_id: &str) -> Result<pb::InvocationRecord, ClientError> {
        let request = pb::GetInvocationRecordRequest {
            meta: self.meta(),
            invocation_id: invocation_id.to_owned(),
        };
        let answer = (ToolInvokeServiceClient::new(self.channel())
            .get_invocation_record(request)
            .await?)
            .into_inner();
        Ok(answer.record.unwrap_or_default())
    }
}
