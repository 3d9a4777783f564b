//! Benchmark results: one row per metric with every repetition's value, printed as a table of
//! medians, spreads and ratios, and as JSON.

use serde::Serialize;

/// One measured quantity.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The scenario (1-5) and what was measured.
    pub scenario: String,
    /// The metric, e.g. `GetTool c=64 rps`.
    pub metric: String,
    /// The unit.
    pub unit: String,
    /// toolplane's value in each repetition.
    pub toolplane: Vec<f64>,
    /// The baseline's value in each repetition, when there is a baseline.
    pub baseline: Option<Vec<f64>>,
    /// The target, in words, when the issue sets one.
    pub target: Option<String>,
    /// Whether the target is met by the medians.
    pub met: Option<bool>,
    /// In how many repetitions the target is met, each judged on its own (toolplane's value
    /// against the baseline's of the same repetition): how much the verdict depends on the
    /// machine's moment.
    pub met_in: Option<usize>,
}

/// The median of some values (0 for none).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn spread(values: &[f64]) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.is_empty() {
        String::new()
    } else {
        format!("{}-{}", short(min), short(max))
    }
}

fn short(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

impl Row {
    /// A row without a baseline.
    pub fn single(scenario: &str, metric: &str, unit: &str, values: Vec<f64>) -> Self {
        Self {
            scenario: scenario.to_owned(),
            metric: metric.to_owned(),
            unit: unit.to_owned(),
            toolplane: values,
            baseline: None,
            target: None,
            met: None,
            met_in: None,
        }
    }

    /// A row with a baseline.
    pub fn paired(
        scenario: &str,
        metric: &str,
        unit: &str,
        toolplane: Vec<f64>,
        baseline: Vec<f64>,
    ) -> Self {
        Self {
            baseline: Some(baseline),
            ..Self::single(scenario, metric, unit, toolplane)
        }
    }

    /// Sets a target, judged by `check` on (toolplane median, baseline median or 0), and on
    /// each repetition's pair of values.
    pub fn target(mut self, words: &str, check: impl Fn(f64, f64) -> bool) -> Self {
        let baseline = self.baseline.as_deref().map(median).unwrap_or_default();
        self.met = Some(check(median(&self.toolplane), baseline));
        let baseline_in = |round: usize| {
            self.baseline
                .as_ref()
                .and_then(|values| values.get(round).copied())
                .unwrap_or_default()
        };
        let met_in = self
            .toolplane
            .iter()
            .enumerate()
            .filter(|&(round, &value)| check(value, baseline_in(round)))
            .count();
        self.met_in = Some(met_in);
        self.target = Some(words.to_owned());
        self
    }

    /// The met column: the verdict on the medians, and in how many repetitions it was met.
    fn verdict(&self) -> String {
        match self.met {
            None => "-".to_owned(),
            Some(met) => format!(
                "{} ({} of {})",
                if met { "yes" } else { "NO" },
                self.met_in.unwrap_or_default(),
                self.toolplane.len()
            ),
        }
    }

    /// toolplane's median over the baseline's.
    pub fn ratio(&self) -> Option<f64> {
        let baseline = median(self.baseline.as_deref()?);
        (baseline != 0.0).then(|| median(&self.toolplane) / baseline)
    }
}

/// Renders rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | metric | unit | toolplane median (spread) | baseline median (spread) | ratio | target | met (in rounds) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let baseline = row
            .baseline
            .as_ref()
            .map(|b| format!("{} ({})", short(median(b)), spread(b)))
            .unwrap_or_else(|| "-".to_owned());
        out.push_str(&format!(
            "| {} | {} | {} | {} ({}) | {} | {} | {} | {} |\n",
            row.scenario,
            row.metric,
            row.unit,
            short(median(&row.toolplane)),
            spread(&row.toolplane),
            baseline,
            row.ratio()
                .map(|r| format!("{r:.2}x"))
                .unwrap_or_else(|| "-".to_owned()),
            row.target.clone().unwrap_or_else(|| "-".to_owned()),
            row.verdict(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict is the medians'; each repetition is also judged against its own baseline.
    #[test]
    fn a_target_is_judged_on_the_medians_and_round_by_round() {
        let paired = Row::paired(
            "2",
            "rps",
            "req/s",
            vec![40.0, 60.0, 55.0],
            vec![100.0, 100.0, 120.0],
        )
        .target(">= 0.5x", |t, base| t >= 0.5 * base);
        assert_eq!((paired.met, paired.met_in), (Some(true), Some(1)));
        assert!(table(&[paired]).contains("| yes (1 of 3) |"));
        let single = Row::single("5", "ms", "ms", vec![90.0, 120.0, 95.0])
            .target("<= 100 ms", |t, _| t <= 100.0);
        assert_eq!((single.met, single.met_in), (Some(true), Some(2)));
        let missed =
            Row::single("5", "ms", "ms", vec![150.0]).target("<= 100 ms", |t, _| t <= 100.0);
        assert!(table(&[missed]).contains("| NO (0 of 1) |"));
        let untargeted = Row::single("5", "ms", "ms", vec![1.0]);
        assert!(table(&[untargeted]).ends_with("| - | - |\n"));
    }
}
