//! The typed configuration of one replica: every timing and limit, from flags or environment.
//!
//! Nothing deeper in the code reads the environment; tests build a [`Config`] directly with
//! short timings.
//!
//! Invariant: no help text or refusal shows the value of a setting that can be secret (a URL
//! that may carry a password, a key, a token): its flag hides its environment value
//! (`hide_env_values`), and a key is parsed by [`SealKeyArg`], which never quotes it.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, FromArgMatches};
use ipnet::IpNet;

use crate::domain::sealing::{SealKey, Sealer};
use crate::domain::version::{self, Version};

/// Everything a replica needs to run. Durations are milliseconds on the wire and in env vars.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// PostgreSQL connection string.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Address to listen on.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// How long a lease lives without a heartbeat.
    #[arg(long, env = "LEASEHOLD_LEASE_TTL_MS", default_value_t = 120_000)]
    pub lease_ttl_ms: u64,
    /// Default time a parked job may wait without any capable runner online.
    #[arg(
        long,
        env = "LEASEHOLD_NO_RUNNER_TIMEOUT_MS",
        default_value_t = 300_000
    )]
    pub no_runner_timeout_ms: u64,
    /// A runner seen within this window is `online`.
    #[arg(long, env = "LEASEHOLD_PRESENCE_WINDOW_MS", default_value_t = 90_000)]
    pub presence_window_ms: u64,
    /// How often every replica sweeps lapsed leases and timeouts.
    #[arg(long, env = "LEASEHOLD_SWEEP_INTERVAL_MS", default_value_t = 1_000)]
    pub sweep_interval_ms: u64,
    /// Jobs settled longer ago than this many days are deleted, with their events and
    /// artifacts (contract v1.2, Retention). 0 keeps them forever.
    #[arg(long, env = "LEASEHOLD_RETENTION_DAYS", default_value_t = 30)]
    pub retention_days: u64,
    /// The retention window in milliseconds, for tests and operators who need it finer than
    /// days: when set it takes precedence over `LEASEHOLD_RETENTION_DAYS` (0 keeps forever).
    #[arg(long, env = "LEASEHOLD_RETENTION_MS")]
    pub retention_ms: Option<u64>,
    /// How often a replica looks for settled jobs past the retention window.
    #[arg(
        long,
        env = "LEASEHOLD_RETENTION_INTERVAL_MS",
        default_value_t = 60_000
    )]
    pub retention_interval_ms: u64,
    /// Upper clamp for every `wait_ms`.
    #[arg(long, env = "LEASEHOLD_MAX_WAIT_MS", default_value_t = 60_000)]
    pub max_wait_ms: u64,
    /// How often parked waiters are re-checked against the database in one query per replica,
    /// the bound on the delay a lost notification can cause.
    #[arg(long, env = "LEASEHOLD_RECHECK_INTERVAL_MS", default_value_t = 2_000)]
    pub recheck_interval_ms: u64,
    /// Largest request body accepted.
    #[arg(long, env = "LEASEHOLD_MAX_BODY_BYTES", default_value_t = 1_048_576)]
    pub max_body_bytes: usize,
    /// Rate limit for unauthenticated calls and failed authentications: bucket size.
    #[arg(long, env = "LEASEHOLD_AUTH_BURST", default_value_t = 30)]
    pub auth_burst: u32,
    /// Rate limit refill, tokens per second.
    #[arg(long, env = "LEASEHOLD_AUTH_REFILL_PER_S", default_value_t = 1.0)]
    pub auth_refill_per_s: f64,
    /// Comma-separated capability vocabulary; unset accepts any valid name.
    #[arg(long, env = "LEASEHOLD_CAPABILITY_VOCABULARY")]
    pub capability_vocabulary: Option<String>,
    /// Connections in this replica's pool (the LISTEN and notifier connections are extra).
    #[arg(long, env = "LEASEHOLD_POOL_SIZE", default_value_t = 16)]
    pub pool_size: usize,
    /// An ephemeral runner unseen this long is revoked by the sweeper.
    #[arg(
        long,
        env = "LEASEHOLD_EPHEMERAL_PURGE_MS",
        default_value_t = 86_400_000
    )]
    pub ephemeral_purge_ms: u64,
    /// Runners below this semver version are `outdated`: their lease calls answer 409
    /// `runner_outdated`. Unset accepts any version.
    #[arg(long, env = "LEASEHOLD_MIN_RUNNER_VERSION", value_parser = parse_min_version)]
    pub min_runner_version: Option<Version>,
    /// A runner unseen (or never seen since pairing) this long is revoked by the sweeper.
    #[arg(
        long,
        env = "LEASEHOLD_DORMANCY_CEILING_MS",
        default_value_t = 1_209_600_000
    )]
    pub dormancy_ceiling_ms: u64,
    /// Key that seals workspace secrets: 32 bytes in base64. Without it, secret writes and
    /// leases of jobs naming secrets answer 503.
    #[arg(
        long,
        env = "LEASEHOLD_SECRETS_KEY",
        hide_env_values = true,
        value_parser = SealKeyArg
    )]
    pub secrets_key: Option<SealKey>,
    /// The previous key during a rotation: still opens values, never seals new ones.
    #[arg(
        long,
        env = "LEASEHOLD_SECRETS_OLD_KEY",
        hide_env_values = true,
        value_parser = SealKeyArg
    )]
    pub secrets_old_key: Option<SealKey>,
    /// Load balancers trusted to name the client a request comes from (by a PROXY protocol
    /// header, or by the address they append to `X-Forwarded-For`): comma-separated addresses
    /// or CIDR blocks. Empty: every client is its TCP peer.
    #[arg(long, env = "LEASEHOLD_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: TrustedProxies,
    /// Read a PROXY protocol header (v1 or v2, HAProxy's `send-proxy-v2`) on every connection
    /// from a trusted proxy, and refuse such a connection without one. Other peers are their
    /// own client.
    #[arg(
        long,
        env = "LEASEHOLD_PROXY_PROTOCOL",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub proxy_protocol: bool,
    /// How often each replica counts parked and leased jobs for `/metrics` (one query).
    #[arg(long, env = "LEASEHOLD_METRICS_INTERVAL_MS", default_value_t = 15_000)]
    pub metrics_interval_ms: u64,
    /// Deadline of every call, and of every database operation a replica runs (a long-poll
    /// gets its `wait_ms` on top). Past it the call answers 503 `unavailable` with
    /// `Retry-After`, and the connection it was using is cancelled and discarded.
    #[arg(long, env = "LEASEHOLD_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// How long a call waits for a free pooled connection before it answers 503.
    #[arg(long, env = "LEASEHOLD_POOL_TIMEOUT_MS", default_value_t = 5_000)]
    pub pool_timeout_ms: u64,
    /// While the oldest snapshot the database keeps (a long analytics query, a replication
    /// slot) is at least this many transactions old, a claim reads each class of its queue
    /// (plain and constrained jobs) from where the last claim of it on this replica found the
    /// first one parked, not from the queue's head (docs/design.md, "Where a claim starts").
    /// 0: always. Its old name, `LEASEHOLD_CLAIM_BOUND_AGE` (`--claim-bound-age`), still works
    /// and says so once in the log.
    #[arg(
        long,
        env = "LEASEHOLD_CLAIM_PLACES_AGE",
        alias = "claim-bound-age",
        default_value_t = 5_000
    )]
    pub claim_places_age: u64,
    /// When that old snapshot ends (the horizon is younger than `claim_places_age` again), one
    /// replica vacuums the job table at once instead of leaving it to autovacuum's next turn
    /// (docs/operations.md). `false` leaves it to autovacuum.
    #[arg(
        long,
        env = "LEASEHOLD_VACUUM_AFTER_OLD_HORIZON",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub vacuum_after_old_horizon: bool,
    /// Claims that start from remembered places still read each queue from its head at least
    /// this often.
    #[arg(long, env = "LEASEHOLD_CLAIM_FULL_WALK_MS", default_value_t = 5_000)]
    pub claim_full_walk_ms: u64,
    /// A fault for drills and tests, never on by default: every Nth dispatcher tick panics after
    /// its transaction committed (its leases made, no answer sent), the worst moment for a tick
    /// to fail. 0: off.
    #[arg(
        long,
        env = "LEASEHOLD_FAULT_FAIL_TICKS",
        default_value_t = 0,
        hide = true
    )]
    pub fault_fail_ticks: u64,
    /// While the oldest snapshot is that old too, the lapsed-lease and no-runner sweeps read only
    /// the checks that fell due since the replica's last sweep (and five seconds before); they
    /// still read every due check at least this often.
    #[arg(long, env = "LEASEHOLD_SWEEP_FULL_WALK_MS", default_value_t = 30_000)]
    pub sweep_full_walk_ms: u64,
    /// Concurrent lease calls one runner token may hold open on one replica; beyond it a lease
    /// call answers 429 `rate_limited` with `Retry-After`, before any database work.
    #[arg(long, env = "LEASEHOLD_MAX_POLLS_PER_RUNNER", default_value_t = 16)]
    pub max_polls_per_runner: usize,
    /// A connection must send a whole request head within this long of its first byte (of
    /// being accepted, for its first request), else it is closed.
    #[arg(long, env = "LEASEHOLD_HEADER_TIMEOUT_MS", default_value_t = 30_000)]
    pub header_timeout_ms: u64,
    /// A keep-alive connection idle this long between requests is closed.
    #[arg(long, env = "LEASEHOLD_IDLE_TIMEOUT_MS", default_value_t = 75_000)]
    pub idle_timeout_ms: u64,
    /// An artifact upload or download that moves fewer than this many bytes in any window of
    /// `LEASEHOLD_TRANSFER_WINDOW_MS` is closed (v1.3; an upload's part is removed).
    #[arg(long, env = "LEASEHOLD_TRANSFER_MIN_BYTES", default_value_t = 65_536)]
    pub transfer_min_bytes: u64,
    /// The window of `LEASEHOLD_TRANSFER_MIN_BYTES` (the contract's 30 s; shorter in tests).
    #[arg(long, env = "LEASEHOLD_TRANSFER_WINDOW_MS", default_value_t = 30_000)]
    pub transfer_window_ms: u64,
    /// Artifact uploads one runner token may have running at once on one replica; past it an
    /// upload answers 429 `rate_limited` with `Retry-After`, before any database work.
    #[arg(long, env = "LEASEHOLD_MAX_TRANSFERS_PER_RUNNER", default_value_t = 16)]
    pub max_transfers_per_runner: usize,
    /// Artifact transfers (uploads and downloads) one replica runs at once; past it a transfer
    /// answers 429 `rate_limited` with `Retry-After`, before any database work.
    #[arg(long, env = "LEASEHOLD_MAX_TRANSFERS", default_value_t = 512)]
    pub max_transfers: usize,
    /// Open connections one replica holds at most; past it a new connection is closed at once.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", default_value_t = 20_000)]
    pub max_connections: usize,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key); re-read on SIGHUP.
    #[arg(
        long,
        env = "LEASEHOLD_TLS_CERT",
        requires = "tls_key",
        value_name = "PEM"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert; re-read with it on SIGHUP.
    #[arg(
        long,
        env = "LEASEHOLD_TLS_KEY",
        hide_env_values = true,
        requires = "tls_cert",
        value_name = "PEM"
    )]
    pub tls_key: Option<std::path::PathBuf>,
    /// The URLs runners reach this service at, comma-separated: join codes then come with a
    /// pasted `leasehold runner connect` payload.
    #[arg(
        long,
        env = "LEASEHOLD_PUBLIC_URL",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub public_url: Vec<String>,
    /// Where artifact bytes are kept: `postgres` (chunk rows in the service's database) or
    /// `s3://bucket/prefix` (an S3-compatible bucket, configured by the standard `AWS_*`
    /// variables). Metadata is in PostgreSQL either way.
    #[arg(
        long,
        env = "LEASEHOLD_ARTIFACT_STORE",
        hide_env_values = true,
        default_value = "postgres"
    )]
    pub artifact_store: String,
    /// Largest artifact a runner may upload, in bytes; a larger one is `413 too_large`.
    #[arg(
        long,
        env = "LEASEHOLD_ARTIFACT_MAX_BYTES",
        default_value_t = 1_073_741_824
    )]
    pub artifact_max_bytes: u64,
    /// Most artifact files a job holds over all its attempts (v1.3); an upload past it is
    /// `413 quota_exceeded`.
    #[arg(long, env = "LEASEHOLD_ARTIFACT_MAX_FILES", default_value_t = 1000)]
    pub artifact_max_files: u32,
    /// Most bytes of artifacts a job holds over all its attempts (v1.3); an upload past it is
    /// `413 quota_exceeded`.
    #[arg(
        long,
        env = "LEASEHOLD_ARTIFACT_JOB_MAX_BYTES",
        default_value_t = 10_737_418_240
    )]
    pub artifact_job_max_bytes: u64,
    /// Most bytes of artifacts a workspace holds over all its jobs (v1.3; unset: no bound); an
    /// upload past it is `413 quota_exceeded`.
    #[arg(long, env = "LEASEHOLD_ARTIFACT_WORKSPACE_MAX_BYTES")]
    pub artifact_workspace_max_bytes: Option<u64>,
    /// An upload whose replica has not touched it for this long (the replica died) is taken
    /// for dead and its partial bytes are deleted.
    #[arg(long, env = "LEASEHOLD_ARTIFACT_STALE_MS", default_value_t = 60_000)]
    pub artifact_stale_ms: u64,
    /// Webhook URLs may be `http` (v1.4; default: `https` only).
    #[arg(
        long,
        env = "LEASEHOLD_WEBHOOK_ALLOW_HTTP",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub webhook_allow_http: bool,
    /// Deliveries may connect to loopback, private, link-local and unspecified addresses
    /// (v1.4; default: refused at every connection).
    #[arg(
        long,
        env = "LEASEHOLD_WEBHOOK_ALLOW_PRIVATE",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub webhook_allow_private: bool,
    /// A delivery's try must get its answer within this long (the contract's 10 s).
    #[arg(long, env = "LEASEHOLD_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000)]
    pub webhook_timeout_ms: u64,
    /// First retry of a failed delivery after this long, doubling per try (the contract's 5 s).
    #[arg(
        long,
        env = "LEASEHOLD_WEBHOOK_RETRY_FIRST_MS",
        default_value_t = 5_000
    )]
    pub webhook_retry_first_ms: u64,
    /// The cap of that doubling delay (the contract's hour).
    #[arg(
        long,
        env = "LEASEHOLD_WEBHOOK_RETRY_CAP_MS",
        default_value_t = 3_600_000
    )]
    pub webhook_retry_cap_ms: u64,
    /// A delivery is retried this long after it was made, then it is `failed` (24 h).
    #[arg(
        long,
        env = "LEASEHOLD_WEBHOOK_RETRY_FOR_MS",
        default_value_t = 86_400_000
    )]
    pub webhook_retry_for_ms: u64,
    /// A webhook every try of whose deliveries failed for this long is disabled (24 h).
    #[arg(
        long,
        env = "LEASEHOLD_WEBHOOK_DISABLE_AFTER_MS",
        default_value_t = 86_400_000
    )]
    pub webhook_disable_after_ms: u64,
    /// How long a replica holds a delivery it is sending: another replica takes it over once
    /// this passes (the sender died). Longer than the timeout.
    #[arg(long, env = "LEASEHOLD_WEBHOOK_LEASE_MS", default_value_t = 30_000)]
    pub webhook_lease_ms: u64,
    /// How often a replica looks for due deliveries and new events without being woken.
    #[arg(long, env = "LEASEHOLD_WEBHOOK_POLL_MS", default_value_t = 1_000)]
    pub webhook_poll_ms: u64,
    /// Most deliveries of one webhook in flight at once, over every replica: a slow endpoint
    /// holds no more of the senders than this.
    #[arg(long, env = "LEASEHOLD_WEBHOOK_CONCURRENCY", default_value_t = 4)]
    pub webhook_concurrency: u32,
    /// A feed stream (server-sent events) sends a comment line at least this often (15 s).
    #[arg(long, env = "LEASEHOLD_FEED_KEEPALIVE_MS", default_value_t = 15_000)]
    pub feed_keepalive_ms: u64,
    /// Settings of the artifact bucket's client on top of the `AWS_*` environment, as
    /// `object_store` names them (`aws_endpoint`, `aws_allow_http`, ...): for an embedding
    /// process such as the tests, which cannot give each replica its own environment. Not a
    /// flag.
    #[arg(skip)]
    pub artifact_s3_options: Vec<(String, String)>,
}

/// Reads a [`SealKey`] flag or variable, and refuses a malformed one without quoting it:
/// clap's own refusal of a value repeats the value, and a key that is nearly right is nearly
/// the secret (issue 52 row 2).
#[derive(Debug, Clone, Copy)]
pub struct SealKeyArg;

impl clap::builder::TypedValueParser for SealKeyArg {
    type Value = SealKey;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<SealKey, clap::Error> {
        let parsed = value
            .to_str()
            .ok_or_else(|| "must be 32 bytes in base64".to_owned())
            .and_then(SealKey::from_str);
        parsed.map_err(|why| {
            let name = arg.map_or_else(|| "the key".to_owned(), ToString::to_string);
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("the value of '{name}' (not shown) is not a key: {why}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

fn parse_min_version(s: &str) -> Result<Version, String> {
    version::parse(s).ok_or_else(|| format!("'{s}' is not a semver version such as 1.4.0"))
}

/// Settings renamed since a release: (old environment name, new one). The old name still sets
/// the value when the new one is not set, and says so once in the log.
pub const RENAMED_SETTINGS: &[(&str, &str)] =
    &[("LEASEHOLD_CLAIM_BOUND_AGE", "LEASEHOLD_CLAIM_PLACES_AGE")];

impl Config {
    /// Apply the old names of renamed settings ([`RENAMED_SETTINGS`]) found in `env` where the
    /// new name is absent, logging each once. Called by `serve` after parsing.
    pub fn apply_renamed(&mut self, env: impl Fn(&str) -> Option<String>) {
        for (old, new) in RENAMED_SETTINGS {
            let Some(value) = env(old) else { continue };
            if env(new).is_some() {
                tracing::warn!(
                    old,
                    new,
                    "both names of a renamed setting are set; the new one wins"
                );
                continue;
            }
            match (*new, value.parse::<u64>()) {
                ("LEASEHOLD_CLAIM_PLACES_AGE", Ok(v)) => self.claim_places_age = v,
                _ => {
                    tracing::warn!(
                        old,
                        new,
                        "the old name of a setting has a value that is not a number; ignored"
                    );
                    continue;
                }
            }
            tracing::warn!(
                old,
                new,
                "a setting was renamed; the old name still works, use the new one"
            );
        }
    }

    /// A configuration for the given database with every other field at the default of its
    /// `leasehold serve` flag (the contract's), which is the one place each default is
    /// written; the environment is not read.
    pub fn new(database_url: impl Into<String>) -> Self {
        let flags =
            Self::augment_args(clap::Command::new("defaults")).mut_args(|arg| arg.env(None));
        let matches = flags
            .try_get_matches_from(["defaults", "--database-url="])
            .expect("every flag but --database-url has a default");
        let mut config = Self::from_arg_matches(&matches).expect("the defaults parse");
        config.database_url = database_url.into();
        config
    }

    /// The sealer of workspace secrets, when a key is configured.
    pub fn sealer(&self) -> Option<Sealer> {
        self.secrets_key
            .as_ref()
            .map(|k| Sealer::new(k, self.secrets_old_key.as_ref()))
    }

    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }

    pub fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.sweep_interval_ms.max(10))
    }

    /// How long settled jobs are kept; `None`: forever.
    pub fn retention(&self) -> Option<Duration> {
        let ms = self
            .retention_ms
            .unwrap_or(self.retention_days.saturating_mul(86_400_000));
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    pub fn retention_interval(&self) -> Duration {
        Duration::from_millis(self.retention_interval_ms.max(10))
    }

    pub fn recheck_interval(&self) -> Duration {
        Duration::from_millis(self.recheck_interval_ms.max(10))
    }

    pub fn metrics_interval(&self) -> Duration {
        Duration::from_millis(self.metrics_interval_ms.max(10))
    }

    /// See [`Config::request_timeout_ms`].
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.max(1))
    }

    /// See [`Config::header_timeout_ms`].
    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms.max(1))
    }

    /// See [`Config::idle_timeout_ms`].
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms.max(1))
    }

    /// See [`Config::pool_timeout_ms`].
    pub fn pool_timeout(&self) -> Duration {
        Duration::from_millis(self.pool_timeout_ms.max(1))
    }

    /// See [`Config::claim_full_walk_ms`].
    pub fn claim_full_walk(&self) -> Duration {
        Duration::from_millis(self.claim_full_walk_ms)
    }

    /// See [`Config::sweep_full_walk_ms`].
    pub fn sweep_full_walk(&self) -> Duration {
        Duration::from_millis(self.sweep_full_walk_ms)
    }

    /// A replica holding a runner's long-poll refreshes its `last_seen_at` this often, a third
    /// of the presence window, so a long-polling runner is `online` everywhere.
    pub fn presence_refresh(&self) -> Duration {
        Duration::from_millis((self.presence_window_ms / 3).max(10))
    }
}

/// The addresses of `LEASEHOLD_TRUSTED_PROXIES`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// `ip` (an IPv4-mapped IPv6 address as its IPv4 self) is one of them.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for TrustedProxies {
    type Err = String;

    /// `10.0.0.5, 10.1.0.0/16, fd00::/8`: addresses or CIDR blocks, comma-separated.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| {
                IpNet::from_str(part)
                    .or_else(|_| IpAddr::from_str(part).map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| format!("'{part}' is neither an IP address nor a CIDR block"))
            })
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults PROTOCOL.md "Starting it" names, as `Config::new` takes them from the flags.
    #[test]
    fn new_has_the_contracts_defaults_and_the_given_database() {
        let c = Config::new("postgres://db/leasehold");
        assert_eq!(c.database_url, "postgres://db/leasehold");
        assert_eq!(c.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            (
                c.lease_ttl_ms,
                c.no_runner_timeout_ms,
                c.presence_window_ms,
                c.sweep_interval_ms,
                c.max_wait_ms,
                c.dormancy_ceiling_ms,
            ),
            (120_000, 300_000, 90_000, 1_000, 60_000, 1_209_600_000)
        );
        assert!(c.min_runner_version.is_none() && c.secrets_key.is_none());
        assert!(c.trusted_proxies.is_empty() && !c.proxy_protocol);
        assert!(c.public_url.is_empty() && c.tls_cert.is_none());
        assert_eq!(Config::new("").database_url, "");
    }

    #[test]
    fn trusted_proxies_are_addresses_or_blocks() {
        let t: TrustedProxies = " 10.0.0.5, 192.168.0.0/16,fd00::/8 ".parse().unwrap();
        assert!(t.contains("10.0.0.5".parse().unwrap()));
        assert!(!t.contains("10.0.0.6".parse().unwrap()));
        assert!(t.contains("192.168.200.1".parse().unwrap()));
        assert!(
            t.contains("::ffff:192.168.1.1".parse().unwrap()),
            "IPv4-mapped"
        );
        assert!(t.contains("fd00::1".parse().unwrap()));
        assert!(!t.contains("::1".parse().unwrap()));
        assert!("".parse::<TrustedProxies>().unwrap().is_empty());
        assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
        assert!("balancer".parse::<TrustedProxies>().is_err());
    }
}
