//! The queue's two ends: how many producers still hold a sender, whether the receiver (the
//! sink) is still there, and when the last sender went (the shutdown deadline counts from it).

use std::time::Instant;

#[derive(Debug)]
pub(crate) struct Ends {
    senders: usize,
    receiver_alive: bool,
    closed_at: Option<Instant>,
}

impl Ends {
    /// One sender and the receiver.
    pub(crate) fn new() -> Self {
        Self {
            senders: 1,
            receiver_alive: true,
            closed_at: None,
        }
    }

    pub(crate) fn add_sender(&mut self) {
        self.senders += 1;
    }

    /// A sender went at `now`; the last one closes the queue.
    pub(crate) fn drop_sender(&mut self, now: Instant) {
        self.senders -= 1;
        if self.senders == 0 {
            self.closed_at = Some(now);
        }
    }

    /// Whether every sender is gone.
    pub(crate) fn closed(&self) -> bool {
        self.senders == 0
    }

    /// When the last sender went.
    pub(crate) fn closed_at(&self) -> Option<Instant> {
        self.closed_at
    }

    /// Whether `timeout` has passed at `now` since the queue closed (the shutdown deadline).
    pub(crate) fn past_deadline(&self, now: Instant, timeout: std::time::Duration) -> bool {
        self.closed_at
            .is_some_and(|closed| now.saturating_duration_since(closed) >= timeout)
    }

    pub(crate) fn receiver_alive(&self) -> bool {
        self.receiver_alive
    }

    /// The receiver is gone: nothing more is taken.
    pub(crate) fn receiver_gone(&mut self) {
        self.receiver_alive = false;
    }
}
