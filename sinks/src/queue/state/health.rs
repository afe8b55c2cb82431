//! The sink's health as the queue sees it: stalled (an acknowledgement overdue), failing (a
//! batch handed back and none delivered since), and when to try again after a failure.

use std::time::{Duration, Instant};

use backon::ExponentialBackoff;

use crate::queue::{retry_delays, BACKOFF_MAX};

#[derive(Debug)]
pub(crate) struct Health {
    /// Set while an acknowledgement is overdue (see `Shared::check_stall`).
    stalled: bool,
    /// False from a rejected batch until the next delivered one.
    delivering: bool,
    /// The delays of the retries to come.
    backoff: ExponentialBackoff,
    retry_at: Option<Instant>,
}

impl Health {
    pub(crate) fn new() -> Self {
        Self {
            stalled: false,
            delivering: true,
            backoff: retry_delays(),
            retry_at: None,
        }
    }

    pub(crate) fn stalled(&self) -> bool {
        self.stalled
    }

    /// Records whether the sink is stalled; true when that changed.
    pub(crate) fn set_stalled(&mut self, stalled: bool) -> bool {
        let changed = stalled != self.stalled;
        self.stalled = stalled;
        changed
    }

    /// Neither failing nor stalled.
    pub(crate) fn healthy(&self) -> bool {
        self.delivering && !self.stalled
    }

    /// Whether no batch was handed back since the last delivery.
    pub(crate) fn delivering(&self) -> bool {
        self.delivering
    }

    /// The sink handed a batch back at `now`: it is failing, and the next try waits for the
    /// next delay of the backoff (doubling, with jitter).
    pub(crate) fn failed(&mut self, now: Instant) {
        self.delivering = false;
        let delay: Duration = self.backoff.next().unwrap_or(BACKOFF_MAX).min(BACKOFF_MAX);
        self.retry_at = now.checked_add(delay);
    }

    /// The sink delivered a batch: healthy, not stalled, the backoff starts again; true when
    /// it was failing or stalled.
    pub(crate) fn recovered(&mut self) -> bool {
        let was_unhealthy = !self.healthy();
        self.delivering = true;
        self.stalled = false;
        self.backoff = retry_delays();
        self.retry_at = None;
        was_unhealthy
    }

    /// When the next try may happen, while a backoff runs.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}
