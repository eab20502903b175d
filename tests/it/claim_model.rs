//! The claim against a model: random fixtures (runners with capabilities, exclusive sets,
//! approved and pending repository targets, personal and workspace tiers, capacities; jobs
//! named, pooled, `any`, constrained, with priorities, `not_before` past or future, and
//! workspace-secret needs) claimed through the real SQL on a real PostgreSQL (`Store::tick`, as
//! a dispatcher claims: for several runners of one class at once, from each lane's head or
//! from the places the claims before answered, kept as hub::dispatcher keeps them, with or
//! without an old snapshot held) and through a small model of the contract's placement rules
//! (PROTOCOL.md, "A lease call takes"). The two must agree on which jobs each runner takes and
//! which named jobs are rejected.
//!
//! The model's rules: a runner takes at most `min(wanted, capacity - held)`; jobs named for it
//! first (a named job it cannot run is rejected, whatever its `not_before`), then its pool (its
//! owner's jobs in its workspace; for a workspace runner also the workspace's `any` jobs),
//! skipping what it cannot run (`capabilities::unfit`, which the `fits` tests hold equal to
//! SQL's `job_fits()`) and what is not yet due; highest priority first, then FIFO by id. The
//! pool's jobs go to the claim's runners round-robin: every runner's first free slot in the
//! order they began to wait, then every second one.
//!
//! Each seed is reproducible; a failing one is printed (`CLAIM_MODEL_SEED=n` runs just it).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use leasehold::domain::capabilities::{unfit, JobNeeds, RunnerOffers};
use leasehold::store::claim::{ClassClaim, Place};
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

/// The model of one claim for runners of one class, each with what it wants: what each takes
/// (sorted), and the named jobs rejected (sorted).
fn model_claim(class: &[(&Runner, i64)], jobs: &[Job]) -> (Vec<Vec<Uuid>>, Vec<Uuid>) {
    let parked = |j: &&Job| j.state == State::Parked;
    let by_order = |a: &&Job, b: &&Job| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id));
    let mut rejected = BTreeSet::new();
    let mut taken: Vec<Vec<Uuid>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for (r, want) in class {
        let held = jobs
            .iter()
            .filter(|j| j.state == State::Leased(r.id))
            .count() as i64;
        let named: Vec<&Job> = jobs
            .iter()
            .filter(parked)
            .filter(|j| j.runner_id == Some(r.id))
            .collect();
        rejected.extend(named.iter().filter(|j| !r.fits(j)).map(|j| j.id));
        let mut mine: Vec<&Job> = named
            .into_iter()
            .filter(|j| r.fits(j) && !j.waiting)
            .collect();
        mine.sort_by(by_order);
        let f = (*want).min(r.capacity - held).max(0) as usize;
        mine.truncate(f);
        free.push(f - mine.len());
        taken.push(mine.iter().map(|j| j.id).collect());
    }
    // The class's pool, in order, handed out round-robin.
    let r = class[0].0;
    let mut pool: Vec<&Job> = jobs
        .iter()
        .filter(parked)
        .filter(|j| j.runner_id.is_none() && !j.waiting && r.fits(j))
        .filter(|j| j.owner == r.owner || (r.workspace_runner() && j.pool == Some("any")))
        .collect();
    pool.sort_by(by_order);
    let mut pool = pool.into_iter();
    for round in 0.. {
        let mut any = false;
        for (i, f) in free.iter().enumerate() {
            if round < *f {
                any = true;
                if let Some(j) = pool.next() {
                    taken[i].push(j.id);
                }
            }
        }
        if !any {
            break;
        }
    }
    for t in &mut taken {
        t.sort();
    }
    (taken, rejected.into_iter().collect())
}

/// What a runner advertises: runners that advertise the same (and have one owner) are claimed
/// for together.
fn class_of(r: &Runner) -> (String, Vec<String>, Vec<String>, Vec<String>) {
    let mut caps = r.capabilities.clone();
    caps.sort();
    let mut exclusive = r.exclusive.clone();
    exclusive.sort();
    let mut sources = r.sources.clone();
    sources.sort();
    (r.owner.clone(), caps, exclusive, sources)
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
    // As a runner's row always holds them (domain::capabilities: sorted, de-duplicated).
    let (_, capabilities, exclusive, _) = class_of(r);
    db.execute(
        "INSERT INTO runners (id, owner, workspace, label, capabilities, exclusive, capacity,
                              token_hash, approved_by)
         VALUES ($1, $2, $3, 'model', $4, $5, $6, $7, 'admin')",
        &[
            &r.id,
            &r.owner,
            &WORKSPACE,
            &capabilities,
            &exclusive,
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

/// Which of the claim's shapes a run went through: (plain class, several runners, from places).
type Shapes = HashMap<(bool, bool, bool), usize>;

async fn run_seed(seed: u64, shapes: &mut Shapes) {
    let mut rng = StdRng::seed_from_u64(seed);
    let url = fresh_database().await;
    let db = connect(&url).await;
    let store = Store::connect(&url, 2, 60_000).unwrap();
    // An old snapshot, held for the whole run, so that the entries of jobs taken stay.
    let mut analytics = connect(&url).await;
    let held = rng.random_bool(0.5);
    let snapshot = if held {
        Some(hold_snapshot(&mut analytics, "SELECT count(*) FROM jobs").await)
    } else {
        None
    };

    let mut runners: Vec<Runner> = (0..rng.random_range(2..=6))
        .map(|_| random_runner(&mut rng))
        .collect();
    // Some runners share a class: a copy of another one's owner and what it advertises.
    for _ in 0..rng.random_range(0..=3) {
        let mut twin = runners[rng.random_range(0..runners.len())].clone();
        twin.id = Uuid::from_u128(rng.random());
        twin.token_hash = rng.random::<[u8; 32]>().to_vec();
        twin.capacity = rng.random_range(1..=4);
        runners.push(twin);
    }
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
    // Where each class's claims start (from places: as the dispatcher keeps them), and where
    // each runner's leases are counted from (the claims' answers).
    type Class = (String, Vec<String>, Vec<String>, Vec<String>);
    let mut places: HashMap<(Class, usize), Place> = HashMap::new();
    let mut since: HashMap<Uuid, Option<DateTime<Utc>>> = HashMap::new();
    // A job parked again moves every place of its pool back to it (the dispatcher hears of
    // every park before a place; tests/it/claim_start.rs holds that for real).
    let park_back = |places: &mut HashMap<(Class, usize), Place>, j: &Job| {
        for p in places.values_mut() {
            *p = (*p).min(Place::of(j.priority, j.id));
        }
    };

    for round in 0..ROUNDS {
        match rng.random_range(0..10) {
            // New jobs, some of them ahead of places already remembered.
            0 => {
                for _ in 0..rng.random_range(1..4) {
                    let j = random_job(&mut rng, &runners);
                    insert_job(&db, &j).await;
                    park_back(&mut places, &j);
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
                                         leased_by = NULL, lease_expires_at = NULL
                          WHERE id = $1",
                        &[&jobs[i].id, &back],
                    )
                    .await
                    .unwrap();
                    jobs[i].state = if back { State::Parked } else { State::Settled };
                    if back {
                        park_back(&mut places, &jobs[i]);
                    }
                }
            }
            // A runner is approved a repository target (it moves to another class).
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
        // The waiting runners of one class, in the order they began to wait, each wanting
        // 1..=3 jobs.
        let class = class_of(&runners[rng.random_range(0..runners.len())]);
        let mut waiting: Vec<(&Runner, i64)> = Vec::new();
        for r in runners.iter().filter(|r| class_of(r) == class) {
            if rng.random_bool(0.7) {
                waiting.push((r, rng.random_range(1..=3)));
            }
        }
        if waiting.is_empty() {
            let r = runners.iter().find(|r| class_of(r) == class).unwrap();
            waiting.push((r, 1));
        }
        for i in (1..waiting.len()).rev() {
            waiting.swap(i, rng.random_range(0..=i));
        }
        let from_places = rng.random_bool(0.5);
        let ws = class.0.starts_with("ws:");
        let claim = ClassClaim {
            workspace: WORKSPACE.into(),
            owner: class.0.clone(),
            capabilities: class.1.clone(),
            exclusive: class.2.clone(),
            sources: class.3.clone(),
            runners: waiting.iter().map(|(r, _)| r.id).collect(),
            wants: waiting.iter().map(|(_, w)| *w as i32).collect(),
            since: waiting
                .iter()
                .map(|(r, _)| since.get(&r.id).copied().flatten())
                .collect(),
            named: waiting.iter().map(|_| true).collect(),
            starts: std::array::from_fn(|slot| {
                if from_places {
                    places
                        .get(&(class.clone(), slot))
                        .copied()
                        .unwrap_or(Place::HEAD)
                } else {
                    Place::HEAD
                }
            }),
            places: true,
        };
        let out = store.tick(&[], &[claim], 600_000).await.unwrap();
        let outcome = &out.claims[0];
        let unfit: Vec<Uuid> = outcome
            .runners
            .iter()
            .filter(|r| r.unfit_named)
            .map(|r| r.id)
            .collect();
        let mut got_rejected = if unfit.is_empty() {
            Vec::new()
        } else {
            store.reject_unfit(&unfit).await.unwrap()
        };
        got_rejected.sort();
        *shapes
            .entry((
                class.1.is_empty() && class.3.is_empty(),
                waiting.len() > 1,
                from_places,
            ))
            .or_default() += 1;
        let (want, want_rejected) = model_claim(&waiting, &jobs);
        let got: Vec<Vec<Uuid>> = waiting
            .iter()
            .map(|(r, _)| {
                let mut ids: Vec<Uuid> = outcome
                    .runners
                    .iter()
                    .filter(|rc| rc.id == r.id)
                    .flat_map(|rc| rc.claimed.iter().map(|c| c.id))
                    .collect();
                ids.sort();
                ids
            })
            .collect();
        let show = |ids: &[Uuid]| {
            ids.iter()
                .map(|id| format!("{:?}", jobs.iter().find(|j| j.id == *id)))
                .collect::<Vec<_>>()
                .join("\n    ")
        };
        assert!(
            got == want && got_rejected == want_rejected,
            "seed {seed} round {round} (snapshot held: {held}, from places: {from_places}):\n\
             runners {waiting:?}\ngot {got:?} want {want:?}\nSQL took:\n    {}\nthe model takes:\n    {}\n\
             SQL rejected {got_rejected:?}, the model {want_rejected:?}",
            show(&got.concat()),
            show(&want.concat())
        );
        for rc in &outcome.runners {
            since.insert(rc.id, rc.leases_since);
        }
        for (slot, next) in outcome.next_starts(ws).into_iter().enumerate() {
            if let Some(next) = next {
                places.insert((class.clone(), slot), next);
            }
        }
        for ((r, _), mine) in waiting.iter().zip(&want) {
            for j in &mut jobs {
                if mine.contains(&j.id) {
                    j.state = State::Leased(r.id);
                }
            }
        }
        for j in &mut jobs {
            if want_rejected.contains(&j.id) {
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
        // Every claim shape was exercised: plain and constrained classes, one runner and
        // several, from the heads and from places.
        for plain in [false, true] {
            for several in [false, true] {
                for from_places in [false, true] {
                    assert!(
                        shapes
                            .get(&(plain, several, from_places))
                            .copied()
                            .unwrap_or(0)
                            > 5,
                        "too few claims of shape plain={plain} several={several} \
                         from_places={from_places}: {shapes:?}"
                    );
                }
            }
        }
    }
}

/// Where a job waits is decided twice, once in SQL (migration 0040's `job_lane` and
/// `job_any_lane`, what the claim reads) and once in Rust (`Lane::of`, what a park wakes): on
/// random jobs the two agree.
#[tokio::test]
async fn rust_and_sql_place_a_parked_job_in_the_same_lanes() {
    use leasehold::store::claim::Lane;
    use leasehold::store::records::Queue;
    let mut rng = StdRng::seed_from_u64(48);
    let url = fresh_database().await;
    let db = connect(&url).await;
    let runners: Vec<Runner> = (0..4).map(|_| random_runner(&mut rng)).collect();
    for _ in 0..300 {
        let j = random_job(&mut rng, &runners);
        insert_job(&db, &j).await;
        let row = db
            .query_one(
                "SELECT job_lane(workspace, owner, runner_id, pool, needs_workspace_runner,
                                 required_capabilities, source_key),
                        CASE WHEN pool = 'any' AND NOT needs_workspace_runner
                             THEN job_any_lane(workspace, required_capabilities, source_key) END
                   FROM jobs WHERE id = $1",
                &[&j.id],
            )
            .await
            .unwrap();
        let mut sql: Vec<String> = [row.get::<_, Option<String>>(0), row.get(1)]
            .into_iter()
            .flatten()
            .filter(|k| Lane::parse(k).is_some())
            .collect();
        sql.sort();
        let mut rust: Vec<String> = Lane::of(&Queue {
            workspace: WORKSPACE.into(),
            owner: j.owner.clone(),
            runner_id: j.runner_id,
            pool: j.pool.map(str::to_owned),
            needs_workspace_runner: j.needs_workspace_runner,
            constrained: Some(!j.required.is_empty() || j.source_key.is_some()),
            priority: Some(j.priority),
        })
        .iter()
        .map(Lane::key)
        .collect();
        rust.sort();
        assert_eq!(rust, sql, "{j:?}");
    }
}

/// More than a lane scan's page of unfit work ahead of a fitting job (issue 51, v1.4 "No class
/// starves"): 1,200 parked `gpu` jobs of the workspace pool, then one `arm64` job and one that
/// needs both. A claim for an exclusive `arm64` class takes its job, whatever is ahead; one for
/// a `gpu`+`arm64` class takes in the pool's order (the `gpu` jobs first), as the model does.
#[tokio::test]
async fn a_claim_takes_what_it_can_run_behind_1200_it_cannot() {
    let url = fresh_database().await;
    let db = connect(&url).await;
    let store = Store::connect(&url, 2, 60_000).unwrap();
    db.batch_execute(
        "INSERT INTO jobs (id, workspace, owner, pool, state, kind, payload, max_attempts,
                           required_capabilities, no_runner_timeout_ms, no_runner_check_at)
         SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'acme',
                'ws:acme', 'workspace', 'parked', 'command', '{}', 3,
                CASE WHEN g <= 1200 THEN '{gpu}' WHEN g = 1201 THEN '{arm64}'
                     ELSE '{arm64,gpu}' END::text[],
                300000, now() + interval '5 minutes'
           FROM generate_series(1, 1202) g;
         ANALYZE jobs;",
    )
    .await
    .unwrap();
    let id = |g: u32| Uuid::parse_str(&format!("00000000-0000-7000-8000-{g:012x}")).unwrap();
    for (caps, exclusive, want, takes) in [
        (vec!["arm64"], vec!["arm64"], 2, vec![id(1201)]),
        (vec!["arm64", "gpu"], vec![], 2, vec![id(1), id(2)]),
    ] {
        let runner = Runner {
            id: Uuid::now_v7(),
            token_hash: rand::random::<[u8; 32]>().to_vec(),
            owner: "ws:acme".into(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
            exclusive: exclusive.iter().map(|c| (*c).to_owned()).collect(),
            sources: Vec::new(),
            capacity: 4,
        };
        insert_runner(&db, &runner, None).await;
        let (owner, capabilities, exclusive_set, sources) = class_of(&runner);
        let claim = ClassClaim {
            workspace: WORKSPACE.into(),
            owner,
            capabilities,
            exclusive: exclusive_set,
            sources,
            runners: vec![runner.id],
            wants: vec![want],
            since: vec![None],
            named: vec![true],
            ..ClassClaim::default()
        };
        let out = store.tick(&[], &[claim], 600_000).await.unwrap();
        let mut got: Vec<Uuid> = out.claims[0]
            .runners
            .iter()
            .flat_map(|r| r.claimed.iter().map(|c| c.id))
            .collect();
        got.sort();
        assert_eq!(got, takes, "{caps:?} exclusive {exclusive:?}");
    }
}
