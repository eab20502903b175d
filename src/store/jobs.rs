//! Jobs: parking (one, a caller's batch, or concurrent callers' dispatches coalesced), reading,
//! cancelling, and the runner's fenced transitions (heartbeat, events, complete, fail, release).
//!
//! Invariants: every statement here authenticates its caller itself (the API key or runner
//! token hash is a parameter), so a revoked credential can change nothing from the moment its
//! revocation commits; a fenced transition matches only the live runner holding the lease at
//! that epoch, and when it matches nothing the store says why as a typed [`FenceMiss`].

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::combine::Combiner;
use super::{rows, sql, Result, Store};
use crate::domain::state::JobState;
use crate::store::records::{ApiKey, Dispatched, Event, Job, NewJob};
use crate::telemetry::traces;

/// Most dispatches or reports one coalesced statement carries, and how many such statements
/// may run at once per replica (the rest queue and go in the next one).
const COMBINE_BATCH: usize = 256;
const COMBINE_IN_FLIGHT: usize = 2;

/// A runner's terminal report of success.
#[derive(Debug, Clone)]
pub struct Report {
    pub id: Uuid,
    pub epoch: i64,
    /// SHA-256 of the reporting runner's token.
    pub token_hash: Vec<u8>,
    pub result: Value,
}

/// A runner's report that it could not run a job (`fail`).
#[derive(Debug, Clone)]
pub struct Failure {
    pub id: Uuid,
    pub epoch: i64,
    /// SHA-256 of the reporting runner's token.
    pub token_hash: Vec<u8>,
    pub message: String,
}

impl Failure {
    /// `job_fail.sql`'s arrays: ids, epochs, token hashes, messages, in step.
    #[allow(clippy::type_complexity)]
    pub fn arrays(fails: &[Failure]) -> (Vec<Uuid>, Vec<i64>, Vec<&[u8]>, Vec<&str>) {
        (
            fails.iter().map(|f| f.id).collect(),
            fails.iter().map(|f| f.epoch).collect(),
            fails.iter().map(|f| f.token_hash.as_slice()).collect(),
            fails.iter().map(|f| f.message.as_str()).collect(),
        )
    }
}

/// A runner's heartbeat on a job it holds, extending the lease by `ttl_ms`.
#[derive(Debug, Clone)]
pub struct Beat {
    pub id: Uuid,
    pub epoch: i64,
    pub token_hash: Vec<u8>,
    pub ttl_ms: i64,
}

/// What `GET /v1/jobs` filters on: a state and an outcome (`job_outcome()` in SQL), each
/// `None` for any, and a search (`q`).
#[derive(Debug, Clone, Copy, Default)]
pub struct JobFilter<'a> {
    pub state: Option<&'a str>,
    pub outcome: Option<&'a str>,
    /// Text a `command` job's argv (joined with spaces) holds in any case.
    pub search: Option<&'a str>,
    /// With `search`: its hex digits (lower case, 4..32) when it can be an id or a start or
    /// end of one; a job whose id starts or ends with them matches too.
    pub id_digits: Option<&'a str>,
}

/// Why a fenced runner call matched no row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMiss {
    /// The runner token is not live (401).
    Unauthorized,
    /// Unknown, or not visible to this runner (404).
    NotFound,
    /// The job has settled; it carries the terminal state (409 `job_terminal`).
    Terminal(JobState),
    /// Live, but not held by this runner at that epoch (409 `lease_superseded`).
    Superseded,
}

/// The answer of a fenced call: what it did, or why it matched nothing.
pub type Fenced<T> = std::result::Result<T, FenceMiss>;

impl Store {
    /// A store for a combiner's own task: the same pool and counters, no combiners of its own.
    fn for_combiner(&self) -> Store {
        Store {
            parker: std::sync::Arc::new(OnceLock::new()),
            reporter: std::sync::Arc::new(OnceLock::new()),
            failer: std::sync::Arc::new(OnceLock::new()),
            beater: std::sync::Arc::new(OnceLock::new()),
            ..self.clone()
        }
    }

    /// Park jobs in one transaction: one statement per API key (and one more per key for jobs
    /// with an idempotency key). Answers in the items' order: `None` for an item when the key
    /// is not live or the item's idempotency key was used before (read the first job).
    ///
    /// # Errors
    /// The database failed; nothing was parked.
    pub async fn insert_jobs(&self, jobs: &[NewJob]) -> Result<Vec<Option<Dispatched>>> {
        traces::statement(|| "job_insert", self.write_jobs(jobs)).await
    }

    /// [`Self::insert_jobs`] without a span (a combiner's batch; each caller holds one).
    async fn write_jobs(&self, jobs: &[NewJob]) -> Result<Vec<Option<Dispatched>>> {
        // One statement per API key and kind (only a keyed job pays for ON CONFLICT's
        // speculative insertion: job_insert.sql says why), in the order each first appears.
        let mut groups: Vec<(&'static str, &[u8], Vec<Value>)> = Vec::new();
        for job in jobs {
            let statement = if job.idempotency_key.is_some() {
                sql::JOB_INSERT_IDEMPOTENT
            } else {
                sql::JOB_INSERT
            };
            let item = serde_json::to_value(job)
                .map_err(|e| super::StoreError::Invalid(format!("a job to park: {e}")))?;
            match groups
                .iter_mut()
                .find(|(s, key, _)| std::ptr::eq(*s, statement) && *key == job.key_hash)
            {
                Some((_, _, items)) => items.push(item),
                None => groups.push((statement, &job.key_hash, vec![item])),
            }
        }
        let (heads, arrays): (Vec<(&'static str, &[u8])>, Vec<Value>) = groups
            .into_iter()
            .map(|(statement, key, items)| ((statement, key), Value::Array(items)))
            .unzip();
        let presence = &self.presence_window_ms;
        let params: Vec<(&'static str, [&(dyn ToSql + Sync); 3])> = heads
            .iter()
            .zip(&arrays)
            .map(|((statement, key), items)| {
                (*statement, [key as &(dyn ToSql + Sync), items, presence])
            })
            .collect();
        let mut parked: HashMap<Uuid, Dispatched> = HashMap::with_capacity(jobs.len());
        for row in self
            .each_in_one_transaction(&params)
            .await?
            .iter()
            .flatten()
        {
            let job = rows::job(row)?;
            let waiting = row.get("waiting");
            parked.insert(job.id, Dispatched { job, waiting });
        }
        Ok(jobs.iter().map(|j| parked.remove(&j.id)).collect())
    }

    /// Park one job, coalesced with other callers' concurrent dispatches.
    pub async fn park(&self, job: NewJob) -> Result<Option<Dispatched>> {
        let parker = self.parker.get_or_init(|| {
            let store = self.for_combiner();
            Combiner::start(
                COMBINE_BATCH,
                COMBINE_IN_FLIGHT,
                move |jobs: Vec<NewJob>| {
                    let store = store.clone();
                    async move { store.write_jobs(&jobs).await }
                },
            )
        });
        // The statement's span belongs to this request (it covers the wait for the shared
        // statement too); the combiner's own task adds none.
        traces::statement(|| "job_insert", parker.submit(job)).await
    }

    pub async fn job_by_idempotency_key(&self, workspace: &str, key: &str) -> Result<Option<Job>> {
        self.query_opt(sql::JOB_BY_IDEMPOTENCY_KEY, &[&workspace, &key])
            .await?
            .as_ref()
            .map(rows::job)
            .transpose()
    }

    pub async fn job(&self, id: Uuid, workspace: &str) -> Result<Option<Job>> {
        self.query_opt(sql::JOB_GET, &[&id, &workspace])
            .await?
            .as_ref()
            .map(rows::job)
            .transpose()
    }

    /// A page of a workspace's jobs after `after` (exclusive), ascending or descending by id:
    /// at most `limit` jobs, and it ends before the first job that would start past `budget`
    /// bytes of payload, result and error (as JSON text) counted over the jobs before it, so
    /// it always holds one job when there is one. The database sizes the candidates and sends
    /// only the page. Returns the jobs, and whether the budget ended the page before `limit`.
    pub async fn jobs(
        &self,
        workspace: &str,
        filter: JobFilter<'_>,
        after: Option<Uuid>,
        limit: i64,
        descending: bool,
        budget: usize,
    ) -> Result<(Vec<Job>, bool)> {
        let statement = if descending {
            sql::JOBS_LIST_DESC
        } else {
            sql::JOBS_LIST
        };
        let budget = budget as i64;
        let JobFilter {
            state,
            outcome,
            search,
            id_digits,
        } = filter;
        let rows = self
            .query(
                statement,
                &[
                    &workspace, &state, &after, &limit, &budget, &outcome, &search, &id_digits,
                ],
            )
            .await?;
        let scanned: i64 = rows.first().map_or(0, |r| r.get("scanned"));
        Ok((rows::jobs(&rows)?, scanned > rows.len() as i64))
    }

    /// Cancel a live job. `None` when it is unknown or already terminal.
    pub async fn cancel_job(&self, id: Uuid, workspace: &str, by: &str) -> Result<Option<Job>> {
        self.query_opt(sql::JOB_CANCEL, &[&id, &workspace, &by])
            .await?
            .as_ref()
            .map(rows::job)
            .transpose()
    }

    /// Park a settled or leased job again (`job_retry.sql`), recording `key` (the call's
    /// Idempotency-Key). `None` when it is unknown in this workspace or parked already.
    pub async fn retry_job(&self, id: Uuid, by: &ApiKey, key: Option<&str>) -> Result<Option<Job>> {
        let role = if by.admin { "admin" } else { "member" };
        self.query_opt(
            sql::JOB_RETRY,
            &[&by.workspace, &id, &key, &by.subject, &role],
        )
        .await?
        .as_ref()
        .map(rows::job)
        .transpose()
    }

    /// The job a retry call with Idempotency-Key `key` already retried, as it is now.
    pub async fn job_retried_with_key(
        &self,
        id: Uuid,
        key: &str,
        workspace: &str,
    ) -> Result<Option<Job>> {
        self.query_opt(sql::JOB_RETRY_BY_KEY, &[&id, &key, &workspace])
            .await?
            .as_ref()
            .map(rows::job)
            .transpose()
    }

    /// Why a fenced call with this token matched nothing.
    pub async fn fence_miss(&self, id: Uuid, token_hash: &[u8]) -> Result<FenceMiss> {
        let Some(row) = self
            .query_opt(sql::JOB_FENCE_MISS, &[&id, &token_hash])
            .await?
        else {
            return Ok(FenceMiss::Unauthorized);
        };
        Ok(match row.get::<_, Option<&str>>("state") {
            None => FenceMiss::NotFound,
            Some(_) => match rows::state(&row, "state")? {
                s if s.is_terminal() => FenceMiss::Terminal(s),
                _ => FenceMiss::Superseded,
            },
        })
    }

    /// The row a fenced statement returned, or why it returned none.
    pub(super) async fn fenced<T>(
        &self,
        id: Uuid,
        token_hash: &[u8],
        done: Option<T>,
    ) -> Result<Fenced<T>> {
        match done {
            Some(t) => Ok(Ok(t)),
            None => Ok(Err(self.fence_miss(id, token_hash).await?)),
        }
    }

    /// Extend a lease, coalesced with other runners' concurrent heartbeats; the new expiry.
    pub async fn heartbeat_job(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
        ttl_ms: i64,
    ) -> Result<Fenced<chrono::DateTime<chrono::Utc>>> {
        let beater = self.beater.get_or_init(|| {
            let store = self.for_combiner();
            Combiner::start(COMBINE_BATCH, COMBINE_IN_FLIGHT, move |beats: Vec<Beat>| {
                let store = store.clone();
                async move { store.write_beats(&beats).await }
            })
        });
        let beat = Beat {
            id,
            epoch,
            token_hash: token_hash.to_vec(),
            ttl_ms,
        };
        let done = traces::statement(|| "job_heartbeat", beater.submit(beat)).await?;
        self.fenced(id, token_hash, done).await
    }

    /// Heartbeats in one statement, each matched alone; for each, in order, the new expiry or
    /// `None` (fence missed).
    ///
    /// # Errors
    /// The database failed; no lease was extended.
    pub async fn extend_leases(
        &self,
        beats: &[Beat],
    ) -> Result<Vec<Option<chrono::DateTime<chrono::Utc>>>> {
        traces::statement(|| "job_heartbeat", self.write_beats(beats)).await
    }

    /// [`Self::extend_leases`] without a span (a combiner's batch; each caller holds one).
    async fn write_beats(
        &self,
        beats: &[Beat],
    ) -> Result<Vec<Option<chrono::DateTime<chrono::Utc>>>> {
        let ids: Vec<Uuid> = beats.iter().map(|b| b.id).collect();
        let epochs: Vec<i64> = beats.iter().map(|b| b.epoch).collect();
        let tokens: Vec<&[u8]> = beats.iter().map(|b| b.token_hash.as_slice()).collect();
        let ttl_ms = beats.first().map_or(0, |b| b.ttl_ms);
        let rows = self
            .query_untraced(
                sql::JOB_HEARTBEAT,
                &[&ids, &epochs, &tokens, &ttl_ms, &self.seen_refresh_ms],
            )
            .await?;
        rows::by_ord(beats.len(), &rows, |r| Ok(r.get("lease_expires_at")))
    }

    /// Settle reports in one statement, each matched alone; for each, in order, the completed
    /// job or `None` (fence missed).
    ///
    /// # Errors
    /// The database failed; nothing was settled.
    pub async fn complete_jobs(&self, reports: &[Report]) -> Result<Vec<Option<Job>>> {
        traces::statement(|| "job_complete", self.write_reports(reports)).await
    }

    /// [`Self::complete_jobs`] without a span (a combiner's batch; each caller holds one).
    async fn write_reports(&self, reports: &[Report]) -> Result<Vec<Option<Job>>> {
        let ids: Vec<Uuid> = reports.iter().map(|r| r.id).collect();
        let epochs: Vec<i64> = reports.iter().map(|r| r.epoch).collect();
        let tokens: Vec<&[u8]> = reports.iter().map(|r| r.token_hash.as_slice()).collect();
        let results: Vec<&Value> = reports.iter().map(|r| &r.result).collect();
        let rows = self
            .query_untraced(
                sql::JOB_COMPLETE,
                &[&ids, &epochs, &tokens, &results, &self.seen_refresh_ms],
            )
            .await?;
        rows::by_ord(reports.len(), &rows, rows::job)
    }

    /// First terminal report wins: complete a job, coalesced with other runners' concurrent
    /// reports.
    pub async fn complete_job(&self, report: Report) -> Result<Fenced<Job>> {
        let reporter = self.reporter.get_or_init(|| {
            let store = self.for_combiner();
            Combiner::start(
                COMBINE_BATCH,
                COMBINE_IN_FLIGHT,
                move |reports: Vec<Report>| {
                    let store = store.clone();
                    async move { store.write_reports(&reports).await }
                },
            )
        });
        let (id, token_hash) = (report.id, report.token_hash.clone());
        let done = traces::statement(|| "job_complete", reporter.submit(report)).await?;
        self.fenced(id, &token_hash, done).await
    }

    /// A runner could not run a job: fail it (or park it again, by its retry policy), coalesced
    /// with other runners' concurrent fails.
    pub async fn fail_job(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
        message: &str,
    ) -> Result<Fenced<Job>> {
        let failer = self.failer.get_or_init(|| {
            let store = self.for_combiner();
            Combiner::start(
                COMBINE_BATCH,
                COMBINE_IN_FLIGHT,
                move |fails: Vec<Failure>| {
                    let store = store.clone();
                    async move { store.write_fails(&fails).await }
                },
            )
        });
        let failure = Failure {
            id,
            epoch,
            token_hash: token_hash.to_vec(),
            message: message.to_owned(),
        };
        let done = traces::statement(|| "job_fail", failer.submit(failure)).await?;
        self.fenced(id, token_hash, done).await
    }

    /// Fails in one statement, each matched alone; for each, in order, the job it failed (or
    /// parked again) or `None` (fence missed).
    ///
    /// # Errors
    /// The database failed; nothing was failed.
    pub async fn fail_jobs(&self, fails: &[Failure]) -> Result<Vec<Option<Job>>> {
        traces::statement(|| "job_fail", self.write_fails(fails)).await
    }

    /// [`Self::fail_jobs`] without a span (a combiner's batch; each caller holds one).
    async fn write_fails(&self, fails: &[Failure]) -> Result<Vec<Option<Job>>> {
        let (ids, epochs, tokens, messages) = Failure::arrays(fails);
        let rows = self
            .query_untraced(
                sql::JOB_FAIL,
                &[&ids, &epochs, &tokens, &messages, &self.seen_refresh_ms],
            )
            .await?;
        rows::by_ord(fails.len(), &rows, rows::job)
    }

    pub async fn release_job(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
    ) -> Result<Fenced<Job>> {
        let row = self
            .query_opt(
                sql::JOB_RELEASE,
                &[&id, &epoch, &token_hash, &self.seen_refresh_ms],
            )
            .await?;
        let job = row.as_ref().map(rows::job).transpose()?;
        self.fenced(id, token_hash, job).await
    }

    /// Append runner events, fenced. The seq of the last one appended.
    pub async fn append_events(
        &self,
        id: Uuid,
        epoch: i64,
        token_hash: &[u8],
        kinds: &[String],
        data: &[Value],
    ) -> Result<Fenced<i32>> {
        let row = self
            .query_opt(
                sql::JOB_EVENTS_APPEND,
                &[
                    &id,
                    &epoch,
                    &token_hash,
                    &kinds,
                    &data,
                    &self.seen_refresh_ms,
                ],
            )
            .await?;
        self.fenced(id, token_hash, row.map(|r| r.get(0))).await
    }

    /// A page of a job's events after `after`: at most `limit`, ending before the first event
    /// that would start past `budget` bytes of data (see `job_events_list.sql`).
    pub async fn events(
        &self,
        id: Uuid,
        after: i32,
        limit: i64,
        budget: usize,
    ) -> Result<Vec<Event>> {
        let rows = self
            .query(
                sql::JOB_EVENTS_LIST,
                &[&id, &after, &limit, &(budget as i64)],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| Event {
                seq: r.get("seq"),
                at: r.get("at"),
                kind: r.get("kind"),
                data: r.get("data"),
            })
            .collect())
    }
}
