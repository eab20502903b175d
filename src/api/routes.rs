//! The route table: every route of the router but `/mcp`, with what the OpenAPI document says
//! about it (its types are `route_doc`'s). `/mcp` calls these routes (its tools are built from
//! this table), so it is added where every route is mounted ([`super::every_route`]), and this
//! table imports nothing of it: the imports run one way.
//!
//! Invariant: the router ([`super::router`]) and `/openapi.json` ([`super::openapi`]) are both
//! built from [`super::every_route`], so a route cannot be served undocumented or documented
//! unserved. A
//! route of the contract whose handler is not written yet carries no handler: it is documented
//! and answers the router's 404 until one is added here. Imports run one way: the document
//! reads this table, never the reverse (the document's own route answers the text
//! [`AppState::openapi`] holds).

use axum::http::Method;
use axum::routing::{delete, get, post, put};

use super::route_doc::{route, Auth, Doc, Route};
use super::{
    artifacts, feed, jobs, join, operators, ops, placement, runner, secrets, ui, webhooks,
};
use crate::wire;

const FENCE: &[&str] = &["job_terminal", "lease_superseded"];
const JOB_ID: &str = "/v1/jobs/{id}";

/// Every route, in the contract's order.
pub fn table() -> Vec<Route> {
    use Auth::*;
    use Method as M;
    vec![
        // ---- operations
        route(M::GET, "/healthz", get(ops::healthz), Doc::new("Liveness: 200 while the process runs", Open).media("application/json")),
        route(M::GET, "/readyz", get(ops::readyz), Doc::new("Readiness: 200 while the database answers and LISTEN is up, else 503", Open).media("application/json")),
        route(M::GET, "/metrics", get(ops::metrics), Doc::new("Prometheus metrics (OpenMetrics text); see docs/operations.md", Open).media("application/openmetrics-text")),
        route(M::GET, "/openapi.json", get(ops::openapi), Doc::new("This document", Open).media("application/json")),
        route(M::GET, "/ui", get(ui::index), Doc::new("The page: jobs, a job's log and timeline, runners, the pool", Open).media("text/html")),
        route(M::GET, "/ui/{file}", get(ui::asset), Doc::new("A static file of the page", Open).media("text/css, text/javascript, image/svg+xml")),
        // ---- operators and dispatchers
        route(M::POST, "/v1/runners", post(operators::create_personal_runner), Doc::new("Pair a personal runner (owner = caller's subject); the token is shown once", Member).body::<wire::CreateRunner>().answer::<wire::RunnerWithToken>(201)),
        route(M::GET, "/v1/runners", get(operators::list_personal_runners), Doc::new("The caller's personal runners in this workspace", Member).answer::<wire::RunnerList>(200)),
        route(M::DELETE, "/v1/runners/{id}", delete(operators::revoke_personal_runner), Doc::new("Revoke a personal runner: its token dies at once", Member).empty(204)),
        route(M::POST, "/v1/workspace/runners", post(operators::create_workspace_runner), Doc::new("Pair a workspace runner (owner = ws:<workspace>)", Admin).body::<wire::CreateRunner>().answer::<wire::RunnerWithToken>(201)),
        route(M::GET, "/v1/workspace/runners", get(operators::list_workspace_runners), Doc::new("Roster: every runner paired in this workspace, both tiers", Member).answer::<wire::RunnerList>(200)),
        route(M::DELETE, "/v1/workspace/runners/{id}", delete(operators::revoke_workspace_runner), Doc::new("Revoke a workspace runner", Admin).empty(204)),
        route(M::POST, "/v1/runners/{id}/repo-targets/{target_id}/approve", post(placement::approve_repo_target), Doc::new("Approve a repository target a runner advertised (v1.1)", Member).answer::<wire::Runner>(200).errors(&["forbidden"])),
        route(M::POST, "/v1/runners/{id}/repo-targets/{target_id}/revoke", post(placement::revoke_repo_target), Doc::new("Revoke a repository target (v1.1)", Member).answer::<wire::Runner>(200).errors(&["forbidden"])),
        route(M::POST, "/v1/join-codes", post(operators::create_join_code), Doc::new("Mint a join code (workspace tier needs admin); shown once", Member).body::<wire::CreateJoinCode>().answer::<wire::JoinCode>(201).errors(&["forbidden"])),
        route(M::POST, "/v1/keys", post(operators::create_key), Doc::new("Issue an API key; shown once", Admin).body::<wire::CreateKey>().answer::<wire::CreatedKey>(201)),
        route(M::DELETE, "/v1/keys/{id}", delete(operators::revoke_key), Doc::new("Revoke an API key", Admin).empty(204)),
        route(M::POST, "/v1/jobs", post(jobs::dispatch), Doc::new("Dispatch a job; header Idempotency-Key optional (a repeat answers 200 with the first job)", Member).body::<wire::Dispatch>().answer::<wire::Job>(201).errors(&["capability_mismatch"])),
        route(M::GET, "/v1/jobs", get(jobs::list), Doc::new("The workspace's jobs by id", Member).answer::<wire::JobList>(200).query(&[("state", "string", "parked|leased|completed|failed|cancelled|rejected"), ("outcome", "string", "succeeded|failed|cancelled|rejected (v1.3): how a settled job ended"), ("limit", "integer", "1..500, default 100"), ("after", "string", "a job id, exclusive"), ("order", "string", "asc (default) or desc (v1.1)"), ("q", "string", "leasehold's own: 1..200 characters; jobs whose command (argv joined with spaces) holds it in any case, or whose id is it or starts or ends with its hex digits")])),
        route(M::POST, "/v1/jobs/batch", post(jobs::dispatch_batch), Doc::new("Dispatch 1..1000 jobs in one transaction, all or none (v1.1)", Member).body::<wire::DispatchBatch>().answer::<wire::Jobs>(201).errors(&["capability_mismatch"])),
        route(M::GET, JOB_ID, get(jobs::get), Doc::new("A job; with wait_ms, answers once it is terminal or the wait ends", Member).answer::<wire::Job>(200).query(&[("wait_ms", "integer", "0..60000, default 0")])),
        route(M::POST, "/v1/jobs/{id}/cancel", post(jobs::cancel), Doc::new("Cancel a live job; a terminal job is returned unchanged", Member).answer::<wire::Job>(200)),
        route(M::POST, "/v1/jobs/{id}/retry", post(jobs::retry), Doc::new("Run a job again: a settled job is parked again, a leased one superseded (epoch + 1, retries + 1, attempts 0); a parked job is returned unchanged; header Idempotency-Key optional (v1.2)", Member).answer::<wire::Job>(200)),
        route(M::GET, "/v1/jobs/{id}/events", get(jobs::events), Doc::new("A job's events after a seq", Member).answer::<wire::EventList>(200).query(&[("after", "integer", "a seq, exclusive, default 0"), ("limit", "integer", "1..1000, default 1000"), ("wait_ms", "integer", "0..60000, default 0")])),
        route(M::POST, "/v1/preflight", post(operators::preflight), Doc::new("Would a dispatch find a runner?", Member).body::<wire::Preflight>().answer::<wire::PreflightReport>(200)),
        route(M::GET, "/v1/pool", get(operators::pool), Doc::new("Runners, slots and jobs of the runners the caller may target", Member).answer::<wire::Pool>(200)),
        route(M::PUT, "/v1/secrets/{name}", put(secrets::put), Doc::new("Create or replace a workspace secret (v1.1) with its scope (runners: workspace|any, dispatch: member|admin); the value is never shown again", Admin).body::<wire::PutSecret>().empty(204)),
        route(M::GET, "/v1/secrets", get(secrets::list), Doc::new("The workspace's secret names and scopes, by name (v1.1); never a value", Member).answer::<wire::SecretList>(200)),
        route(M::DELETE, "/v1/secrets/{name}", delete(secrets::delete), Doc::new("Delete a workspace secret (v1.1)", Admin).empty(204)),
        // ---- the workspace feed and webhooks (v1.4)
        route(M::GET, "/v1/events", get(feed::events), Doc::new("The workspace's job events in commit order (v1.4): a page and the cursor to read on from; with Accept: text/event-stream, server-sent events (id: the cursor; Last-Event-ID resumes)", Member).answer::<wire::FeedPage>(200).query(&[("after", "string", "a cursor (opaque; absent: from the oldest kept)"), ("limit", "integer", "1..1000, default 100"), ("kinds", "string", "comma-separated event kinds, default state"), ("wait_ms", "integer", "0..60000 (clamped to LEASEHOLD_MAX_WAIT_MS), default 0: wait for an event past after")]).errors(&["gone"])),
        route(M::PUT, "/v1/webhooks/{name}", put(webhooks::put), Doc::new("Create (201, with the whsec_ secret, shown once) or replace (200) a webhook (v1.4); a replace enables a disabled one", Admin).body::<wire::PutWebhook>().answer::<wire::Webhook>(201)),
        route(M::GET, "/v1/webhooks", get(webhooks::list), Doc::new("The workspace's webhooks by name (v1.4)", Admin).answer::<wire::WebhookList>(200)),
        route(M::DELETE, "/v1/webhooks/{name}", delete(webhooks::delete), Doc::new("Delete a webhook and its delivery log (v1.4)", Admin).empty(204)),
        route(M::GET, "/v1/webhooks/{name}/deliveries", get(webhooks::deliveries), Doc::new("A webhook's deliveries, newest first (v1.4)", Admin).answer::<wire::WebhookDeliveryList>(200).query(&[("limit", "integer", "1..100, default 20"), ("after", "string", "the `next` of the previous page, exclusive")])),
        route(M::POST, "/v1/webhooks/{name}/deliveries/{id}/redeliver", post(webhooks::redeliver), Doc::new("Send a delivery's event again as a new delivery, due now (v1.4)", Admin).answer::<wire::WebhookDelivery>(202)),
        // ---- operator tools for agents (v1.2)
        // ---- runners
        route(M::GET, "/j/{short}", get(join::fetch).head(join::head_refused), Doc::new("A join URL (v1.2): the join code's connect payload, once; unknown, used or expired short codes get one identical 404, each counted against the caller's rate-limit bucket", Open).answer::<wire::JoinUrl>(200).errors(&["rate_limited"])),
        route(M::GET, "/install.sh", get(join::install_sh), Doc::new("The installer (v1.2): sh -c \"$(curl -fsSL https://HOST/install.sh || echo exit 1)\" install.sh https://HOST/j/<short> [--service]", Open).media("text/x-shellscript")),
        route(M::GET, "/download/{file}", get(join::download), Doc::new("This replica's own binary, leasehold-<os>-<arch> (header X-Checksum-Sha256), or its .sha256 (v1.2); other platforms 404", Open).media("application/octet-stream")),
        route(M::POST, "/v1/enroll", post(runner::enroll), Doc::new("Enrol a runner with a join code (the code is the credential and is burned)", Open).body::<wire::Enroll>().answer::<wire::RunnerWithToken>(201)),
        route(M::POST, "/v1/runner/heartbeat", post(runner::heartbeat), Doc::new("A runner's heartbeat: advertise, and learn which running jobs to stop", Runner).body::<wire::RunnerHeartbeat>().answer::<wire::RunnerHeartbeatReply>(200)),
        route(M::POST, "/v1/runner/lease", post(runner::lease), Doc::new("Long-poll for jobs: answers with jobs, or empty when the wait ends", Runner).body::<wire::Lease>().answer::<wire::Leased>(200).errors(&["runner_outdated"])),
        route(M::POST, "/v1/runner/jobs/{id}/heartbeat", post(runner::job_heartbeat), Doc::new("Extend a lease, fenced by epoch", Runner).body::<wire::Fence>().answer::<wire::LeaseExtended>(200).errors(FENCE)),
        route(M::POST, "/v1/runner/jobs/{id}/events", post(runner::append_events), Doc::new("Append events, fenced by epoch", Runner).body::<wire::AppendEvents>().answer::<wire::Appended>(202).errors(FENCE)),
        route(M::POST, "/v1/runner/jobs/{id}/complete", post(runner::complete), Doc::new("Report success, fenced; the first terminal report wins", Runner).body::<wire::Complete>().answer::<wire::Job>(200).errors(FENCE)),
        route(M::POST, "/v1/runner/jobs/{id}/fail", post(runner::fail), Doc::new("Report that the job could not run, fenced", Runner).body::<wire::Fail>().answer::<wire::Job>(200).errors(FENCE)),
        route(M::POST, "/v1/runner/jobs/{id}/release", post(runner::release), Doc::new("Give the lease back (draining); the job is parked again", Runner).body::<wire::Fence>().answer::<wire::Job>(200).errors(FENCE)),
        // ---- artifacts (v1.2)
        route(M::PUT, "/v1/runner/jobs/{id}/artifacts/{*path}", put(artifacts::upload), Doc::new("Upload an artifact while holding the job, fenced by epoch at the start and when the last byte is stored; the body is the bytes (at most LEASEHOLD_ARTIFACT_MAX_BYTES, within the job and workspace bounds); a path is taken only within one epoch (v1.3)", Runner).answer::<wire::ArtifactUploaded>(201).query(&[("epoch", "integer", "the epoch the job was leased at (required)")]).errors(&["job_terminal", "lease_superseded", "artifact_exists", "too_large", "quota_exceeded"])),
        route(M::GET, "/v1/jobs/{id}/artifacts", get(artifacts::list), Doc::new("A page of a job's artifacts, each with the epoch of the attempt that uploaded it: newest epoch first, then by path (v1.3)", Member).answer::<wire::ArtifactList>(200).query(&[("limit", "integer", "1..1000, default 100"), ("after", "string", "the `next` of the previous page, exclusive")])),
        route(M::GET, "/v1/jobs/{id}/artifacts/{*path}", get(artifacts::download), Doc::new("An artifact's bytes: the newest epoch's file of the path, or epoch N's; ETag the sha256, Range honoured with 206 (v1.3)", Member).media("application/octet-stream").query(&[("epoch", "integer", "the attempt's epoch (default: the newest that uploaded this path)")]).errors(&["range_not_satisfiable"])),
    ]
}
