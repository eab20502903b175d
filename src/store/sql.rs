//! Every statement the service runs, one file each under `sql/`, compiled into the binary.
//!
//! Invariant: [`ALL`] lists every statement, and a test prepares each of them against the
//! migrated schema, so a renamed column fails a test and never production.

macro_rules! statements {
    ($($name:ident => $file:literal,)*) => {
        $(pub const $name: &str = include_str!(concat!("../../sql/", $file));)*
        /// Every statement, with its file name.
        pub const ALL: &[(&str, &str)] = &[$(($file, $name),)*];
    };
}

/// The file name of a statement's text (for logs and metrics), or `-`.
pub fn name_of(sql: &str) -> &'static str {
    ALL.iter()
        .find(|(_, text)| std::ptr::eq(*text, sql))
        .map_or("-", |(file, _)| file)
}

statements! {
    KEY_INSERT => "key_insert.sql",
    KEY_BY_HASH => "key_by_hash.sql",
    KEY_REVOKE => "key_revoke.sql",
    RUNNER_INSERT => "runner_insert.sql",
    RUNNER_BY_TOKEN => "runner_by_token.sql",
    RUNNERS_TOUCH => "runners_touch.sql",
    RUNNERS_BY_OWNER => "runners_by_owner.sql",
    RUNNERS_IN_WORKSPACE => "runners_in_workspace.sql",
    RUNNER_GET => "runner_get.sql",
    RUNNER_HEARTBEAT => "runner_heartbeat.sql",
    RUNNER_NOT_RUNNING => "runner_not_running.sql",
    RUNNER_LOCK_FOR_LEASE => "runner_lock_for_lease.sql",
    RUNNER_REVOKE => "runner_revoke.sql",
    RUNNER_REVOKE_JOBS => "runner_revoke_jobs.sql",
    JOB_INSERT => "job_insert.sql",
    JOB_BY_IDEMPOTENCY_KEY => "job_by_idempotency_key.sql",
    JOB_GET => "job_get.sql",
    JOBS_LIST => "jobs_list.sql",
    JOBS_LIST_DESC => "jobs_list_desc.sql",
    JOB_CANCEL => "job_cancel.sql",
    JOB_FENCE_MISS => "job_fence_miss.sql",
    JOB_HEARTBEAT => "job_heartbeat.sql",
    JOB_COMPLETE => "job_complete.sql",
    JOB_FAIL => "job_fail.sql",
    JOB_RELEASE => "job_release.sql",
    JOB_EVENTS_APPEND => "job_events_append.sql",
    JOB_EVENTS_LIST => "job_events_list.sql",
    LEASE_CLAIM => "lease_claim.sql",
    SWEEP_LAPSED_LEASES => "sweep_lapsed_leases.sql",
    SWEEP_NO_RUNNER => "sweep_no_runner.sql",
    SWEEP_QUEUE_TIMEOUT => "sweep_queue_timeout.sql",
    SWEEP_JOIN_CODES => "sweep_join_codes.sql",
    SWEEP_EPHEMERAL_RUNNERS => "sweep_ephemeral_runners.sql",
    JOIN_CODE_INSERT => "join_code_insert.sql",
    JOIN_CODE_BURN => "join_code_burn.sql",
    POOL_COUNTS => "pool_counts.sql",
    PREFLIGHT_RUNNERS => "preflight_runners.sql",
    PARKED_QUEUES => "parked_queues.sql",
    NOTIFY => "notify.sql",
    SECRET_PUT => "secret_put.sql",
    SECRETS_LIST => "secrets_list.sql",
    SECRET_DELETE => "secret_delete.sql",
    SECRETS_EXISTING => "secrets_existing.sql",
    SECRETS_SEALED => "secrets_sealed.sql",
    SECRETS_ALL_SEALED => "secrets_all_sealed.sql",
    RUNNER_ADVERTISE => "runner_advertise.sql",
    REPO_TARGETS_ADVERTISE => "repo_targets_advertise.sql",
    REPO_TARGET_SET_STATUS => "repo_target_set_status.sql",
    RUNNERS_VERSIONS => "runners_versions.sql",
    RUNNERS_SET_OUTDATED => "runners_set_outdated.sql",
    SWEEP_DORMANT_RUNNERS => "sweep_dormant_runners.sql",
    LEASE_REJECT_SECRET_MISSING => "lease_reject_secret_missing.sql",
    LEASE_GIVE_BACK => "lease_give_back.sql",
    PING => "ping.sql",
}
