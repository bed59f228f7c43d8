//! The write budget of a flash tier: a token bucket of bytes over time, one rule for the
//! simulator's flash tier and `serve`'s.

use std::time::Duration;

/// A token bucket of bytes over time (trace time here, the proxy's clock in the live flash
/// tier): the write budget of a flash tier.
#[derive(Clone, Copy, Debug)]
pub struct WriteBudget {
    rate: f64,
    tokens: f64,
    at: Duration,
}

impl WriteBudget {
    /// A bucket of `rate` bytes a second, holding one second's worth, full at time zero.
    pub fn new(rate: u64) -> WriteBudget {
        WriteBudget {
            rate: rate as f64,
            tokens: rate as f64,
            at: Duration::ZERO,
        }
    }

    /// Takes `bytes` at `now` if the bucket holds them, or if it is full (an object larger than
    /// one second's worth then leaves the bucket owing). Time that goes back earns nothing.
    pub fn take(&mut self, bytes: u64, now: Duration) -> bool {
        if now > self.at {
            let earned = (now - self.at).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + earned).min(self.rate);
        }
        self.at = now;
        let bytes = bytes as f64;
        if bytes <= self.tokens || self.tokens >= self.rate {
            self.tokens -= bytes;
            true
        } else {
            false
        }
    }
}
