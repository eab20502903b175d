//! Where a claim starts under an old snapshot (hub::dispatcher): a replica's dispatcher
//! remembers, per class of runners and lane, where its last claim there ended (the first job it
//! reached and did not take, else just after the last it took), and the next claim starts
//! there, whether the runners are plain or advertise capabilities, and whether the jobs are plain
//! or require a capability (the constrained lanes, read only by a class that advertises one):
//! each test runs for all three. Nothing behind that place is ever skipped: a job re-delivered
//! behind it, a job dispatched since with a higher priority, and a job another claim held locked
//! and then rolled back are all taken before the jobs after it, in priority-then-FIFO order; a
//! job released behind it on another replica is taken once the notice (which says where it
//! stands) arrives; a job parked behind it with nobody told is found by the lane's next read
//! from its head. The place outlives a moment with no runner waiting.
//!
//! Every test runs its replicas with places always in use and a full walk every hour (but the
//! last), so each claim after the first starts from a remembered place (a claim from the head
//! would pass these tests trivially).

use std::time::Duration;

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use serde_json::json;

use crate::support::{connect, eventually, hold_snapshot, lease, pair, personal, TestApp};

/// What each place test runs for: a plain runner and plain jobs, a runner that advertises
/// `linux` and plain jobs (the plain lanes), and jobs that require it (the constrained lanes).
const SHAPES: [(&[&str], &[&str]); 3] = [(&[], &[]), (&["linux"], &[]), (&["linux"], &["linux"])];

fn remember_for_an_hour(c: &mut leasehold::config::Config) {
    c.claim_places_age = 0;
    c.claim_full_walk_ms = 3_600_000;
}

/// Lease one job and say which.
async fn next(runner: &Client) -> wire::LeasedJob {
    let mut got = lease(runner, 0, 1).await;
    assert_eq!(got.len(), 1, "a job to lease");
    got.remove(0)
}

/// A job for alice's personal pool that requires `requires` (none: a plain job).
fn job(payload: serde_json::Value, requires: &[&str]) -> wire::Dispatch {
    wire::Dispatch {
        required_capabilities: (!requires.is_empty())
            .then(|| requires.iter().map(|c| (*c).to_owned()).collect()),
        ..wire::Dispatch::new(personal(), payload)
    }
}

/// Put a leased job back to parked behind the dispatcher's back: no replica is told.
async fn park_again_untold(app: &TestApp, id: uuid::Uuid) {
    connect(&app.database_url)
        .await
        .execute(
            "UPDATE jobs SET state = 'parked', leased_by = NULL, lease_expires_at = NULL
              WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
}

/// Park `n` jobs in alice's personal pool, in order, each requiring `requires`.
async fn park(alice: &Client, n: usize, requires: &[&str]) -> Vec<uuid::Uuid> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(alice.dispatch(&job(json!(i), requires)).await.unwrap().id);
    }
    ids
}

#[tokio::test]
async fn a_job_released_on_another_replica_behind_the_place_is_taken() {
    for (capabilities, requires) in SHAPES {
        a_job_released_on_another_replica_behind_the_place_is_taken_for(capabilities, requires)
            .await;
    }
}

async fn a_job_released_on_another_replica_behind_the_place_is_taken_for(
    capabilities: &[&str],
    requires: &[&str],
) {
    let app = TestApp::spawn_with(2, remember_for_an_hour).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, capabilities, 10).await;
    // A second runner of the same queue, on the other replica.
    let (_, other) = pair(&alice, Tier::Personal, capabilities, 10).await;
    let other = Client::new(app.url(1), other.token().map(str::to_owned));
    let ids = park(&alice, 5, requires).await;
    assert_eq!(next(&r).await.id, ids[0]);
    let held = next(&other).await;
    assert_eq!(held.id, ids[1]);
    for id in &ids[2..] {
        assert_eq!(next(&r).await.id, *id);
    }
    // The lane is empty; replica 0 remembers its place after ids[4]. Its runner waits there.
    let dispatcher = app.replicas[0].hub.dispatcher.clone();
    let waiting = tokio::spawn(async move { lease(&r, 15_000, 1).await });
    eventually(Duration::from_secs(10), "the runner waits", || async {
        (dispatcher.len() == 1).then_some(())
    })
    .await;
    // ids[1] goes back to parked on replica 1, behind that place: replica 0 hears of it (with
    // where it stands) and its claim starts there. (Before the notice arrives a claim there
    // cannot know of it: while the horizon is old, order across replicas is the notice's.)
    other.release(held.id, held.epoch).await.unwrap();
    let got = waiting.await.unwrap();
    assert_eq!(
        got.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![ids[1]],
        "the released job, told by the other replica"
    );
}

#[tokio::test]
async fn a_job_dispatched_with_a_higher_priority_after_the_place_is_taken_first() {
    for (capabilities, requires) in SHAPES {
        a_job_dispatched_with_a_higher_priority_after_the_place_is_taken_first_for(
            capabilities,
            requires,
        )
        .await;
    }
}

async fn a_job_dispatched_with_a_higher_priority_after_the_place_is_taken_first_for(
    capabilities: &[&str],
    requires: &[&str],
) {
    let app = TestApp::spawn_with(1, remember_for_an_hour).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, capabilities, 10).await;
    let ids = park(&alice, 4, requires).await;
    for id in &ids[..3] {
        assert_eq!(next(&r).await.id, *id);
    }
    let mut urgent = job(json!("urgent"), requires);
    urgent.priority = Some(5);
    let urgent = alice.dispatch(&urgent).await.unwrap();
    let mut behind = job(json!("low"), requires);
    behind.priority = Some(-5);
    let behind = alice.dispatch(&behind).await.unwrap();
    assert_eq!(next(&r).await.id, urgent.id, "the higher priority first");
    assert_eq!(next(&r).await.id, ids[3]);
    assert_eq!(next(&r).await.id, behind.id, "the lower priority last");
}

#[tokio::test]
async fn a_job_locked_by_a_lease_that_rolls_back_is_taken_by_the_next_claim() {
    for (capabilities, requires) in SHAPES {
        a_job_locked_by_a_lease_that_rolls_back_is_taken_by_the_next_claim_for(
            capabilities,
            requires,
        )
        .await;
    }
}

async fn a_job_locked_by_a_lease_that_rolls_back_is_taken_by_the_next_claim_for(
    capabilities: &[&str],
    requires: &[&str],
) {
    let app = TestApp::spawn_with(1, remember_for_an_hour).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, capabilities, 10).await;
    let ids = park(&alice, 5, requires).await;
    assert_eq!(next(&r).await.id, ids[0]);
    assert_eq!(next(&r).await.id, ids[1]);
    // Another claimer (a replica that will crash mid-lease) holds ids[2] locked.
    let mut db = connect(&app.database_url).await;
    let tx = db.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM jobs WHERE id = $1 AND state = 'parked' FOR UPDATE",
        &[&ids[2]],
    )
    .await
    .unwrap();
    assert_eq!(next(&r).await.id, ids[3], "the locked job is skipped");
    tx.rollback().await.unwrap();
    assert_eq!(
        next(&r).await.id,
        ids[2],
        "the job the rolled-back lease held comes next, not ids[4]"
    );
    assert_eq!(next(&r).await.id, ids[4]);
}

#[tokio::test]
async fn a_lapsed_lease_behind_the_place_is_redelivered_first() {
    for (capabilities, requires) in SHAPES {
        a_lapsed_lease_behind_the_place_is_redelivered_first_for(capabilities, requires).await;
    }
}

async fn a_lapsed_lease_behind_the_place_is_redelivered_first_for(
    capabilities: &[&str],
    requires: &[&str],
) {
    let app = TestApp::spawn_with(1, |c| {
        remember_for_an_hour(c);
        c.lease_ttl_ms = 1_500;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, capabilities, 10).await;
    let ids = park(&alice, 4, requires).await;
    let lapsing = next(&r).await;
    assert_eq!(lapsing.id, ids[0]);
    // The next two settle at once; only ids[0] lapses.
    for id in &ids[1..3] {
        let l = next(&r).await;
        assert_eq!(l.id, *id);
        r.complete(l.id, l.epoch, json!(null)).await.unwrap();
    }
    // No heartbeat: the sweeper parks ids[0] again, behind the place.
    eventually(Duration::from_secs(10), "the lease lapses", || async {
        let job = alice.job(ids[0]).await.unwrap();
        (job.state == "parked").then_some(())
    })
    .await;
    let again = next(&r).await;
    assert_eq!(
        (again.id, again.attempt),
        (ids[0], 2),
        "re-delivered before ids[3]"
    );
    assert_eq!(next(&r).await.id, ids[3]);
}

/// A place is the queue's, not the runner's: the constrained place is the first constrained job
/// parked whoever can run it, so a runner's claim never moves it past a job that another runner
/// of the queue, on the same replica, can run and it cannot.
#[tokio::test]
async fn a_constrained_place_does_not_pass_a_job_another_runner_of_the_queue_can_run() {
    let app = TestApp::spawn_with(1, remember_for_an_hour).await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, linux) = pair(&alice, Tier::Personal, &["linux"], 10).await;
    let (_, gpu) = pair(&alice, Tier::Personal, &["gpu"], 10).await;
    let mut ids = Vec::new();
    for requires in ["gpu", "linux", "linux", "gpu"] {
        ids.push(
            alice
                .dispatch(&job(json!(requires), &[requires]))
                .await
                .unwrap()
                .id,
        );
    }
    // The linux runner's first call learns who it is (from the head); its second is its own
    // claim from the queue's constrained place, and answers the next place.
    assert_eq!(next(&linux).await.id, ids[1]);
    assert_eq!(next(&linux).await.id, ids[2]);
    assert!(lease(&linux, 0, 1).await.is_empty());
    // The gpu runner's claims on the same replica start from that place, and find both of its
    // jobs: the first is before every linux job the place passed, the second after them.
    assert_eq!(next(&gpu).await.id, ids[0]);
    assert_eq!(next(&gpu).await.id, ids[3], "the place passed no gpu job");
}

/// A job parked behind a place with nobody told (here a direct update, as a claim elsewhere
/// that rolled back or a lost notification would leave it) is found by the lane's next read
/// from its head, at most `LEASEHOLD_CLAIM_FULL_WALK_MS` later.
/// A place outlives a moment with no runner waiting: a runner that takes one job per call
/// leaves its workspace without waiters between calls, and a place forgotten then would send
/// every claim under an old snapshot back to the head (the soak fell to a quarter of its first
/// minute). A job parked behind the place with nobody told is the witness: the claim after the
/// gap starts at the place and passes it; from the head it would take it.
#[tokio::test]
async fn a_place_outlives_a_moment_with_no_waiter() {
    for (capabilities, requires) in SHAPES {
        a_place_outlives_a_moment_with_no_waiter_for(capabilities, requires).await;
    }
}

async fn a_place_outlives_a_moment_with_no_waiter_for(capabilities: &[&str], requires: &[&str]) {
    let app = TestApp::spawn_with(1, |c| {
        remember_for_an_hour(c);
        // The safety net would find the untold job (and move the place back to it) too.
        c.recheck_interval_ms = 3_600_000;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, capabilities, 10).await;
    let ids = park(&alice, 4, requires).await;
    assert_eq!(next(&r).await.id, ids[0]);
    assert_eq!(next(&r).await.id, ids[1]);
    // ids[0] parked again behind the place (ids[2]), and nobody told.
    park_again_untold(&app, ids[0]).await;
    assert_eq!(next(&r).await.id, ids[2], "the claim started from the head");
    assert_eq!(next(&r).await.id, ids[3]);
}

#[tokio::test]
async fn a_job_parked_behind_a_place_untold_is_found_by_the_next_full_walk() {
    for (capabilities, requires) in SHAPES {
        full_walk_for(capabilities, requires).await;
    }
}

async fn full_walk_for(capabilities: &[&str], requires: &[&str]) {
    let app = TestApp::spawn_with(1, |c| {
        c.claim_places_age = 0;
        c.claim_full_walk_ms = 1_000;
    })
    .await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, r) = pair(&alice, Tier::Personal, capabilities, 10).await;
    let ids = park(&alice, 2, requires).await;
    let first = next(&r).await;
    assert_eq!(first.id, ids[0]);
    assert_eq!(next(&r).await.id, ids[1]);
    // ids[0] parked again behind the place, and nobody told.
    park_again_untold(&app, ids[0]).await;
    let again = eventually(
        Duration::from_secs(15),
        "the full walk finds it",
        || async { lease(&r, 0, 1).await.pop() },
    )
    .await;
    assert_eq!(again.id, ids[0]);
}

/// The horizon that switches claims to places is this database's: a snapshot held in another
/// database of the same server keeps none of this one's dead entries, so it does not count.
///
/// Transaction ids are the server's, and the other tests burn them too: a statement of this
/// database's replicas that holds its snapshot while they burn a few dozen makes the age that
/// big for a moment. So the test burns far more than that noise, and tells the two cases apart by
/// half the burn.
#[tokio::test]
async fn the_horizon_counts_this_databases_snapshots_only() {
    const BURN: u64 = 2_000;
    let app = TestApp::spawn().await;
    let mut elsewhere = connect(&crate::support::fresh_database().await).await;
    let other = hold_snapshot(&mut elsewhere, "SELECT 1").await;
    let db = connect(&app.database_url).await;
    let burn = || async {
        for _ in 0..BURN {
            db.query_one("SELECT pg_current_xact_id()", &[])
                .await
                .unwrap();
        }
    };
    burn().await;
    let age = app.store.watch_horizon().await.unwrap();
    assert!(
        age < BURN / 2,
        "another database's snapshot counted: age {age}"
    );
    // One held here does.
    let mut here = connect(&app.database_url).await;
    let mine = hold_snapshot(&mut here, "SELECT 1").await;
    burn().await;
    let age = app.store.watch_horizon().await.unwrap();
    assert!(
        age >= BURN,
        "this database's snapshot not counted: age {age}"
    );
    mine.commit().await.unwrap();
    other.commit().await.unwrap();
}
