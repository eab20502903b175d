//! Every statement the service runs, one file each under `sql/`, compiled into the binary; and
//! the statements made from one of those files by `build.rs` ([`DERIVED`]).
//!
//! Invariant: [`ALL`] lists every statement, and a test prepares each of them against the
//! migrated schema, so a renamed column fails a test and never production. A statement is
//! named in logs and errors by its file name ([`name`]), never by its text or its values.

macro_rules! statements {
    ($($name:ident => $file:literal,)* ; derived: $($dname:ident => $dfile:literal,)*) => {
        $(pub const $name: &str = include_str!(concat!("../../sql/", $file));)*
        $(pub const $dname: &str = include_str!(concat!(env!("OUT_DIR"), "/", $dfile));)*
        /// Every statement, with its file name.
        pub const ALL: &[(&str, &str)] = &[$(($file, $name),)* $(($dfile, $dname),)*];
        /// The statements `build.rs` makes from a file in `sql/`: in [`ALL`], not in `sql/`.
        pub const DERIVED: &[&str] = &[$($dfile),*];
    };
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
    RUNNER_FOR_LEASE => "runner_for_lease.sql",
    RUNNERS_LOCK_FOR_CLAIM => "runners_lock_for_claim.sql",
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
    JOB_RETRY => "job_retry.sql",
    JOB_RETRY_BY_KEY => "job_retry_by_key.sql",
    JOB_EVENTS_APPEND => "job_events_append.sql",
    JOB_EVENTS_LIST => "job_events_list.sql",
    CLAIM => "claim.sql",
    SNAPSHOT_HORIZON_AGE => "snapshot_horizon_age.sql",
    LEASE_REJECT_UNFIT => "lease_reject_unfit.sql",
    SWEEP_LAPSED_LEASES => "sweep_lapsed_leases.sql",
    SWEEP_NO_RUNNER => "sweep_no_runner.sql",
    SWEEP_QUEUE_TIMEOUT => "sweep_queue_timeout.sql",
    SWEEP_RETRY_DUE => "sweep_retry_due.sql",
    SWEEP_JOIN_CODES => "sweep_join_codes.sql",
    SWEEP_EPHEMERAL_RUNNERS => "sweep_ephemeral_runners.sql",
    SWEEP_RETENTION => "sweep_retention.sql",
    JOIN_CODE_INSERT => "join_code_insert.sql",
    JOIN_CODE_BURN => "join_code_burn.sql",
    JOIN_URL_BURN => "join_url_burn.sql",
    POOL_COUNTS => "pool_counts.sql",
    PREFLIGHT_RUNNERS => "preflight_runners.sql",
    JOB_WAITING => "job_waiting.sql",
    PARKED_LANES => "parked_lanes.sql",
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
    LEASE_REJECT_SECRET => "lease_reject_secret.sql",
    JOBS_DISPATCHED_BY_ADMIN => "jobs_dispatched_by_admin.sql",
    LEASE_GIVE_BACK => "lease_give_back.sql",
    PING => "ping.sql",
    METRICS_JOB_DEPTH => "metrics_job_depth.sql",
    VACUUM_TRY_LOCK => "vacuum_try_lock.sql",
    VACUUM_JOBS => "vacuum_jobs.sql",
    ARTIFACT_FENCE => "artifact_fence.sql",
    ARTIFACT_RESERVE => "artifact_reserve.sql",
    ARTIFACT_CHUNK_INSERT => "artifact_chunk_insert.sql",
    ARTIFACT_BLOB_TOUCH => "artifact_blob_touch.sql",
    ARTIFACT_PUBLISH => "artifact_publish.sql",
    ARTIFACT_BLOB_DELETE => "artifact_blob_delete.sql",
    ARTIFACTS_LIST => "artifacts_list.sql",
    ARTIFACT_GET => "artifact_get.sql",
    ARTIFACT_CHUNK_READ => "artifact_chunk_read.sql",
    SWEEP_ARTIFACT_UPLOADS => "sweep_artifact_uploads.sql",
    ARTIFACT_GARBAGE_TAKE => "artifact_garbage_take.sql",
    ARTIFACT_GARBAGE_FORGET => "artifact_garbage_forget.sql",
    FEED_PAGE => "feed_page.sql",
    FEED_PRUNED => "feed_pruned.sql",
    FEED_HELD => "feed_held.sql",
    WEBHOOK_PUT => "webhook_put.sql",
    WEBHOOKS_LIST => "webhooks_list.sql",
    WEBHOOK_GET => "webhook_get.sql",
    WEBHOOK_DELETE => "webhook_delete.sql",
    WEBHOOK_DELIVERIES_LIST => "webhook_deliveries_list.sql",
    WEBHOOK_REDELIVER => "webhook_redeliver.sql",
    WEBHOOK_FANOUT => "webhook_fanout.sql",
    WEBHOOK_CLAIM => "webhook_claim.sql",
    WEBHOOK_DELIVERY_DONE => "webhook_delivery_done.sql",
    SWEEP_WEBHOOK_DELIVERIES => "sweep_webhook_deliveries.sql",
    ; derived:
    // sql/job_insert.sql with an ON CONFLICT clause (build.rs): jobs with an idempotency key.
    JOB_INSERT_IDEMPOTENT => "job_insert_idempotent.sql",
}

/// The file name of the statement `text` without `.sql` (one of [`ALL`]), for trace spans.
pub fn span_name(text: &str) -> &'static str {
    let file = name(text);
    file.strip_suffix(".sql").unwrap_or(file)
}

/// The file name of the statement `text` (one of [`ALL`]), for errors and logs.
pub fn name(text: &str) -> &'static str {
    ALL.iter()
        .find(|(_, sql)| std::ptr::eq(*sql, text))
        .or_else(|| ALL.iter().find(|(_, sql)| *sql == text))
        .map_or("unlisted statement", |(file, _)| file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_named_by_its_file() {
        assert_eq!(name(JOB_INSERT), "job_insert.sql");
        assert_eq!(span_name(JOB_INSERT), "job_insert");
        assert_eq!(name(PING), "ping.sql");
        for (file, text) in ALL {
            assert_eq!(name(text), *file);
        }
        assert_eq!(name("SELECT 2"), "unlisted statement");
    }

    /// Statement text without its `--` comments, one line per line of code.
    fn code(text: &str) -> Vec<&str> {
        text.lines()
            .map(|l| l.split_once("--").map_or(l, |(code, _)| code).trim_end())
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    #[test]
    fn the_idempotent_insert_is_the_insert_with_on_conflict() {
        let mut keyed = code(JOB_INSERT_IDEMPOTENT);
        let at = keyed
            .iter()
            .position(|l| l.trim_start().starts_with("ON CONFLICT"))
            .expect("the idempotent insert has an ON CONFLICT clause");
        assert!(keyed[at].contains("(workspace, idempotency_key)"));
        keyed.remove(at);
        assert_eq!(keyed, code(JOB_INSERT));
        assert!(!code(JOB_INSERT).iter().any(|l| l.contains("ON CONFLICT")));
    }
}
