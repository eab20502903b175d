//! The claim against a model: random fixtures (runners with capabilities, exclusive sets,
//! approved and pending repository targets, personal and workspace tiers, capacities; jobs
//! named, pooled, `any`, constrained, with priorities, `not_before` past or future, and
//! workspace-secret needs) leased through the real SQL on a real PostgreSQL (`Store::lease`,
//! so the statement the replica chooses: plain or general runner, from the head or from
//! remembered places, with or without an old snapshot held) and through a small model of the
//! contract's placement rules (PROTOCOL.md, "A lease call takes"). The two must agree on which
//! jobs each lease takes and which named jobs it rejects.
//!
//! The model's rules: a lease takes at most `min(max_jobs, capacity - held)`; jobs named for
//! the runner first (a named job it cannot run is rejected, whatever its `not_before`), then
//! its pool (its owner's jobs in its workspace; for a workspace runner also the workspace's
//! `any` jobs), skipping what it cannot run (`capabilities::unfit`, which the `fits` tests
//! hold equal to SQL's `job_fits()`) and what is not yet due; highest priority first, then FIFO
//! by id.
//!
//! Each seed is reproducible; a failing one is printed (`CLAIM_MODEL_SEED=n` runs just it).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use leasehold::domain::capabilities::{unfit, JobNeeds, RunnerOffers};
use leasehold::store::lease::Advertised;
use leasehold::store::records::LeaseIdentity;
use leasehold::store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use crate::support::{connect, fresh_database, hold_snapshot};

const NAMES: &[&str] = &["linux", "docker", "gpu"];
const SOURCES: &[(&str, &str)] = &[("github", "acme/api"), ("github", "acme/web")];
const SUBJECTS: &[&str] = &["alice", "bob"];
const WORKSPACE: &str = "acme";
const SEEDS: u64 = 12;
const ROUNDS: usize = 60;

/// A runner of the fixture, as the model knows it.
#[derive(Debug, Clone)]
struct Runner {
    id: Uuid,
    token_hash: Vec<u8>,
    /// A subject (personal) or `ws:acme` (workspace).
    owner: String,
    capabilities: Vec<String>,
    exclusive: Vec<String>,
    /// Source keys of its approved targets.
    sources: Vec<String>,
    capacity: i64,
}

impl Runner {
    fn workspace_runner(&self) -> bool {
        self.owner.starts_with("ws:")
    }

    fn fits(&self, job: &Job) -> bool {
        let needs = JobNeeds {
            required: &job.required,
            source_key: job.source_key.as_deref(),
            needs_workspace_runner: job.needs_workspace_runner,
        };
        let offers = RunnerOffers {
            capabilities: &self.capabilities,
            exclusive: &self.exclusive,
            sources: &self.sources,
            workspace_runner: self.workspace_runner(),
        };
        unfit(&needs, &offers).is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Parked,
    Leased(Uuid),
    Settled,
}

/// A job of the fixture, as the model knows it.
#[derive(Debug, Clone)]
struct Job {
    id: Uuid,
    owner: String,
    /// Named for this runner.
    runner_id: Option<Uuid>,
    /// 'personal', 'workspace', 'any', or None for a named job.
    pool: Option<&'static str>,
    required: Vec<String>,
    source_key: Option<String>,
    needs_workspace_runner: bool,
    priority: i32,
    /// Not leasable yet (`not_before` an hour ahead); a past `not_before` is due.
    waiting: bool,
    state: State,
}

/// The model of one lease: (taken, rejected), each sorted.
fn model_lease(r: &Runner, jobs: &[Job], max_jobs: i64) -> (Vec<Uuid>, Vec<Uuid>) {
    let held = jobs
        .iter()
        .filter(|j| j.state == State::Leased(r.id))
        .count() as i64;
    let free = max_jobs.min(r.capacity - held).max(0) as usize;
    let parked = |j: &&Job| j.state == State::Parked;
    let by_order = |a: &&Job, b: &&Job| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id));
    let named: Vec<&Job> = jobs
        .iter()
        .filter(parked)
        .filter(|j| j.runner_id == Some(r.id))
        .collect();
    let rejected: BTreeSet<Uuid> = named.iter().filter(|j| !r.fits(j)).map(|j| j.id).collect();
    let mut take: Vec<&Job> = named
        .into_iter()
        .filter(|j| r.fits(j) && !j.waiting)
        .collect();
    take.sort_by(by_order);
    take.truncate(free);
    let mut pool: Vec<&Job> = jobs
        .iter()
        .filter(parked)
        .filter(|j| j.runner_id.is_none() && !j.waiting && r.fits(j))
        .filter(|j| j.owner == r.owner || (r.workspace_runner() && j.pool == Some("any")))
        .collect();
    pool.sort_by(by_order);
    let rest = free - take.len();
    take.extend(pool.into_iter().take(rest));
    let mut taken: Vec<Uuid> = take.iter().map(|j| j.id).collect();
    taken.sort();
    (taken, rejected.into_iter().collect())
}

fn subset(rng: &mut StdRng, from: &[&str], p: f64) -> Vec<String> {
    from.iter()
        .filter(|_| rng.random_bool(p))
        .map(|s| (*s).to_owned())
        .collect()
}

fn source_key((provider, repository): (&str, &str)) -> String {
    format!("{provider} {repository}")
}

fn random_runner(rng: &mut StdRng) -> Runner {
    let owner = if rng.random_bool(0.5) {
        format!("ws:{WORKSPACE}")
    } else {
        SUBJECTS[rng.random_range(0..SUBJECTS.len())].to_owned()
    };
    // About half the runners are plain (no capability, no approved target).
    let plain = rng.random_bool(0.5);
    let capabilities = if plain {
        Vec::new()
    } else {
        subset(rng, NAMES, 0.5)
    };
    let exclusive = if !capabilities.is_empty() && rng.random_bool(0.25) {
        vec![capabilities[rng.random_range(0..capabilities.len())].clone()]
    } else {
        Vec::new()
    };
    let sources = if plain || rng.random_bool(0.5) {
        Vec::new()
    } else {
        vec![source_key(SOURCES[rng.random_range(0..SOURCES.len())])]
    };
    Runner {
        id: Uuid::from_u128(rng.random()),
        token_hash: rng.random::<[u8; 32]>().to_vec(),
        owner,
        capabilities,
        exclusive,
        sources,
        capacity: rng.random_range(1..=4),
    }
}

fn random_job(rng: &mut StdRng, runners: &[Runner]) -> Job {
    let subject = SUBJECTS[rng.random_range(0..SUBJECTS.len())];
    let (owner, runner_id, pool) = match rng.random_range(0..10) {
        0..=1 => {
            let r = &runners[rng.random_range(0..runners.len())];
            (r.owner.clone(), Some(r.id), None)
        }
        2..=4 => (subject.to_owned(), None, Some("personal")),
        5..=7 => (format!("ws:{WORKSPACE}"), None, Some("workspace")),
        _ => (subject.to_owned(), None, Some("any")),
    };
    // Mostly plain jobs, as in life; a constrained one requires a capability or a source.
    let constrained = rng.random_bool(0.35);
    Job {
        id: Uuid::from_u128(rng.random()),
        owner,
        runner_id,
        pool,
        required: if constrained {
            subset(rng, NAMES, 0.4)
        } else {
            Vec::new()
        },
        source_key: (constrained && rng.random_bool(0.4))
            .then(|| source_key(SOURCES[rng.random_range(0..SOURCES.len())])),
        needs_workspace_runner: rng.random_bool(0.15),
        priority: [-5, 0, 0, 0, 3][rng.random_range(0..5)],
        waiting: rng.random_bool(0.15),
        state: State::Parked,
    }
}

async fn insert_runner(db: &tokio_postgres::Client, r: &Runner, pending: Option<String>) {
    db.execute(
        "INSERT INTO runners (id, owner, workspace, label, capabilities, exclusive, capacity,
                              token_hash, approved_by)
         VALUES ($1, $2, $3, 'model', $4, $5, $6, $7, 'admin')",
        &[
            &r.id,
            &r.owner,
            &WORKSPACE,
            &r.capabilities,
            &r.exclusive,
            &(r.capacity as i32),
            &r.token_hash,
        ],
    )
    .await
    .unwrap();
    let targets = r
        .sources
        .iter()
        .map(|s| (s, "approved"))
        .chain(pending.iter().map(|s| (s, "pending")));
    for (key, status) in targets {
        insert_target(db, r.id, key, status).await;
    }
}

async fn insert_target(db: &tokio_postgres::Client, runner: Uuid, key: &str, status: &str) {
    let (provider, repository) = key.split_once(' ').unwrap();
    db.execute(
        "INSERT INTO runner_repo_targets (id, runner_id, provider, repository, status)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (runner_id, provider, repository) DO UPDATE SET status = $5",
        &[&Uuid::now_v7(), &runner, &provider, &repository, &status],
    )
    .await
    .unwrap();
}

async fn insert_job(db: &tokio_postgres::Client, j: &Job) {
    db.execute(
        "INSERT INTO jobs (id, workspace, owner, runner_id, pool, state, kind, payload,
                           required_capabilities, priority, max_attempts, no_runner_timeout_ms,
                           no_runner_check_at, source_key, needs_workspace_runner, not_before,
                           event_seq)
         VALUES ($1, $2, $3, $4, $5, 'parked', 'command', 'null', $6, $7, 3, 3600000,
                 now() + interval '1 hour', $8, $9,
                 CASE WHEN $10 THEN now() + interval '1 hour'
                      ELSE now() - interval '1 second' END, 1)",
        &[
            &j.id,
            &WORKSPACE,
            &j.owner,
            &j.runner_id,
            &j.pool,
            &j.required,
            &j.priority,
            &j.source_key,
            &j.needs_workspace_runner,
            &j.waiting,
        ],
    )
    .await
    .unwrap();
}

/// Which of the claim's shapes a run went through: (plain runner, from remembered places).
type Shapes = HashMap<(bool, bool), usize>;

async fn run_seed(seed: u64, shapes: &mut Shapes) {
    let mut rng = StdRng::seed_from_u64(seed);
    let url = fresh_database().await;
    let db = connect(&url).await;
    // Claims from the head, and claims that always start from remembered places (read from the
    // head at most once an hour).
    let heads = Store::connect(&url, 2, 60_000)
        .unwrap()
        .with_claim_bounds(u64::MAX, Duration::from_secs(3600));
    let places = Store::connect(&url, 2, 60_000)
        .unwrap()
        .with_claim_bounds(0, Duration::from_secs(3600));
    // An old snapshot, held for the whole run, so that the entries of jobs taken stay.
    let mut analytics = connect(&url).await;
    let held = rng.random_bool(0.5);
    let snapshot = if held {
        Some(hold_snapshot(&mut analytics, "SELECT count(*) FROM jobs").await)
    } else {
        None
    };

    let mut runners: Vec<Runner> = (0..rng.random_range(2..=5))
        .map(|_| random_runner(&mut rng))
        .collect();
    for r in &runners {
        let pending = rng
            .random_bool(0.3)
            .then(|| source_key(SOURCES[rng.random_range(0..SOURCES.len())]))
            .filter(|k| !r.sources.contains(k));
        insert_runner(&db, r, pending).await;
    }
    let mut jobs: Vec<Job> = Vec::new();
    for _ in 0..rng.random_range(10..30) {
        let j = random_job(&mut rng, &runners);
        insert_job(&db, &j).await;
        jobs.push(j);
    }
    // What each store believes of each runner: unknown until its first lease there.
    let mut known: HashMap<(bool, Uuid), LeaseIdentity> = HashMap::new();

    for round in 0..ROUNDS {
        match rng.random_range(0..10) {
            // New jobs, some of them ahead of places already remembered.
            0 => {
                for _ in 0..rng.random_range(1..4) {
                    let j = random_job(&mut rng, &runners);
                    insert_job(&db, &j).await;
                    jobs.push(j);
                }
            }
            // A leased job settles, or goes back to parked behind the places.
            1 => {
                let leased: Vec<usize> = (0..jobs.len())
                    .filter(|&i| matches!(jobs[i].state, State::Leased(_)))
                    .collect();
                if !leased.is_empty() {
                    let i = leased[rng.random_range(0..leased.len())];
                    let back = rng.random_bool(0.5);
                    db.execute(
                        "UPDATE jobs SET state = CASE WHEN $2 THEN 'parked' ELSE 'completed' END,
                                         finished_at = CASE WHEN $2 THEN NULL ELSE now() END,
                                         parked_xid = pg_current_xact_id(),
                                         leased_by = NULL, lease_expires_at = NULL
                          WHERE id = $1",
                        &[&jobs[i].id, &back],
                    )
                    .await
                    .unwrap();
                    jobs[i].state = if back { State::Parked } else { State::Settled };
                }
            }
            // A runner is approved a repository target (a plain one stops being plain).
            2 => {
                let i = rng.random_range(0..runners.len());
                let key = source_key(SOURCES[rng.random_range(0..SOURCES.len())]);
                insert_target(&db, runners[i].id, &key, "approved").await;
                if !runners[i].sources.contains(&key) {
                    runners[i].sources.push(key);
                }
            }
            _ => {}
        }
        let r = runners[rng.random_range(0..runners.len())].clone();
        let max_jobs = rng.random_range(1..=3);
        let from_places = rng.random_bool(0.5);
        let store = if from_places { &places } else { &heads };
        let me = known.get(&(from_places, r.id)).cloned();
        let out = store
            .lease(
                &r.token_hash,
                &Advertised::default(),
                me.as_ref(),
                max_jobs,
                600_000,
                false,
                &[],
            )
            .await
            .unwrap();
        if let Some(me) = &me {
            *shapes.entry((me.plain, from_places)).or_default() += 1;
        }
        if let Some(identity) = out.runner.clone() {
            known.insert((from_places, r.id), identity);
        }
        let (want, want_rejected) = model_lease(&r, &jobs, max_jobs);
        let mut got: Vec<Uuid> = out.claimed.iter().map(|c| c.id).collect();
        got.sort();
        let mut got_rejected = out.rejected.clone();
        got_rejected.sort();
        let show = |ids: &[Uuid]| {
            ids.iter()
                .map(|id| format!("{:?}", jobs.iter().find(|j| j.id == *id)))
                .collect::<Vec<_>>()
                .join("\n    ")
        };
        assert!(
            got == want && got_rejected == want_rejected,
            "seed {seed} round {round} (snapshot held: {held}, from places: {from_places}, \
             known as {me:?}):\nrunner {r:?}, max_jobs {max_jobs}\n\
             SQL took:\n    {}\nthe model takes:\n    {}\n\
             SQL rejected {got_rejected:?}, the model {want_rejected:?}",
            show(&got),
            show(&want)
        );
        for j in &mut jobs {
            if want.contains(&j.id) {
                j.state = State::Leased(r.id);
            } else if want_rejected.contains(&j.id) {
                j.state = State::Settled;
            }
        }
    }
    if let Some(s) = snapshot {
        s.commit().await.unwrap();
    }
}

#[tokio::test]
async fn the_claim_takes_what_the_placement_model_takes() {
    let seeds: Vec<u64> = match std::env::var("CLAIM_MODEL_SEED") {
        Ok(s) => vec![s.parse().expect("CLAIM_MODEL_SEED: a number")],
        Err(_) => (1..=SEEDS).collect(),
    };
    let mut shapes = Shapes::new();
    for seed in &seeds {
        run_seed(*seed, &mut shapes).await;
    }
    if seeds.len() > 1 {
        // Every claim shape was exercised: plain and general runners, from the head and from
        // remembered places.
        for plain in [false, true] {
            for from_places in [false, true] {
                assert!(
                    shapes.get(&(plain, from_places)).copied().unwrap_or(0) > 10,
                    "too few claims of shape plain={plain} from_places={from_places}: {shapes:?}"
                );
            }
        }
    }
}
