//! The progress reports (`notifications/progress`) an MCP server sends during toolplane's
//! calls, routed to the call each is for by its progress token.
//!
//! Written here rather than taken from rmcp's client handler (`on_progress`, and its
//! `ProgressDispatcher`), which runs each notification on a task of its own: a server's last
//! report, sent just before its answer, could then reach the call after the answer. Here
//! [`ProgressTap`] routes each report as the transport receives it, so it is with its call
//! before the messages after it are read. And rmcp gives a request's token only once the
//! request is on its way, so a quick server's first report can arrive before its call
//! subscribes: such reports are kept (the latest [`UNCLAIMED_REPORTS`]) for the call that
//! subscribes to their token. rmcp puts a token on every request, so servers also report on
//! calls whose callers want no progress; those are never claimed and give way to newer ones.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleClient;
use rmcp::model::{
    JsonRpcMessage, JsonRpcNotification, ProgressNotificationParam, ProgressToken,
    ServerNotification,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;

/// The most reports kept for tokens no call has subscribed to.
pub const UNCLAIMED_REPORTS: usize = 64;

/// The calls of one MCP session waiting for progress reports, by token.
#[derive(Debug, Default)]
pub struct ProgressRoutes {
    routes: Mutex<Routes>,
}

#[derive(Debug, Default)]
struct Routes {
    subscribed: HashMap<ProgressToken, mpsc::UnboundedSender<ProgressNotificationParam>>,
    unclaimed: VecDeque<ProgressNotificationParam>,
}

impl ProgressRoutes {
    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `report` to the call subscribed to its token, or keeps it for the call that
    /// subscribes to it.
    pub fn deliver(&self, report: ProgressNotificationParam) {
        let mut routes = self.routes();
        if let Some(call) = routes.subscribed.get(&report.progress_token) {
            let _ = call.send(report);
            return;
        }
        if routes.unclaimed.len() == UNCLAIMED_REPORTS {
            routes.unclaimed.pop_front();
        }
        routes.unclaimed.push_back(report);
    }

    /// The reports for `token`, those kept for it first, until the answer is dropped.
    pub fn subscribe(self: &Arc<Self>, token: ProgressToken) -> ProgressReports {
        let (sender, reports) = mpsc::unbounded_channel();
        let mut routes = self.routes();
        routes.unclaimed.retain(|report| {
            let claimed = report.progress_token == token;
            if claimed {
                let _ = sender.send(report.clone());
            }
            !claimed
        });
        routes.subscribed.insert(token.clone(), sender);
        ProgressReports {
            token,
            reports,
            routes: Arc::clone(self),
        }
    }
}

/// One call's progress reports, in the order they came; unsubscribed when dropped.
#[derive(Debug)]
pub struct ProgressReports {
    token: ProgressToken,
    reports: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    routes: Arc<ProgressRoutes>,
}

impl ProgressReports {
    /// The next report.
    pub async fn next(&mut self) -> Option<ProgressNotificationParam> {
        self.reports.recv().await
    }

    /// The next report if one has come.
    pub fn try_next(&mut self) -> Option<ProgressNotificationParam> {
        self.reports.try_recv().ok()
    }
}

impl Drop for ProgressReports {
    fn drop(&mut self) {
        self.routes.routes().subscribed.remove(&self.token);
    }
}

/// A session's transport that hands each progress report to its [`ProgressRoutes`] as it is
/// received, before the messages after it are read.
#[derive(Debug)]
pub struct ProgressTap<T> {
    /// The transport.
    pub inner: T,
    /// Where the reports go.
    pub routes: Arc<ProgressRoutes>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for ProgressTap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::ProgressNotification(progress),
            ..
        }) = &message
        {
            self.routes.deliver(progress.params.clone());
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn report(token: i64, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), progress)
    }

    #[tokio::test]
    async fn reports_before_the_subscription_are_kept_for_it_in_order() {
        let routes = Arc::new(ProgressRoutes::default());
        routes.deliver(report(1, 0.0));
        routes.deliver(report(2, 7.0));
        routes.deliver(report(1, 50.0));
        let token = ProgressToken(NumberOrString::Number(1));
        let mut reports = routes.subscribe(token);
        routes.deliver(report(1, 100.0));
        for expected in [0.0, 50.0, 100.0] {
            assert_eq!(reports.next().await.map(|r| r.progress), Some(expected));
        }
        assert!(reports.try_next().is_none());
        drop(reports);
        routes.deliver(report(1, 101.0));
        assert_eq!(
            routes.routes().unclaimed.len(),
            2,
            "token 2's and the late one"
        );
    }

    #[test]
    fn only_the_latest_unclaimed_reports_are_kept() {
        let routes = ProgressRoutes::default();
        for token in 0..(UNCLAIMED_REPORTS as i64 + 10) {
            routes.deliver(report(token, 1.0));
        }
        let routes = routes.routes();
        assert_eq!(routes.unclaimed.len(), UNCLAIMED_REPORTS);
        assert_eq!(
            routes.unclaimed.front().map(|r| r.progress_token.clone()),
            Some(ProgressToken(NumberOrString::Number(10)))
        );
    }
}
