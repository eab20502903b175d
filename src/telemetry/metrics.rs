//! This replica's Prometheus metrics, kept with `prometheus-client` and written at `/metrics`
//! in the OpenMetrics text format.
//!
//! One [`Metrics`] per replica (tests run several replicas in one process and scrape each), plus
//! one process-wide family, [`DB_ERRORS`], counted where a driver error becomes a store error.
//! Invariants: label values come from small fixed sets (route templates, status codes, reasons,
//! sweep and task names, SQLSTATE codes, job states), never a job id, a runner id, an owner or
//! a raw path; the hot path only bumps atomics or takes an uncontended lock for a histogram.
//! What the metrics mean and what to alert on: docs/operations.md.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels of a request: the route template (`/v1/jobs/{id}`, or `unmatched`), never a path.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: &'static str,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SweepLabel {
    pub sweep: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabel {
    pub task: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    /// A stage of a lease answer with jobs (hub::wake_stages).
    pub stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabel {
    /// `upload` or `download`.
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BoundLabel {
    /// `runner` (`LEASEHOLD_MAX_TRANSFERS_PER_RUNNER`) or `replica` (`LEASEHOLD_MAX_TRANSFERS`).
    pub bound: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SqlStateLabel {
    /// A five-character SQLSTATE, or `none` for a failure below SQL (I/O, protocol, pool).
    pub sqlstate: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Statement errors by SQLSTATE, process-wide: counted where a driver error becomes a
/// `StoreError`, which has no replica at hand. Every replica's registry shows it.
pub static DB_ERRORS: LazyLock<Family<SqlStateLabel, Counter>> = LazyLock::new(Family::default);

/// Count one database error; `code` is its SQLSTATE, if the server sent one.
pub fn db_error(code: Option<&str>) {
    DB_ERRORS
        .get_or_create(&SqlStateLabel {
            sqlstate: code.unwrap_or("none").to_owned(),
        })
        .inc();
}

fn request_buckets() -> Histogram {
    // 1 ms .. 60 s: handlers are milliseconds, long-polls end at their `wait_ms`.
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

fn latency_buckets() -> Histogram {
    // 0.5 ms .. ~4.5 min, doubling.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 20,
    ))
}

fn stage_buckets() -> Histogram {
    // 0.05 ms .. ~3.3 s, doubling: a stage of a wake is tenths of a millisecond to a few.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_05, 2.0, 17,
    ))
}

/// What the scrape reads from the replica at that moment (gauges and counters kept elsewhere).
#[derive(Debug, Default, Clone, Copy)]
pub struct Snapshot {
    pub waiters: u64,
    pub listening: bool,
    pub pool_size: u64,
    pub pool_idle: u64,
    pub pool_waiting: u64,
    pub db_statements: u64,
    pub notifications_sent: u64,
}

/// One replica's metrics. Handles are cheap clones of shared atomics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: HistogramFamily<RequestLabels>,
    pub lease_wait: Histogram,
    pub wake_latency: Histogram,
    /// The stages of lease answers with jobs (hub::wake_stages), by stage.
    pub lease_stages: HistogramFamily<StageLabel>,
    pub leases: Counter,
    pub redeliveries: Counter,
    /// Reports that lease calls carried in `done` (v1.2), whatever each came to.
    pub done_reports: Counter,
    pub stale_reports: Family<ReasonLabel, Counter>,
    pub sweep_batches: Family<SweepLabel, Counter>,
    pub sweep_duration: Histogram,
    pub notifications_heard: Counter,
    pub wakes: Counter,
    pub ticks: Counter,
    /// Ticks that failed (an error or a panic): their waiters answered, their leases given back.
    pub ticks_failed: Counter,
    /// Jobs leased for a call whose caller was gone before the answer was written, given back.
    pub caller_gone: Counter,
    pub rechecks: Counter,
    pub long_polls: Gauge,
    /// The database's snapshot horizon age, in transactions, as last read.
    pub horizon_age: Gauge,
    /// 1 while claims read each queue from remembered places.
    pub claims_from_places: Gauge,
    pub background_failures: Family<TaskLabel, Counter>,
    pub jobs: Family<StateLabel, Gauge>,
    /// Artifact uploads and downloads moving now (v1.3).
    pub transfers: Gauge,
    /// Artifact transfers closed for moving under the floor, by direction.
    pub transfers_too_slow: Family<DirectionLabel, Counter>,
    /// Artifact transfers refused (429) at a cap, by the cap.
    pub transfers_refused: Family<BoundLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::default();
        let requests = HistogramFamily::<RequestLabels>::new_with_constructor(
            request_buckets as fn() -> Histogram,
        );
        r.register(
            "leasehold_http_request_duration_seconds",
            "HTTP requests by method, route template and status, long-polls included.",
            requests.clone(),
        );
        let lease_wait = latency_buckets();
        r.register(
            "leasehold_lease_wait_seconds",
            "From dispatch to first lease, per job (the dispatching replica's clock, from the UUIDv7 id).",
            lease_wait.clone(),
        );
        let wake_latency = latency_buckets();
        r.register(
            "leasehold_wake_latency_seconds",
            "From a parked long-poll being woken to its lease answering with jobs.",
            wake_latency.clone(),
        );
        let lease_stages =
            HistogramFamily::<StageLabel>::new_with_constructor(stage_buckets as fn() -> Histogram);
        r.register(
            "leasehold_lease_stage_seconds",
            "The stages of a lease answer with jobs: heard_to_tick (a park heard until the tick that claims it starts), claim (the tick's statements), commit (until the commit is durable), answer (until the answer is handed to the connection).",
            lease_stages.clone(),
        );
        let leases = Counter::default();
        r.register(
            "leasehold_leases",
            "Jobs leased through this replica.",
            leases.clone(),
        );
        let redeliveries = Counter::default();
        r.register(
            "leasehold_redeliveries",
            "Lapsed leases this replica's sweeper put back to parked.",
            redeliveries.clone(),
        );
        let done_reports = Counter::default();
        r.register(
            "leasehold_done_reports",
            "Job reports carried by lease calls (`done`, v1.2), applied or refused.",
            done_reports.clone(),
        );
        let stale_reports = Family::<ReasonLabel, Counter>::default();
        r.register(
            "leasehold_stale_reports",
            "Runner calls about a job refused as stale, by reason (job_terminal, lease_superseded).",
            stale_reports.clone(),
        );
        let sweep_batches = Family::<SweepLabel, Counter>::default();
        r.register(
            "leasehold_sweeper_batches",
            "Sweeper statements run, by sweep.",
            sweep_batches.clone(),
        );
        let sweep_duration = request_buckets();
        r.register(
            "leasehold_sweep_duration_seconds",
            "One full sweep of this replica.",
            sweep_duration.clone(),
        );
        let notifications_heard = Counter::default();
        r.register(
            "leasehold_notifications_heard",
            "Notifications heard on LISTEN.",
            notifications_heard.clone(),
        );
        let wakes = Counter::default();
        r.register(
            "leasehold_wakes",
            "Parks that made waiting runners due for a claim.",
            wakes.clone(),
        );
        let ticks = Counter::default();
        r.register(
            "leasehold_dispatcher_ticks",
            "Dispatcher ticks: transactions that applied lease calls' reports and claimed for their runners.",
            ticks.clone(),
        );
        let ticks_failed = Counter::default();
        r.register(
            "leasehold_dispatcher_ticks_failed",
            "Dispatcher ticks that failed (an error or a panic): their waiters were answered and what they leased given back.",
            ticks_failed.clone(),
        );
        let caller_gone = Counter::default();
        r.register(
            "leasehold_leases_caller_gone",
            "Jobs leased for a lease call whose caller was gone before its answer was written, parked again (caller_gone).",
            caller_gone.clone(),
        );
        let rechecks = Counter::default();
        r.register(
            "leasehold_rechecks",
            "Safety-net re-check queries.",
            rechecks.clone(),
        );
        let long_polls = Gauge::default();
        r.register(
            "leasehold_long_polls",
            "Lease long-polls parked on this replica now (past their first look).",
            long_polls.clone(),
        );
        let horizon_age = Gauge::default();
        r.register(
            "leasehold_snapshot_horizon_age",
            "Transactions since the oldest snapshot, transaction, slot or prepared transaction the database keeps, read once a second.",
            horizon_age.clone(),
        );
        let claims_from_places = Gauge::default();
        r.register(
            "leasehold_claims_from_places",
            "1 while claims read each class of each queue from where the last claim of it found the first job parked (the horizon is old), 0 while they read queues from the head.",
            claims_from_places.clone(),
        );
        let background_failures = Family::<TaskLabel, Counter>::default();
        r.register(
            "leasehold_background_failures",
            "Background work that failed, by task (sweep, touch, recheck, notify, depth, horizon).",
            background_failures.clone(),
        );
        let jobs = Family::<StateLabel, Gauge>::default();
        r.register(
            "leasehold_jobs",
            "Jobs parked and leased in the whole database, from a periodic query.",
            jobs.clone(),
        );
        let transfers = Gauge::default();
        r.register(
            "leasehold_transfers",
            "Artifact uploads and downloads this replica is moving now.",
            transfers.clone(),
        );
        let transfers_too_slow = Family::<DirectionLabel, Counter>::default();
        r.register(
            "leasehold_transfers_too_slow",
            "Artifact transfers closed for moving fewer than LEASEHOLD_TRANSFER_MIN_BYTES in a window, by direction (upload, download).",
            transfers_too_slow.clone(),
        );
        let transfers_refused = Family::<BoundLabel, Counter>::default();
        r.register(
            "leasehold_transfers_refused",
            "Artifact transfers refused with 429 at a cap, by the cap (runner: LEASEHOLD_MAX_TRANSFERS_PER_RUNNER, replica: LEASEHOLD_MAX_TRANSFERS).",
            transfers_refused.clone(),
        );
        r.register(
            "leasehold_db_errors",
            "Database statement errors by SQLSTATE, process-wide.",
            DB_ERRORS.clone(),
        );
        Self {
            registry: r,
            requests,
            lease_wait,
            wake_latency,
            lease_stages,
            leases,
            redeliveries,
            done_reports,
            stale_reports,
            sweep_batches,
            sweep_duration,
            notifications_heard,
            wakes,
            ticks,
            ticks_failed,
            caller_gone,
            rechecks,
            long_polls,
            horizon_age,
            claims_from_places,
            background_failures,
            jobs,
            transfers,
            transfers_too_slow,
            transfers_refused,
        }
    }

    /// Count a failure of background work `task`.
    pub fn background_failure(&self, task: &'static str) {
        self.background_failures
            .get_or_create(&TaskLabel { task })
            .inc();
    }

    /// The counter of background failures of `task`, for work that runs before the hub exists.
    pub fn background_failure_counter(&self, task: &'static str) -> Counter {
        self.background_failures
            .get_or_create(&TaskLabel { task })
            .clone()
    }

    /// Count one sweeper statement of `sweep`.
    pub fn sweep_batch(&self, sweep: &'static str) {
        self.sweep_batches
            .get_or_create(&SweepLabel { sweep })
            .inc();
    }

    /// Record one request.
    pub fn request(&self, labels: &RequestLabels, took: Duration) {
        self.requests
            .get_or_create(labels)
            .observe(took.as_secs_f64());
    }

    /// A lease long-poll is parked until the guard drops.
    pub fn long_poll(&self) -> LongPoll<'_> {
        self.long_polls.inc();
        LongPoll(&self.long_polls)
    }

    /// The whole exposition: this registry plus what `now` read from the replica.
    pub fn encode(&self, now: &Snapshot) -> String {
        let mut live = Registry::default();
        let gauge = |v: u64| ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
        live.register(
            "leasehold_waiters",
            "Long-polls and job waits parked on this replica.",
            gauge(now.waiters),
        );
        live.register(
            "leasehold_listening",
            "1 while the LISTEN connection is up.",
            gauge(u64::from(now.listening)),
        );
        live.register(
            "leasehold_pool_connections",
            "Connections open in the pool.",
            gauge(now.pool_size),
        );
        live.register(
            "leasehold_pool_idle_connections",
            "Idle connections in the pool.",
            gauge(now.pool_idle),
        );
        live.register(
            "leasehold_pool_connections_in_use",
            "Pool connections lent out now.",
            gauge(now.pool_size.saturating_sub(now.pool_idle)),
        );
        live.register(
            "leasehold_pool_waiting",
            "Requests waiting for a pool connection now.",
            gauge(now.pool_waiting),
        );
        live.register(
            "leasehold_db_statements",
            "Statements sent through the pool (BEGIN and COMMIT included).",
            ConstCounter::new(now.db_statements),
        );
        live.register(
            "leasehold_notifications_sent",
            "Notifications sent.",
            ConstCounter::new(now.notifications_sent),
        );
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut out, &live);
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_eof(&mut out);
        out
    }
}

/// Holds the long-poll gauge up while a lease call waits.
pub struct LongPoll<'a>(&'a Gauge);

impl Drop for LongPoll<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Seconds since a UUIDv7 was minted (its millisecond timestamp), or `None` for other ids.
pub fn age_of_v7(id: &uuid::Uuid) -> Option<f64> {
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    let minted = Duration::new(secs, nanos);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(now.saturating_sub(minted).as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the instrumentation of one job costs (dispatch, lease and complete requests, their
    /// statements): run with `cargo test --lib instrumentation_cost -- --ignored --nocapture`.
    /// Prints numbers for docs/perf.md; asserts nothing about time.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn instrumentation_cost() {
        let m = Metrics::new();
        let id = uuid::Uuid::now_v7();
        let n = 200_000u32;
        let routes = [
            "/v1/jobs",
            "/v1/runner/lease",
            "/v1/runner/jobs/{id}/complete",
        ];
        let started = std::time::Instant::now();
        for i in 0..n {
            for route in routes {
                // What the request layer does: label from the matched template, one observation.
                let labels = RequestLabels {
                    method: "POST",
                    route: route.to_owned(),
                    status: 200,
                };
                m.request(&labels, Duration::from_micros(u64::from(i % 5000)));
            }
            // What the lease does per job.
            m.leases.inc();
            if let Some(age) = age_of_v7(&id) {
                m.lease_wait.observe(age);
            }
            m.wake_latency.observe(0.001);
            let _open = m.long_poll();
            // Six statements with traces off.
            for _ in 0..6 {
                std::hint::black_box(crate::telemetry::traces::enabled());
            }
        }
        let per_job = started.elapsed() / n;
        println!("instrumentation per job (3 requests, 1 lease, 6 statements): {per_job:?}");
    }
}
