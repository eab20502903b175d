//! Runner calls (runner token) and enrolment (the join code is the credential).
//!
//! Every call about a job is one fenced statement; when it matches nothing the answer is 404
//! (not this owner's job), 409 `job_terminal` or 409 `lease_superseded`, in that order.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use uuid::Uuid;

use super::auth::{RunnerCaller, RunnerToken};
use super::client_address::ClientIp;
use super::deadline::LongPoll;
use super::error::{ApiError, ApiResult};
use super::extract::{Body, PathId};
use super::operators::{created, Described};
use super::secrets;
use super::validate;
use super::views;
use super::AppState;
use crate::domain::credentials::{self, Kind, Secret};
use crate::domain::owner;
use crate::domain::version;
use crate::hub::handover::Handover;
use crate::hub::{Advertised, GiveBack, LeaseAnswer, Leased};
use crate::store::claim::{DoneReport, Reported};
use crate::store::jobs::Fenced;
use crate::store::{FenceMiss, Report};
use crate::telemetry::traces;
use crate::wire;

/// Largest serialised `data` of one runner event, and of a failure message.
const MAX_EVENT_BYTES: usize = 64 * 1024;

pub async fn enroll(
    State(st): State<Arc<AppState>>,
    ClientIp(ip): ClientIp,
    Body(req): Body<wire::Enroll>,
) -> ApiResult<(StatusCode, Json<wire::RunnerWithToken>)> {
    st.spend_rate_token(ip)?;
    // A request refused with 400 does not burn its code.
    let described = Described::new(
        &st,
        wire::CreateRunner {
            label: req.label,
            os: req.os,
            version: req.version,
            capabilities: req.capabilities,
            exclusive: req.exclusive,
            capacity: req.capacity,
            repo_targets: req.repo_targets,
        },
    )?;
    let code = credentials::parse(Kind::JoinCode, &req.code).ok_or(ApiError::Unauthorized)?;
    let token = Secret::generate(Kind::Runner);
    let runner = st
        .hub
        .enroll(&code, |grant| {
            described.runner(grant, token.hash().to_vec(), true)
        })
        .await?
        .ok_or(ApiError::Unauthorized)?;
    Ok(created(runner, &token))
}

pub async fn heartbeat(
    State(st): State<Arc<AppState>>,
    RunnerCaller(me): RunnerCaller,
    Body(req): Body<wire::RunnerHeartbeat>,
) -> ApiResult<Json<wire::RunnerHeartbeatReply>> {
    validate::opt_text("version", req.version.as_deref(), 64)?;
    let capacity = validate::opt_range("capacity", req.capacity, 1, 256)?.map(|c| c as i32);
    let capabilities = req
        .capabilities
        .as_deref()
        .map(|c| st.vocabulary.advertised(c));
    let exclusive = req
        .exclusive
        .as_deref()
        .map(|c| st.vocabulary.advertised(c));
    let running = req.running.unwrap_or_default();
    if running.len() > 10_000 {
        return Err(ApiError::bad("running: at most 10000 entries"));
    }
    let targets = validate::repo_targets(req.repo_targets.as_deref())?;
    let outdated = version::is_outdated(
        req.version.as_deref(),
        st.limits.min_runner_version.as_ref(),
    );
    let hub = &st.hub;
    hub.advertise_repo_targets(me.id, &targets).await?;
    let runner = hub
        .runner_heartbeat(
            me.id,
            req.version.as_deref(),
            capabilities.as_deref(),
            exclusive.as_deref(),
            capacity,
            outdated,
        )
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let pairs: Vec<(Uuid, i64)> = running.iter().map(|r| (r.id, r.epoch)).collect();
    let cancelled = hub.not_running(me.id, &pairs).await?;
    Ok(Json(wire::RunnerHeartbeatReply {
        runner: views::runner(runner),
        cancelled,
    }))
}

pub async fn lease(
    State(st): State<Arc<AppState>>,
    token: RunnerToken,
    poll: LongPoll,
    Body(req): Body<wire::Lease>,
) -> ApiResult<Response> {
    let wait_ms = validate::range("wait_ms", req.wait_ms, 0, 60_000, 30_000)?;
    let max_jobs = validate::range("max_jobs", req.max_jobs, 1, 100, 1)?;
    if req.done.as_ref().is_some_and(|d| d.len() > 100) {
        return Err(ApiError::bad("done: at most 100 reports"));
    }
    validate::opt_text("version", req.version.as_deref(), 64)?;
    let targets = validate::repo_targets(req.repo_targets.as_deref())?;
    // Before any database work; held until this call answers or is dropped.
    let _slot = st.polls.take(&token.hash)?;
    placement_check(&st, &token, req.version.as_deref(), &targets).await?;
    // v1.2: the reports go first in the lease transaction (their slots are free for its claim).
    let (reports, statuses) = check_done(req.done.unwrap_or_default());
    let advertised = Advertised {
        capabilities: req
            .capabilities
            .as_deref()
            .map(|c| st.vocabulary.advertised(c)),
        exclusive: req
            .exclusive
            .as_deref()
            .map(|c| st.vocabulary.advertised(c)),
    };
    let wait = Duration::from_millis((wait_ms as u64).min(st.limits.max_wait_ms));
    poll.allow(wait);
    let leased = st
        .hub
        .lease(
            &token.hash,
            advertised,
            max_jobs,
            wait,
            &reports,
            &st.shutdown,
        )
        .await?;
    let Leased { answer, done } = leased;
    let done = done_statuses(&st, &token, &reports, done, statuses)?;
    match answer {
        LeaseAnswer::Jobs(jobs, _) if jobs.is_empty() => Ok(Json(wire::Leased {
            jobs: Vec::new(),
            done,
        })
        .into_response()),
        // Boxed, like every database call this handler makes: the handler's own future is
        // what a parked long-poll holds (10,000 at once), so it must not carry the state of
        // the calls it makes before or after its wait (13 KB inline).
        LeaseAnswer::Jobs(jobs, mut handover) => {
            let jobs = Box::pin(hand_over(&st, &token, jobs, &mut handover)).await?;
            Ok(delivered(&wire::Leased { jobs, done }, handover))
        }
        LeaseAnswer::RunnerGone => Err(st.auth_failed(token.ip)),
    }
}

/// A lease answer whose jobs stay guarded until its body has been handed to the connection
/// (v1.4, "A lease to a caller that is gone"): the body gives hyper the JSON as one frame (with
/// its length, so the answer keeps its `Content-Length`), and the hand-over is delivered once
/// hyper has taken that frame for writing (hyper drops a body whose length it has written
/// without asking for more). A connection closed before that drops the body with its frame
/// untaken, and with it the guard, which parks the jobs again (`caller_gone`).
fn delivered(answer: &wire::Leased, handover: Handover) -> Response {
    let Ok(json) = serde_json::to_vec(answer) else {
        return ApiError::Internal.into_response();
    };
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::new(Delivered {
            json: Some(bytes::Bytes::from(json)),
            guard: Some(handover),
        }),
    )
        .into_response()
}

/// The body of [`delivered`]: its one frame, then the hand-over delivered.
struct Delivered {
    json: Option<bytes::Bytes>,
    guard: Option<Handover>,
}

impl http_body::Body for Delivered {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match self.json.take() {
            Some(json) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(json)))),
            None => std::task::Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.json.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.json.as_ref().map_or(0, |j| j.len() as u64))
    }
}

impl Drop for Delivered {
    fn drop(&mut self) {
        // Its frame taken: the answer is hyper's to write. Untaken: the guard gives back.
        if self.json.is_none() {
            if let Some(guard) = self.guard.take() {
                guard.delivered();
            }
        }
    }
}

/// The lease answer for the jobs a call took, with the values of the secrets each names, read
/// now. A job whose named secret is gone, or (for a personal runner) is `workspace`-scoped, is
/// rejected `secret_missing` (its attempt not counted) and left out: a `workspace` secret never
/// reaches a personal runner, even when its scope was narrowed after the job was dispatched.
/// A job naming a secret that is now `dispatch: admin`, whose dispatcher (its last dispatch or
/// retry call) is not an admin, is rejected `secret_forbidden` the same way (v1.3): this is the
/// one place every hand-over passes (a first lease, a re-delivery, an automatic retry). When
/// secrets cannot be opened on this replica (no key, or a key that
/// does not open them), every job of the call is parked again, attempts given back, and the
/// call answers 503 naming the variable: nothing is half-done.
async fn hand_over(
    st: &AppState,
    token: &RunnerToken,
    jobs: Vec<crate::store::records::Claimed>,
    handover: &mut Handover,
) -> ApiResult<Vec<wire::LeasedJob>> {
    let credential_of = |c: &crate::store::records::Claimed| {
        c.source
            .as_ref()
            .and_then(|s| s.get("credential_secret"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    // A runner serves one workspace: every job it took is of the same one.
    let mut names: Vec<String> = jobs
        .iter()
        .flat_map(|c| c.secrets.iter().cloned().chain(credential_of(c)))
        .collect();
    names.sort();
    names.dedup();
    let workspace = jobs
        .first()
        .map(|c| c.workspace.clone())
        .unwrap_or_default();
    let opened = match secrets::open_for_lease(st, &workspace, &names).await {
        Ok(opened) => opened,
        Err(e) => {
            let back: Vec<(Uuid, i64)> = jobs.iter().map(|c| (c.id, c.epoch)).collect();
            st.hub
                .give_back(&back, &token.hash, GiveBack::SecretsUnavailable)
                .await?;
            handover.forget_all();
            return Err(e);
        }
    };
    // Who leased: remembered by the lease call that just ran (asked again only if forgotten).
    let personal = if names.is_empty() {
        false
    } else {
        match st.hub.known_runner(&token.hash) {
            Some(me) => owner::billing_tenant(&me.owner).is_none(),
            None => st
                .hub
                .runner_by_token(&token.hash)
                .await?
                .is_none_or(|me| owner::billing_tenant(&me.owner).is_none()),
        }
    };
    // Who dispatched (or last retried) the jobs that name an admin-only secret: asked only then.
    let naming_admin_only: Vec<Uuid> = jobs
        .iter()
        .filter(|c| {
            c.secrets
                .iter()
                .cloned()
                .chain(credential_of(c))
                .any(|n| opened.admin_only(&n))
        })
        .map(|c| c.id)
        .collect();
    let by_admin = if naming_admin_only.is_empty() {
        Vec::new()
    } else {
        st.hub.dispatched_by_admin(&naming_admin_only).await?
    };
    let mut out = Vec::with_capacity(jobs.len());
    for c in jobs {
        let credential = credential_of(&c);
        let admin = by_admin.contains(&c.id);
        let picked = secrets::pick(&opened, &c.secrets, credential.as_deref(), personal, admin);
        let Some((reason, message)) = picked.refusal() else {
            if let secrets::ForLease::Values(values, credential) = picked {
                out.push(views::leased(c, st.limits.lease_ttl_ms, values, credential));
            }
            continue;
        };
        st.hub
            .reject_for_secret(c.id, c.epoch, &token.hash, reason, &message)
            .await?;
        handover.forget(c.id);
    }
    Ok(out)
}

/// Before a lease: record what the call advertises (version, repository targets), then refuse
/// an outdated runner with 409 `runner_outdated`. Costs a statement only when the call
/// advertises targets, or a version this replica has not yet recorded for this token, or when
/// the runner is (or may be) outdated; a current runner repeating its version costs nothing.
async fn placement_check(
    st: &AppState,
    token: &RunnerToken,
    version: Option<&str>,
    targets: &crate::store::AdvertisedTargets,
) -> ApiResult<()> {
    let min = st.limits.min_runner_version.as_ref();
    if version.is_none() && targets.is_empty() && min.is_none() {
        return Ok(());
    }
    let outdated = version::is_outdated(version, min);
    if let Some(v) = version {
        if targets.is_empty() && !outdated && st.versions.already_recorded(&token.hash, v) {
            return Ok(());
        }
    }
    // Boxed: see the lease handler.
    let caller = Box::pin(
        st.hub
            .advertise_for_lease(&token.hash, version, outdated, targets),
    )
    .await?
    .ok_or_else(|| st.auth_failed(token.ip))?;
    match min {
        Some(min) if caller.outdated => Err(ApiError::RunnerOutdated {
            min_version: min.to_string(),
        }),
        _ => {
            if let Some(v) = version {
                st.versions.recorded(&token.hash, v);
            }
            Ok(())
        }
    }
}

/// A fenced call's answer: what it did, or the contract's 401 / 404 / 409 for why it matched
/// nothing (a dead token spends the address's rate-limit bucket like any failed
/// authentication).
fn fenced<T>(st: &AppState, token: &RunnerToken, answer: Fenced<T>) -> ApiResult<T> {
    answer.map_err(|miss| match miss {
        FenceMiss::Unauthorized => st.auth_failed(token.ip),
        other => other.into(),
    })
}

pub async fn job_heartbeat(
    State(st): State<Arc<AppState>>,
    token: RunnerToken,
    PathId(id): PathId,
    Body(req): Body<wire::Fence>,
) -> ApiResult<Json<wire::LeaseExtended>> {
    let answer = st.hub.extend_lease(id, req.epoch, &token.hash).await?;
    let lease_expires_at = fenced(&st, &token, answer)?;
    Ok(Json(wire::LeaseExtended { lease_expires_at }))
}

pub async fn append_events(
    State(st): State<Arc<AppState>>,
    token: RunnerToken,
    PathId(id): PathId,
    Body(req): Body<wire::AppendEvents>,
) -> ApiResult<(StatusCode, Json<wire::Appended>)> {
    if req.events.is_empty() || req.events.len() > 1000 {
        return Err(ApiError::bad("events: 1..1000 events per call"));
    }
    let mut kinds = Vec::with_capacity(req.events.len());
    let mut data = Vec::with_capacity(req.events.len());
    for (i, e) in req.events.into_iter().enumerate() {
        if !validate::is_event_kind(&e.kind) {
            return Err(ApiError::bad(format!(
                "events[{i}].kind: must match ^[a-z][a-z0-9_.-]{{0,31}}$ and not be 'state'"
            )));
        }
        let d = e.data.unwrap_or(Value::Null);
        validate::no_nul(&format!("events[{i}].data"), &d)?;
        if serde_json::to_vec(&d).map_or(true, |b| b.len() > MAX_EVENT_BYTES) {
            return Err(ApiError::bad(format!(
                "events[{i}].data: at most 64 KiB serialised"
            )));
        }
        kinds.push(e.kind);
        data.push(d);
    }
    let answer = st
        .hub
        .append_events(id, req.epoch, &token.hash, &kinds, &data)
        .await?;
    let next = fenced(&st, &token, answer)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(wire::Appended {
            next: i64::from(next),
        }),
    ))
}

pub async fn complete(
    State(st): State<Arc<AppState>>,
    token: RunnerToken,
    PathId(id): PathId,
    Body(req): Body<wire::Complete>,
) -> ApiResult<Json<wire::Job>> {
    let job = report_complete(&st, &token, id, req.epoch, req.result).await?;
    Ok(Json(super::jobs::view(job)))
}

/// A `complete` report, as its own call or as an entry of a lease call's `done`.
async fn report_complete(
    st: &AppState,
    token: &RunnerToken,
    id: Uuid,
    epoch: i64,
    result: Option<Value>,
) -> ApiResult<crate::store::records::Job> {
    let result = checked_result(result)?;
    let answer = st
        .hub
        .complete(Report {
            id,
            epoch,
            token_hash: token.hash.clone(),
            result,
        })
        .await?;
    let job = fenced(st, token, answer)?;
    traces::job_step("complete", id, job.epoch, job.traceparent.as_deref());
    Ok(job)
}

pub async fn fail(
    State(st): State<Arc<AppState>>,
    token: RunnerToken,
    PathId(id): PathId,
    Body(req): Body<wire::Fail>,
) -> ApiResult<Json<wire::Job>> {
    let job = report_fail(&st, &token, id, req.epoch, &req.message).await?;
    Ok(Json(super::jobs::view(job)))
}

/// A `fail` report, as its own call or as an entry of a lease call's `done`.
async fn report_fail(
    st: &AppState,
    token: &RunnerToken,
    id: Uuid,
    epoch: i64,
    message: &str,
) -> ApiResult<crate::store::records::Job> {
    check_message(message)?;
    let answer = st.hub.fail(id, epoch, &token.hash, message).await?;
    let job = fenced(st, token, answer)?;
    traces::job_step("fail", id, job.epoch, job.traceparent.as_deref());
    Ok(job)
}

/// A `complete` report's result: null when it has none, and without NUL characters.
fn checked_result(result: Option<Value>) -> ApiResult<Value> {
    let result = result.unwrap_or(Value::Null);
    validate::no_nul("result", &result)?;
    Ok(result)
}

/// A `fail` report's message: at most 64 KiB, without NUL characters.
fn check_message(message: &str) -> ApiResult<()> {
    if message.len() > MAX_EVENT_BYTES || message.contains('\0') {
        return Err(ApiError::bad(
            "message: at most 64 KiB, without NUL characters",
        ));
    }
    Ok(())
}

/// A lease call's `done` (v1.2), checked as each report's own call checks it: the reports to
/// apply, and a status for each entry in request order (a refused entry's 400 already there).
fn check_done(done: Vec<wire::DoneReport>) -> (Vec<DoneReport>, Vec<Option<wire::DoneStatus>>) {
    let mut reports = Vec::with_capacity(done.len());
    let statuses = done
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let report = match (d.result, d.fail) {
                (result, None) => checked_result(result).map(Reported::Complete),
                (None, Some(message)) => check_message(&message).map(|()| Reported::Fail(message)),
                (Some(_), Some(_)) => Err(ApiError::bad(format!(
                    "done[{i}]: either result (complete) or fail (fail), not both"
                ))),
            };
            match report {
                Ok(report) => {
                    reports.push(DoneReport {
                        id: d.id,
                        epoch: d.epoch,
                        report,
                    });
                    None
                }
                Err(e) => Some(done_status(d.id, &e)),
            }
        })
        .collect();
    (reports, statuses)
}

/// Fill in the statuses of the reports the lease applied, each as its own call would have
/// answered: 200, or the 404 / 409 of its fence. A dead token fails the whole call (401).
fn done_statuses(
    st: &AppState,
    token: &RunnerToken,
    reports: &[DoneReport],
    applied: Vec<Fenced<crate::hub::dispatcher::Applied>>,
    mut statuses: Vec<Option<wire::DoneStatus>>,
) -> ApiResult<Vec<wire::DoneStatus>> {
    let open = statuses.iter_mut().filter(|s| s.is_none());
    for ((slot, report), answer) in open.zip(reports).zip(applied) {
        let status = match fenced(st, token, answer) {
            Ok(job) => {
                let step = match report.report {
                    Reported::Complete(_) => "complete",
                    Reported::Fail(_) => "fail",
                };
                traces::job_step(step, job.id, job.epoch, job.traceparent.as_deref());
                wire::DoneStatus {
                    id: report.id,
                    status: 200,
                    code: None,
                }
            }
            Err(
                e @ (ApiError::NotFound | ApiError::JobTerminal(_) | ApiError::LeaseSuperseded),
            ) => done_status(report.id, &e),
            Err(e) => return Err(e),
        };
        *slot = Some(status);
    }
    let statuses: Vec<wire::DoneStatus> = statuses.into_iter().flatten().collect();
    for status in &statuses {
        st.hub.metrics.done_reports.inc();
        let stale = match status.code.as_deref() {
            Some("job_terminal") => Some("job_terminal"),
            Some("lease_superseded") => Some("lease_superseded"),
            _ => None,
        };
        if let Some(reason) = stale {
            st.hub
                .metrics
                .stale_reports
                .get_or_create(&crate::telemetry::metrics::ReasonLabel { reason })
                .inc();
        }
    }
    Ok(statuses)
}

/// An entry's status for a refusal its own call would have answered with.
fn done_status(id: Uuid, e: &ApiError) -> wire::DoneStatus {
    let (status, code) = e.status_and_code();
    wire::DoneStatus {
        id,
        status: status.as_u16(),
        code: Some(code.to_owned()),
    }
}

pub async fn release(
    State(st): State<Arc<AppState>>,
    token: RunnerToken,
    PathId(id): PathId,
    Body(req): Body<wire::Fence>,
) -> ApiResult<Json<wire::Job>> {
    let answer = st.hub.release(id, req.epoch, &token.hash).await?;
    let job = fenced(&st, &token, answer)?;
    traces::job_step("release", id, job.epoch, job.traceparent.as_deref());
    Ok(Json(super::jobs::view(job)))
}
