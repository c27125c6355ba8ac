//! Request counters and a latency histogram, kept in atomics and written in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What kind of route a request went to; the label of the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteClass {
    Page,
    Raw,
    Static,
    Search,
    Api,
    Engine,
    Health,
    Metrics,
    NotFound,
    Run,
}

impl RouteClass {
    const ALL: [RouteClass; 10] = [
        RouteClass::Page,
        RouteClass::Raw,
        RouteClass::Static,
        RouteClass::Search,
        RouteClass::Api,
        RouteClass::Engine,
        RouteClass::Health,
        RouteClass::Metrics,
        RouteClass::NotFound,
        RouteClass::Run,
    ];

    fn name(self) -> &'static str {
        match self {
            RouteClass::Page => "page",
            RouteClass::Raw => "raw",
            RouteClass::Static => "static",
            RouteClass::Search => "search",
            RouteClass::Api => "api",
            RouteClass::Engine => "engine",
            RouteClass::Health => "health",
            RouteClass::Metrics => "metrics",
            RouteClass::NotFound => "not_found",
            RouteClass::Run => "run",
        }
    }
}

/// Status codes are counted by class: 2xx, 3xx, 4xx, 5xx.
const STATUS_CLASSES: [&str; 4] = ["2xx", "3xx", "4xx", "5xx"];
/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 10] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0,
];

/// All counters of the server.
#[derive(Debug)]
pub struct Metrics {
    requests: [[AtomicU64; 4]; 10],
    buckets: [AtomicU64; 10],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Counts one answered request.
    pub fn record(&self, class: RouteClass, status: u16, elapsed: Duration) {
        let class_index = RouteClass::ALL
            .iter()
            .position(|c| *c == class)
            .unwrap_or(0);
        let status_index = usize::from(status / 100).clamp(2, 5) - 2;
        self.requests[class_index][status_index].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP netcl_wiki_requests_total Requests answered, by route class and status class.\n");
        out.push_str("# TYPE netcl_wiki_requests_total counter\n");
        for (class, row) in RouteClass::ALL.iter().zip(&self.requests) {
            for (status, n) in STATUS_CLASSES.iter().zip(row) {
                let _ = writeln!(
                    out,
                    "netcl_wiki_requests_total{{route=\"{}\",status=\"{status}\"}} {}",
                    class.name(),
                    n.load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# HELP netcl_wiki_request_duration_seconds Time from routing to response, in seconds.\n");
        out.push_str("# TYPE netcl_wiki_request_duration_seconds histogram\n");
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "netcl_wiki_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "netcl_wiki_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "netcl_wiki_request_duration_seconds_sum {sum}");
        let _ = writeln!(out, "netcl_wiki_request_duration_seconds_count {count}");
        out
    }
}

/// Values read when `/metrics` is scraped: readiness, the drain, and the playground's run queue (the number
/// an autoscaler watches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    /// `/readyz` answers 200.
    pub ready: bool,
    /// The server is draining after SIGTERM.
    pub draining: bool,
    /// Runs admitted and not yet answered: running on a worker or waiting for one.
    pub runs_in_flight: usize,
    /// Runs that may be in flight at once (workers + queue); past it runs are answered 503 `busy`.
    pub run_capacity: usize,
    /// Worker processes configured for the server's device.
    pub workers: usize,
    /// Worker processes running now (every device).
    pub workers_running: usize,
    /// Workers started to replace a killed or crashed one.
    pub worker_restarts: u64,
}

impl Gauges {
    /// The Prometheus text exposition of the gauges.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {value}");
        };
        metric(
            "netcl_wiki_ready",
            "gauge",
            "1 when /readyz answers 200.",
            u64::from(self.ready),
        );
        metric(
            "netcl_wiki_draining",
            "gauge",
            "1 while the server drains after SIGTERM.",
            u64::from(self.draining),
        );
        metric(
            "netcl_wiki_run_queue",
            "gauge",
            "Runs admitted and not yet answered: running on a worker or waiting for one.",
            self.runs_in_flight as u64,
        );
        metric(
            "netcl_wiki_run_queue_capacity",
            "gauge",
            "Runs that may be in flight at once (workers + queue); past it runs are refused as busy.",
            self.run_capacity as u64,
        );
        metric(
            "netcl_wiki_workers",
            "gauge",
            "Playground worker processes configured for the server's device.",
            self.workers as u64,
        );
        metric(
            "netcl_wiki_workers_running",
            "gauge",
            "Playground worker processes running now.",
            self.workers_running as u64,
        );
        metric(
            "netcl_wiki_worker_restarts_total",
            "counter",
            "Workers started to replace a killed or crashed one.",
            self.worker_restarts,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets() {
        let m = Metrics::default();
        m.record(RouteClass::Page, 200, Duration::from_micros(80));
        m.record(RouteClass::NotFound, 404, Duration::from_millis(3));
        let text = m.render();
        assert!(
            text.contains("netcl_wiki_requests_total{route=\"page\",status=\"2xx\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("netcl_wiki_requests_total{route=\"not_found\",status=\"4xx\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("netcl_wiki_request_duration_seconds_bucket{le=\"0.0001\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("netcl_wiki_request_duration_seconds_bucket{le=\"0.005\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("netcl_wiki_request_duration_seconds_count 2"),
            "{text}"
        );
    }

    #[test]
    fn gauges_render() {
        let g = Gauges {
            ready: true,
            runs_in_flight: 3,
            run_capacity: 18,
            ..Gauges::default()
        };
        let text = g.render();
        assert!(text.contains("\nnetcl_wiki_run_queue 3\n"), "{text}");
        assert!(
            text.contains("netcl_wiki_run_queue_capacity 18\n"),
            "{text}"
        );
        assert!(text.contains("netcl_wiki_ready 1\n"), "{text}");
        assert!(text.contains("netcl_wiki_draining 0\n"), "{text}");
        assert!(
            text.contains("# TYPE netcl_wiki_run_queue gauge\n"),
            "{text}"
        );
    }
}
