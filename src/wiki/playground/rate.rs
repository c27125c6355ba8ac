//! Per-client limits: a token bucket per client address (how often a client may start runs) and a count of
//! the runs each client has open (how many it may hold at once), so a few busy or hostile clients cannot take
//! every worker and queue place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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

/// The runs each client has open: queued, running, or with an answer it has not read yet. A client at its
/// limit is refused until one of them ends.
#[derive(Debug)]
pub struct OpenRuns {
    max: usize,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

/// One open run of a client; dropping it (the answer was read, or the client went away) gives it back.
#[derive(Debug)]
pub struct OpenRun {
    client: String,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

impl OpenRuns {
    /// At most `max` open runs per client (at least one).
    pub fn new(max: usize) -> OpenRuns {
        OpenRuns {
            max: max.max(1),
            counts: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The most runs one client may have open.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Opens a run for `client`, or `None` when it already has `max` open.
    pub fn open(&self, client: &str) -> Option<OpenRun> {
        let mut counts = match self.counts.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        let n = counts.entry(client.to_string()).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(OpenRun {
            client: client.to_string(),
            counts: Arc::clone(&self.counts),
        })
    }

    /// The runs `client` has open now.
    pub fn count(&self, client: &str) -> usize {
        match self.counts.lock() {
            Ok(c) => c.get(client).copied().unwrap_or(0),
            Err(poisoned) => poisoned.into_inner().get(client).copied().unwrap_or(0),
        }
    }
}

impl Drop for OpenRun {
    fn drop(&mut self) {
        let mut counts = match self.counts.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(n) = counts.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // Clients with nothing open are forgotten, so the map holds only clients with open runs.
                counts.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_runs_per_client() {
        let r = OpenRuns::new(2);
        let a1 = r.open("a").expect("first");
        let a2 = r.open("a").expect("second");
        assert!(
            r.open("a").is_none(),
            "a third run of one client is refused"
        );
        assert!(r.open("b").is_some(), "clients are counted apart");
        assert_eq!(r.count("a"), 2);
        drop(a1);
        assert_eq!(r.count("a"), 1);
        let a3 = r.open("a").expect("a run ended, so another may start");
        drop((a2, a3));
        assert_eq!(r.count("a"), 0);
        assert!(
            r.counts.lock().unwrap().is_empty(),
            "idle clients are forgotten"
        );
    }

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
