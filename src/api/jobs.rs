//! Dispatcher calls (API key): dispatch, read, wait, list, cancel, events. Every member of a
//! workspace sees all of that workspace's jobs; another workspace's job is 404.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use uuid::Uuid;

use super::auth::{ApiKeyHash, Operator};
use super::deadline::LongPoll;
use super::error::{ApiError, ApiResult};
use super::extract::{Body, PathId, QueryMap};
use super::operators::resolve_target;
use super::validate;
use super::views;
use super::AppState;
use crate::domain::state::{JobState, Outcome};
use crate::domain::{capabilities, owner};
use crate::store::records::{ApiKey, Job, Runner};
use crate::store::JobFilter;
use crate::store::{Dispatched, NewJob, SecretScope};
use crate::wire;

/// The byte budget of a page of `GET /v1/jobs` (payload, result and error as JSON text) and of
/// `GET /v1/jobs/{id}/events` (data): a page ends before the first item that would start past
/// it (with `next` set), so the memory one list call takes is bounded whatever its `limit`
/// and however large the items (issue 18, row 7).
pub const LIST_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// The most characters of `GET /v1/jobs?q=`: longer than any command a person would type to
/// find a job, short enough that a search costs no more than reading the page it walks.
pub const MAX_SEARCH_CHARS: usize = 200;

fn wait_duration(st: &AppState, query: &QueryMap, default_ms: i64) -> ApiResult<Duration> {
    let ms = query.int("wait_ms", 0, 60_000)?.unwrap_or(default_ms);
    Ok(Duration::from_millis(
        (ms as u64).min(st.limits.max_wait_ms),
    ))
}

/// A dispatch body that passed validation, before its target is resolved: the job to park but
/// for what the target, the caller and the secrets it names decide ([`new_job`]).
struct Checked {
    target: wire::Target,
    /// The source as validated (its `credential_secret` is a secret the job needs).
    source: Option<wire::Source>,
    job: NewJob,
}

/// Validate a dispatch body; `at` prefixes field names (`jobs[3].` in a batch).
fn check(st: &AppState, req: wire::Dispatch, at: &str) -> ApiResult<Checked> {
    let field = |name: &str| format!("{at}{name}");
    let payload = req
        .payload
        .ok_or_else(|| ApiError::bad(format!("{}: required", field("payload"))))?;
    validate::no_nul(&field("payload"), &payload)?;
    let kind = validate::job_kind(req.kind.as_deref()).map_err(|e| prefixed(e, at))?;
    if kind == "command" {
        empty_command(&payload).map_err(|e| prefixed(e, at))?;
    }
    let required = st
        .vocabulary
        .required(req.required_capabilities.as_deref().unwrap_or(&[]))
        .map_err(|bad| {
            ApiError::bad(format!(
                "{}: '{bad}' is not a known capability name",
                field("required_capabilities")
            ))
        })?;
    let priority = validate::range(&field("priority"), req.priority, -1000, 1000, 0)? as i32;
    let max_attempts = validate::range(&field("max_attempts"), req.max_attempts, 1, 100, 3)? as i32;
    let no_runner_timeout_ms = validate::range(
        &field("no_runner_timeout_ms"),
        req.no_runner_timeout_ms,
        1000,
        86_400_000,
        st.limits.no_runner_timeout_ms as i64,
    )?;
    let queue_timeout_ms = validate::opt_range(
        &field("queue_timeout_ms"),
        req.queue_timeout_ms,
        1000,
        604_800_000,
    )?;
    let secrets = validate::secret_names(&field("secrets"), req.secrets.unwrap_or_default())?;
    let (source, source_key) = match req.source {
        None => (None, None),
        Some(s) => {
            let (source, key) = validate::source(&field("source"), s)?;
            (Some(source), Some(key))
        }
    };
    let retry = match req.retry {
        None => None,
        Some(r) => validate::retry(&field("retry"), r)?,
    };
    Ok(Checked {
        target: req.target,
        job: NewJob {
            kind,
            payload,
            required_capabilities: required,
            priority,
            max_attempts,
            no_runner_timeout_ms,
            queue_timeout_ms,
            secrets,
            // A struct of strings: serialising it cannot fail.
            source: source.as_ref().and_then(|s| serde_json::to_value(s).ok()),
            source_key,
            // A struct of numbers and strings: serialising it cannot fail.
            retry: retry.and_then(|r| serde_json::to_value(r).ok()),
            ..NewJob::default()
        },
        source,
    })
}

/// A job as the API answers it: the record shaped for the wire. Beside [`check`], so the API's
/// two ends of a job field (what a dispatch may set, what a reader sees) are one file.
pub(super) fn view(j: Job) -> wire::Job {
    let outcome = crate::domain::state::outcome(j.state, j.result.as_ref()).map(views::outcome);
    wire::Job {
        id: j.id,
        workspace: j.workspace,
        owner: j.owner,
        runner_id: j
            .runner_id
            .map_or_else(|| "*".to_owned(), |id| id.to_string()),
        state: views::job_state(j.state),
        kind: j.kind,
        payload: j.payload,
        required_capabilities: j.required_capabilities,
        priority: j.priority,
        epoch: j.epoch,
        attempts: j.attempts,
        max_attempts: j.max_attempts,
        created_at: j.created_at,
        leased_at: j.leased_at,
        finished_at: j.finished_at,
        result: j.result,
        error: j.error,
        provenance: j.provenance,
        billing_tenant: j.billing_tenant,
        pool: j.pool,
        secrets: j.secrets,
        source: j.source.and_then(views::source),
        retries: j.retries,
        retry: j.retry.and_then(retry_policy),
        outcome,
        not_before: j.not_before,
        dispatched_by: j.dispatcher_subject.map(|subject| wire::DispatchedBy {
            subject,
            role: j.dispatcher_role.unwrap_or_else(|| "member".to_owned()),
        }),
        waiting: None,
    }
}

/// [`view`] of one job with why it waits, if it is parked (v1.4 "Why a job waits").
async fn view_waiting(st: &AppState, j: Job) -> ApiResult<wire::Job> {
    let waiting = if j.state == JobState::Parked {
        st.hub.job_waiting(j.id, &j.workspace).await?
    } else {
        None
    };
    Ok(wire::Job { waiting, ..view(j) })
}

/// [`view`] of a job its dispatch just parked, with why it waits as the insert judged it.
fn dispatched(d: Dispatched) -> wire::Job {
    wire::Job {
        waiting: d.waiting,
        ..view(d.job)
    }
}

/// A stored retry policy (validated and normalised at dispatch); `None`, and an error logged,
/// if it does not read back (a bug).
fn retry_policy(stored: serde_json::Value) -> Option<wire::RetryPolicy> {
    serde_json::from_value(stored)
        .map_err(|e| tracing::error!(error = %e, "a stored retry policy does not read back"))
        .ok()
}

/// A `command` job with nothing to run (`argv` empty, or its program an empty or blank
/// string) is refused at dispatch rather than failed by a runner later; any other payload
/// shape is the runner's to judge (it fails the job saying why).
fn empty_command(payload: &serde_json::Value) -> ApiResult<()> {
    match payload.get("argv").and_then(serde_json::Value::as_array) {
        Some(argv) if argv.is_empty() => Err(ApiError::bad(
            "payload.argv: empty; name the program to run first",
        )),
        Some(argv) if argv[0].as_str().is_some_and(|p| p.trim().is_empty()) => Err(ApiError::bad(
            "payload.argv[0]: the program is empty; name the program to run",
        )),
        _ => Ok(()),
    }
}

/// A validation error of a batch item, its field names prefixed.
fn prefixed(e: ApiError, at: &str) -> ApiError {
    match e {
        ApiError::BadRequest(m) if !at.is_empty() => ApiError::BadRequest(format!("{at}{m}")),
        other => other,
    }
}

/// The job to park for a checked body. A named runner must already be resolved (`runner`);
/// `needs_workspace_runner` when it names a `workspace` secret ([`secret_scope`]).
fn new_job(
    key_hash: &[u8],
    c: Checked,
    runner: Option<&Runner>,
    idempotency_key: Option<String>,
    needs_workspace_runner: bool,
) -> NewJob {
    let pool = match &c.target {
        wire::Target::Pool { pool } => Some(pool.as_str()),
        wire::Target::Runner { .. } => None,
    };
    NewJob {
        id: Uuid::now_v7(),
        key_hash: key_hash.to_vec(),
        pool,
        runner_id: runner.map(|r| r.id),
        owner: runner.map(|r| r.owner.clone()),
        idempotency_key,
        traceparent: crate::telemetry::traces::current_traceparent(),
        needs_workspace_runner,
        ..c.job
    }
}

/// A named runner's 422: it cannot run a job with these requirements (a capability it lacks,
/// an exclusive name the job does not require, no approved target for the job's source): the
/// claim's rule ([`capabilities::unfit`]). A `workspace` secret for a personal runner is
/// [`secret_scope`]'s 400, not this.
fn named_mismatch(r: &crate::store::records::Runner, c: &Checked) -> ApiResult<()> {
    let sources: Vec<String> = r
        .repo_targets
        .iter()
        .filter(|t| t.status == "approved")
        .map(|t| format!("{} {}", t.provider, t.repository))
        .collect();
    let job = capabilities::JobNeeds {
        required: &c.job.required_capabilities,
        source_key: c.job.source_key.as_deref(),
        needs_workspace_runner: false,
    };
    let runner = capabilities::RunnerOffers {
        capabilities: &r.capabilities,
        exclusive: &r.exclusive,
        sources: &sources,
        workspace_runner: true,
    };
    let message = match capabilities::unfit(&job, &runner) {
        None => return Ok(()),
        Some(capabilities::Unfit::Missing(missing)) => format!(
            "runner {} does not advertise required capability '{missing}'",
            r.id
        ),
        Some(capabilities::Unfit::Exclusive(canary)) => format!(
            "runner {} takes only jobs that require its exclusive capability '{canary}'",
            r.id
        ),
        Some(capabilities::Unfit::Source) => format!(
            "runner {} holds no approved repository target for this job's source",
            r.id
        ),
        Some(capabilities::Unfit::WorkspaceRunner) => format!(
            "runner {} is a personal runner and the job needs a workspace runner",
            r.id
        ),
    };
    Err(ApiError::CapabilityMismatch(message))
}

/// The secret a checked job's source names as its credential.
fn credential_secret(c: &Checked) -> Option<&str> {
    c.source.as_ref()?.credential_secret.as_deref()
}

/// The secret names a checked job needs to exist: those it names, and its source's credential.
fn needed_secrets(c: &Checked) -> Vec<String> {
    let mut names = c.job.secrets.clone();
    names.extend(credential_secret(c).map(str::to_owned));
    names
}

/// 400 naming the field when a secret the job needs does not exist in the workspace
/// (`existing` holds those that do); `at` prefixes the field (`jobs[3].`).
fn require_secrets(c: &Checked, existing: &[SecretScope], at: &str) -> ApiResult<()> {
    let exists = |n: &str| existing.iter().any(|e| e.name == n);
    if let Some(missing) = c.job.secrets.iter().find(|n| !exists(n)) {
        return Err(ApiError::bad(format!(
            "{at}secrets: '{missing}' is not a secret of this workspace"
        )));
    }
    if let Some(cred) = credential_secret(c).filter(|n| !exists(n)) {
        return Err(ApiError::bad(format!(
            "{at}source.credential_secret: '{cred}' is not a secret of this workspace"
        )));
    }
    Ok(())
}

/// The scope of the (existing) secrets a checked job names, for this caller and target
/// (docs/contract-notes.md, "Secret scope"): 403 when a member names an `admin` secret; 400
/// naming `secrets` (`at` prefixes it) when a `workspace` secret would go to the personal pool
/// or a named personal runner. `Ok(true)`: it names a `workspace` secret, so only a workspace
/// runner may take it (personal runners skip such an `any` job).
fn secret_scope(
    c: &Checked,
    existing: &[SecretScope],
    caller: &ApiKey,
    runner: Option<&Runner>,
    at: &str,
) -> ApiResult<bool> {
    let needed = needed_secrets(c);
    let named: Vec<&SecretScope> = existing
        .iter()
        .filter(|s| needed.contains(&s.name))
        .collect();
    if !caller.admin && named.iter().any(|s| s.admin_dispatch_only) {
        return Err(ApiError::Forbidden);
    }
    let personal = match (&c.target, runner) {
        (_, Some(r)) => owner::billing_tenant(&r.owner).is_none(),
        (wire::Target::Pool { pool }, None) => *pool == wire::PoolName::Personal,
        (wire::Target::Runner { .. }, None) => false,
    };
    let Some(kept) = named.iter().find(|s| s.workspace_runners_only) else {
        return Ok(false);
    };
    if personal {
        let how = if c.job.secrets.contains(&kept.name) {
            String::new()
        } else {
            " (as source.credential_secret)".to_owned()
        };
        return Err(ApiError::bad(format!(
            "{at}secrets: '{}'{how} is a workspace secret, never handed to a personal runner; \
             dispatch to the workspace or any pool, or have an admin set it with \
             \"runners\": \"any\"",
            kept.name
        )));
    }
    Ok(true)
}

fn idempotency_header(headers: &HeaderMap) -> ApiResult<Option<String>> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => {
            let k = v
                .to_str()
                .map_err(|_| ApiError::bad("Idempotency-Key: must be visible ASCII"))?;
            validate::text("Idempotency-Key", k, 255)?;
            Ok(Some(k.to_owned()))
        }
    }
}

/// `POST /v1/jobs`. The common case (a pool target, no idempotency key) is one statement: the
/// insert authenticates the key itself and is coalesced with other callers' dispatches. A
/// named target or an idempotency key authenticates first (the target is resolved and the key
/// looked up for the caller).
pub async fn dispatch(
    State(st): State<Arc<AppState>>,
    key: ApiKeyHash,
    headers: HeaderMap,
    Body(req): Body<wire::Dispatch>,
) -> ApiResult<(StatusCode, Json<wire::Job>)> {
    // Validation first (a 4xx never uses an idempotency key up), but an unauthenticated caller
    // learns nothing from it: a bad body with a bad key is 401.
    let checked = match check(&st, req, "").and_then(|c| Ok((c, idempotency_header(&headers)?))) {
        Ok(c) => c,
        Err(e) => {
            key.check(&st).await?;
            return Err(e);
        }
    };
    let (checked, idempotency_key) = checked;
    let hub = &st.hub;
    let names = needed_secrets(&checked);
    if idempotency_key.is_none()
        && names.is_empty()
        && matches!(checked.target, wire::Target::Pool { .. })
    {
        return match st
            .hub
            .park(new_job(&key.hash, checked, None, None, false))
            .await?
        {
            Some(parked) => Ok((StatusCode::CREATED, Json(dispatched(parked)))),
            None => Err(st.auth_failed(key.ip)),
        };
    }
    let caller = key.check(&st).await?;
    if let Some(k) = &idempotency_key {
        if let Some(first) = hub.job_by_idempotency_key(&caller.workspace, k).await? {
            return Ok((StatusCode::OK, Json(view_waiting(&st, first).await?)));
        }
    }
    let runner = resolve_target(&st, &caller, &checked.target).await?;
    if let Some(r) = &runner {
        named_mismatch(r, &checked)?;
    }
    let mut needs_workspace_runner = false;
    if !names.is_empty() {
        let existing = hub.existing_secrets(&caller.workspace, &names).await?;
        require_secrets(&checked, &existing, "")?;
        needs_workspace_runner = secret_scope(&checked, &existing, &caller, runner.as_ref(), "")?;
    }
    let job = new_job(
        &key.hash,
        checked,
        runner.as_ref(),
        idempotency_key,
        needs_workspace_runner,
    );
    match st.hub.park(job.clone()).await? {
        Some(parked) => Ok((StatusCode::CREATED, Json(dispatched(parked)))),
        None => match &job.idempotency_key {
            // A concurrent dispatch with the same key won the insert.
            Some(k) => {
                let first = hub
                    .job_by_idempotency_key(&caller.workspace, k)
                    .await?
                    .ok_or(ApiError::Internal)?;
                Ok((StatusCode::OK, Json(view_waiting(&st, first).await?)))
            }
            // The key was revoked between the check and the insert.
            None => Err(st.auth_failed(key.ip)),
        },
    }
}

/// Batch body: items are kept as JSON until each is validated under its own index.
#[derive(serde::Deserialize)]
pub struct BatchBody {
    jobs: Vec<serde_json::Value>,
}

/// `POST /v1/jobs/batch` (v1.1): every item validated and every target resolved before
/// anything is written; then all parked in one statement, in request order.
pub async fn dispatch_batch(
    State(st): State<Arc<AppState>>,
    key: ApiKeyHash,
    Body(req): Body<BatchBody>,
) -> ApiResult<(StatusCode, Json<wire::Jobs>)> {
    let caller = key.check(&st).await?;
    if req.jobs.is_empty() || req.jobs.len() > 1000 {
        return Err(ApiError::bad("jobs: 1..1000 items"));
    }
    let mut checked = Vec::with_capacity(req.jobs.len());
    for (i, raw) in req.jobs.into_iter().enumerate() {
        let at = format!("jobs[{i}].");
        let item: wire::BatchItem = serde_path_to_error::deserialize(raw).map_err(|e| {
            let path = e.path().to_string();
            let what = e.into_inner().to_string();
            if path == "." || path.is_empty() {
                ApiError::bad(format!("jobs[{i}]: {what}"))
            } else {
                ApiError::bad(format!("{at}{path}: {what}"))
            }
        })?;
        if let Some(k) = &item.idempotency_key {
            validate::text(&format!("{at}idempotency_key"), k, 255)?;
        }
        checked.push((check(&st, item.dispatch, &at)?, item.idempotency_key));
    }
    // Targets next: an invisible named runner is 404, a mismatch 422, a secret that does not
    // exist 400; nothing is parked yet.
    let mut names: Vec<String> = checked
        .iter()
        .flat_map(|(c, _)| needed_secrets(c))
        .collect();
    names.sort();
    names.dedup();
    let existing = st.hub.existing_secrets(&caller.workspace, &names).await?;
    let mut jobs = Vec::with_capacity(checked.len());
    let mut resolved: std::collections::HashMap<Uuid, crate::store::records::Runner> =
        std::collections::HashMap::new();
    for (i, (c, idempotency_key)) in checked.into_iter().enumerate() {
        let runner = match &c.target {
            wire::Target::Runner { runner_id } => match resolved.get(runner_id) {
                Some(r) => Some(r.clone()),
                None => {
                    let r = resolve_target(&st, &caller, &c.target)
                        .await?
                        .ok_or(ApiError::NotFound)?;
                    resolved.insert(r.id, r.clone());
                    Some(r)
                }
            },
            wire::Target::Pool { .. } => None,
        };
        if let Some(r) = &runner {
            named_mismatch(r, &c)?;
        }
        let at = format!("jobs[{i}].");
        require_secrets(&c, &existing, &at)?;
        let needs_workspace_runner = secret_scope(&c, &existing, &caller, runner.as_ref(), &at)?;
        jobs.push(new_job(
            &key.hash,
            c,
            runner.as_ref(),
            idempotency_key,
            needs_workspace_runner,
        ));
    }
    let hub = &st.hub;
    let parked = st.hub.park_many(&jobs).await?;
    let mut out = Vec::with_capacity(jobs.len());
    for (job, parked) in jobs.iter().zip(parked) {
        match (parked, &job.idempotency_key) {
            (Some(p), _) => out.push(dispatched(p)),
            // Used before (earlier, or by an earlier item of this batch): the first job.
            (None, Some(k)) => {
                let first = hub
                    .job_by_idempotency_key(&caller.workspace, k)
                    .await?
                    .ok_or(ApiError::Internal)?;
                out.push(view(first));
            }
            // The key was revoked between the check and the insert: nothing was parked.
            (None, None) => return Err(st.auth_failed(key.ip)),
        }
    }
    Ok((StatusCode::CREATED, Json(wire::Jobs { jobs: out })))
}

pub async fn get(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
    poll: LongPoll,
    query: QueryMap,
) -> ApiResult<Json<wire::Job>> {
    let wait = wait_duration(&st, &query, 0)?;
    poll.allow(wait);
    let hub = &st.hub;
    let job = st
        .hub
        .wait_on_job(
            id,
            wait,
            &st.shutdown,
            || hub.job(id, &key.workspace),
            |j| j.as_ref().is_none_or(|j| j.state.is_terminal()),
        )
        .await?;
    match job {
        Some(j) => Ok(Json(view_waiting(&st, j).await?)),
        None => Err(ApiError::NotFound),
    }
}

pub async fn list(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    query: QueryMap,
) -> ApiResult<Json<wire::JobList>> {
    let state = match query.get("state") {
        None => None,
        Some(s) => Some(
            JobState::parse(s)
                .ok_or_else(|| ApiError::bad("state: must be one of parked, leased, completed, failed, cancelled, rejected"))?
                .as_str(),
        ),
    };
    let outcome = match query.get("outcome") {
        None => None,
        Some(o) => Some(
            Outcome::parse(o)
                .ok_or_else(|| {
                    ApiError::bad("outcome: must be one of succeeded, failed, cancelled, rejected")
                })?
                .as_str(),
        ),
    };
    let limit = query.int("limit", 1, 500)?.unwrap_or(100);
    let after = match query.get("after") {
        None => None,
        Some(a) => Some(Uuid::try_parse(a).map_err(|_| ApiError::bad("after: must be a job id"))?),
    };
    let descending = match query.get("order") {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(_) => return Err(ApiError::bad("order: must be asc or desc")),
    };
    // `q`, leasehold's own (docs/contract-notes.md, "Searching the job list").
    let search = query.get("q");
    validate::opt_text("q", search, MAX_SEARCH_CHARS)?;
    let id_digits = search.and_then(crate::wire::input::id_digits);
    let (jobs, cut) = st
        .hub
        .jobs(
            &key.workspace,
            JobFilter {
                state,
                outcome,
                search,
                id_digits: id_digits.as_deref(),
            },
            after,
            limit,
            descending,
            LIST_PAGE_BYTES,
        )
        .await?;
    // A page is full at `limit` jobs or at the byte budget (docs/contract-notes.md).
    let next = (cut || jobs.len() as i64 == limit)
        .then(|| jobs.last().map(|j| j.id))
        .flatten();
    Ok(Json(wire::JobList {
        jobs: jobs.into_iter().map(view).collect(),
        next,
    }))
}

pub async fn cancel(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
) -> ApiResult<Json<wire::Job>> {
    if let Some(job) = st.hub.cancel(id, &key.workspace, &key.subject).await? {
        return Ok(Json(view(job)));
    }
    // Unknown, or already terminal: a terminal job is returned unchanged.
    unchanged(&st, id, &key.workspace).await
}

/// The job as it is, for a call that changed nothing (cancel of a settled job, retry of a
/// parked one), or 404 when the workspace has no such job.
async fn unchanged(st: &AppState, id: Uuid, workspace: &str) -> ApiResult<Json<wire::Job>> {
    st.hub
        .job(id, workspace)
        .await?
        .map(|j| Json(view(j)))
        .ok_or(ApiError::NotFound)
}

/// Whether `caller` may re-run job `id` (v1.3, "Secrets at every hand-over"): a member may not
/// when the job names (in `secrets` or as its source's `credential_secret`) a secret that is now
/// `dispatch: admin`: 403, as its dispatch would be. An admin may re-run any job; an unknown job
/// is left to the retry itself (404). A secret deleted since is not checked here: the lease
/// rejects the job `secret_missing`, as it does a dispatched job whose secret was deleted.
async fn retry_allowed(st: &AppState, id: Uuid, caller: &ApiKey) -> ApiResult<()> {
    if caller.admin {
        return Ok(());
    }
    let Some(job) = st.hub.job(id, &caller.workspace).await? else {
        return Ok(());
    };
    let credential = job
        .source
        .as_ref()
        .and_then(|s| s.get("credential_secret"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let names: Vec<String> = job.secrets.into_iter().chain(credential).collect();
    if names.is_empty() {
        return Ok(());
    }
    let existing = st.hub.existing_secrets(&caller.workspace, &names).await?;
    if existing.iter().any(|s| s.admin_dispatch_only) {
        return Err(ApiError::Forbidden);
    }
    Ok(())
}

/// `POST /v1/jobs/{id}/retry` (v1.2): a settled job is parked again, a leased one superseded
/// (its runner's reports get 409, its next heartbeat lists it in `cancelled`); a parked job is
/// answered unchanged (docs/contract-notes.md, "Retries (v1.2)"). With an `Idempotency-Key`, a
/// repeat of a retry of this job answers the job as it is now and retries nothing.
pub async fn retry(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
    headers: HeaderMap,
) -> ApiResult<Json<wire::Job>> {
    let idempotency_key = idempotency_header(&headers)?;
    if let Some(k) = &idempotency_key {
        if let Some(job) = st.hub.job_retried_with_key(id, k, &key.workspace).await? {
            return Ok(Json(view(job)));
        }
    }
    retry_allowed(&st, id, &key).await?;
    if let Some(job) = st.hub.retry(id, &key, idempotency_key.as_deref()).await? {
        return Ok(Json(view(job)));
    }
    // Unknown (404), or parked already: answered unchanged.
    unchanged(&st, id, &key.workspace).await
}

pub async fn events(
    State(st): State<Arc<AppState>>,
    Operator(key): Operator,
    PathId(id): PathId,
    poll: LongPoll,
    query: QueryMap,
) -> ApiResult<Json<wire::EventList>> {
    let after = query.int("after", 0, i64::from(i32::MAX))?.unwrap_or(0);
    let limit = query.int("limit", 1, 1000)?.unwrap_or(1000);
    let wait = wait_duration(&st, &query, 0)?;
    poll.allow(wait);
    let hub = &st.hub;
    if hub.job(id, &key.workspace).await?.is_none() {
        return Err(ApiError::NotFound);
    }
    let workspace = key.workspace.as_str();
    let (events, _) = st
        .hub
        .wait_on_job(
            id,
            wait,
            &st.shutdown,
            || async move {
                let events = hub.events(id, after as i32, limit, LIST_PAGE_BYTES).await?;
                let terminal = if events.is_empty() {
                    hub.job(id, workspace)
                        .await?
                        .is_none_or(|j| j.state.is_terminal())
                } else {
                    false
                };
                Ok((events, terminal))
            },
            |(events, terminal)| !events.is_empty() || *terminal,
        )
        .await?;
    let next = events.last().map_or(after, |e| i64::from(e.seq));
    Ok(Json(wire::EventList {
        events: events.into_iter().map(views::event).collect(),
        next,
    }))
}
