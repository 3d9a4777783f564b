//! The server's own expiry lateness, read from its metrics endpoint (scenario 3): how late it
//! removed the round's lapsed leases, as `toolplane_lease_expiry_lateness_seconds` counts them.

/// The cumulative buckets of the server's `toolplane_lease_expiry_lateness_seconds`: (upper
/// bound in seconds, lapses at most that late), `+Inf` last.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ServerLateness(Vec<(f64, u64)>);

impl ServerLateness {
    /// Scrapes the server's metrics endpoint at `metrics` (`127.0.0.1:PORT`).
    pub(super) async fn scrape(metrics: &str) -> Result<Self, String> {
        let text = crate::grpc::outgoing_tls::http_client_builder(None)
            .build()
            .map_err(|e| e.to_string())?
            .get(format!("http://{metrics}/metrics"))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("scraping toolplane's metrics: {e}"))?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self::parse(&text))
    }

    /// Reads the histogram's buckets out of a scrape's text (other lines are skipped).
    fn parse(text: &str) -> Self {
        let buckets = text
            .lines()
            .filter_map(|line| {
                let rest =
                    line.strip_prefix("toolplane_lease_expiry_lateness_seconds_bucket{le=\"")?;
                let (bound, count) = rest.split_once("\"} ")?;
                let bound = if bound == "+Inf" {
                    f64::INFINITY
                } else {
                    bound.parse().ok()?
                };
                Some((bound, count.trim().parse().ok()?))
            })
            .collect();
        Self(buckets)
    }

    /// The lapses counted since `before`.
    pub(super) fn since(&self, before: &Self) -> Self {
        let earlier = |bound: f64| {
            before
                .0
                .iter()
                .find(|(b, _)| *b == bound)
                .map_or(0, |(_, count)| *count)
        };
        Self(
            self.0
                .iter()
                .map(|(bound, count)| (*bound, count.saturating_sub(earlier(*bound))))
                .collect(),
        )
    }

    /// The upper bound, in milliseconds, of the bucket holding the `quantile` of the lapses
    /// (`None` without any; infinite past the last bound).
    pub(super) fn bound_ms(&self, quantile: f64) -> Option<f64> {
        let total = self.0.last()?.1;
        let wanted = (quantile * total as f64).ceil().max(1.0) as u64;
        (total > 0).then(|| {
            self.0
                .iter()
                .find(|(_, count)| *count >= wanted)
                .map_or(f64::INFINITY, |(bound, _)| bound * 1000.0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ServerLateness;

    const SCRAPE: &str = "# TYPE toolplane_lease_expiry_lateness_seconds histogram
toolplane_lease_expiry_lateness_seconds_sum 0.5
toolplane_lease_expiry_lateness_seconds_count 100
toolplane_lease_expiry_lateness_seconds_bucket{le=\"0.001\"} 10
toolplane_lease_expiry_lateness_seconds_bucket{le=\"0.0025\"} 98
toolplane_lease_expiry_lateness_seconds_bucket{le=\"0.005\"} 99
toolplane_lease_expiry_lateness_seconds_bucket{le=\"0.01\"} 100
toolplane_lease_expiry_lateness_seconds_bucket{le=\"+Inf\"} 100
";

    #[test]
    fn lateness_is_read_from_the_metric_and_counted_per_round() {
        let now = ServerLateness::parse(SCRAPE);
        assert_eq!(now.0.len(), 5);
        assert_eq!(now.bound_ms(0.99), Some(5.0));
        assert_eq!(now.bound_ms(1.0), Some(10.0));
        let before = ServerLateness(vec![
            (0.001, 5),
            (0.0025, 5),
            (0.005, 5),
            (0.01, 5),
            (f64::INFINITY, 5),
        ]);
        let round = now.since(&before);
        assert_eq!(round.0.last(), Some(&(f64::INFINITY, 95)));
        assert_eq!(round.bound_ms(0.5), Some(2.5));
        assert_eq!(ServerLateness::default().bound_ms(0.99), None);
        assert_eq!(
            ServerLateness(vec![(f64::INFINITY, 0)]).bound_ms(0.99),
            None
        );
    }
}
