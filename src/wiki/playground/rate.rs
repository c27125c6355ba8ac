//! Per-client rate limiting: a token bucket per client address, so a few busy clients cannot take every run.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Clients remembered before full buckets are forgotten.
const MAX_CLIENTS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Token buckets by client: `burst` runs at once, refilled at `per_minute`.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// A limiter allowing `burst` runs at once and `per_minute` on average.
    pub fn new(per_minute: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            per_second: f64::from(per_minute.max(1)) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one run from `client`'s bucket; `Err(wait)` says how long until one is available.
    pub fn check(&self, client: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = match self.buckets.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        if buckets.len() >= MAX_CLIENTS && !buckets.contains_key(client) {
            let (rate, burst) = (self.per_second, self.burst);
            buckets
                .retain(|_, b| b.tokens + now.duration_since(b.last).as_secs_f64() * rate < burst);
        }
        let bucket = buckets.entry(client.to_string()).or_insert(Bucket {
            tokens: self.burst,
            last: now,
        });
        let refill = now.duration_since(bucket.last).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refill).min(self.burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / self.per_second,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refusal_per_client() {
        let r = RateLimiter::new(60, 2);
        assert!(r.check("a").is_ok());
        assert!(r.check("a").is_ok());
        let wait = r.check("a").unwrap_err();
        assert!(wait > Duration::from_millis(900) && wait <= Duration::from_secs(1));
        assert!(r.check("b").is_ok(), "clients have their own buckets");
    }
}
