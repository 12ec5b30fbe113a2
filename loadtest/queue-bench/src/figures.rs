//! What a scenario hands back: its figures (printed, and written as JSON for the bench's
//! tables) and its checks, each a goal or an invariant with its verdict.

use serde::Serialize;

pub use loadtest_core::report::Check;

/// A scenario's figures and checks.
#[derive(Debug, Serialize)]
pub struct ScenarioReport<F> {
    pub scenario: &'static str,
    pub figures: F,
    pub checks: Vec<Check>,
}

/// Figures that can say themselves in a few lines.
pub trait Lines {
    fn lines(&self) -> Vec<String>;
}

impl<F: Lines> ScenarioReport<F> {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    pub fn print(&self) {
        println!("{}", self.scenario);
        for line in self.figures.lines() {
            println!("  {line}");
        }
        for check in &self.checks {
            println!(
                "[{}] {}: {}",
                if check.passed { "ok" } else { "FAILED" },
                check.name,
                check.detail
            );
        }
    }
}

pub fn check(name: &str, passed: bool, detail: String) -> Check {
    Check {
        name: name.into(),
        passed,
        detail,
    }
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The `p`th percentile of `values` (nearest rank).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    loadtest_core::report::percentile(&sorted, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(percentile(&[5.0, 1.0, 4.0, 2.0, 3.0], 100.0), 5.0);
    }
}
