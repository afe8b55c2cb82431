//! The observed share of each process's time per statistics interval, from the schedule's
//! running ledger.

use std::collections::HashMap;

/// Per-interval fractions from the ledger: each call compares with the ledger of the previous
/// call (the previous statistics interval's end).
#[derive(Debug, Default)]
pub struct IntervalFractions {
    previous: HashMap<u32, (f64, f64)>,
}

impl IntervalFractions {
    /// The observed share of each process's followed time since the last call; processes
    /// followed in full (or not at all) get 1.0.
    pub fn take(&mut self, ledger: HashMap<u32, (f64, f64)>) -> HashMap<u32, f64> {
        let fractions = ledger
            .iter()
            .map(|(pid, &(tracked, observed))| {
                let (tracked_before, observed_before) =
                    self.previous.get(pid).copied().unwrap_or((0.0, 0.0));
                let tracked = tracked - tracked_before;
                let observed = observed - observed_before;
                // (Sums of the same spans in another order differ in their last bits.)
                let fraction = if tracked <= 0.0 || observed >= tracked * (1.0 - 1e-9) {
                    1.0
                } else {
                    (observed / tracked).max(0.0)
                };
                (*pid, fraction)
            })
            .collect();
        self.previous = ledger;
        fractions
    }
}
