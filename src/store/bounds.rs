//! Where this replica's next claim of each queue starts, class by class (`lease_claim.sql`'s
//! places; migrations 0013, 0016 and 0030).
//!
//! A claim index keeps an entry for every job taken until that job's old row version is dead
//! to every snapshot, so a claim that reads its queue from the head walks one entry per job
//! taken since the oldest snapshot any session holds (an analytics query held for an hour
//! makes it an hour of jobs). A claim instead starts at the place the last one
//! answered: the first parked job at or after its own start, locked or not, with its
//! snapshot's xmin.
//!
//! Invariant: a remembered place misses no job. Every job before it was not parked in that
//! claim's snapshot (a job locked by a lease still in flight is parked in it, so the place
//! never passes a lease that may yet roll back), and a job that becomes parked before it later
//! does so in a transaction that snapshot did not see, whose xid (`parked_xid`) is at least the
//! remembered xmin: the next claim reads those first. What the invariant cannot cover is a
//! database that moved back in time (a failover to a standby that had not received the last
//! transactions may hand out their xids again), so a replica that sees an xmin lower than one it
//! remembered forgets every place, and every queue is read from the head again at least once
//! per full-walk interval whatever happens.
//!
//! The places cost a claim more than they save while the oldest snapshot is young (the entries
//! of taken jobs are then gone within moments, and the head is near): each replica reads the
//! server's horizon age once a second ([`Store::watch_horizon`]) and its claims start from
//! remembered places only while it is at least `LEASEHOLD_CLAIM_BOUND_AGE` transactions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{sql, Result, Store};

/// How often a queue is read from its head at the latest: the default of
/// `LEASEHOLD_CLAIM_FULL_WALK_MS`.
pub const FULL_WALK_EVERY: Duration = Duration::from_secs(5);

/// From how many transactions of horizon age claims start from remembered places: the
/// default of `LEASEHOLD_CLAIM_BOUND_AGE`.
pub const FROM_AGE: u64 = 5_000;

/// At most this many places are remembered; past it, places older than a full walk go.
const MOST_PLACES: usize = 20_000;

/// A class of a queue that keeps a place of its own: the pool's jobs (by workspace and owner)
/// or a workspace's `any` jobs (by workspace), plain or constrained (migration 0012: a
/// constrained job requires a capability or a source). A plain runner's claim reads the plain
/// lanes only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    Own,
    Any,
    OwnConstrained,
    AnyConstrained,
}

impl Lane {
    /// Every lane, in the order the statements take their places.
    pub const ALL: [Self; 4] = [
        Self::Own,
        Self::Any,
        Self::OwnConstrained,
        Self::AnyConstrained,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Whether the lane is a workspace's `any` jobs (read by workspace runners only).
    fn is_any(self) -> bool {
        matches!(self, Self::Any | Self::AnyConstrained)
    }

    fn is_constrained(self) -> bool {
        matches!(self, Self::OwnConstrained | Self::AnyConstrained)
    }
}

/// A place in a claim index's order (priority descending, then id), and the xmin of the
/// snapshot that found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub priority: i32,
    pub id: Uuid,
    pub xmin: u64,
}

impl Place {
    /// The head of a queue: above every priority (the schema allows -1000..1000).
    pub const HEAD_PRIORITY: i32 = 1001;
}

/// A remembered place, and when its chain of claims last started from the head.
#[derive(Debug, Clone)]
struct Remembered {
    place: Place,
    walked_at: Instant,
}

/// Where a claim starts in each lane it reads: a remembered place, or the head (`None`).
#[derive(Debug, Clone, Default)]
pub struct Starts {
    lanes: [Option<Remembered>; 4],
}

impl Starts {
    /// The place a lane starts from (`None`: its head).
    pub fn place(&self, lane: Lane) -> Option<&Place> {
        self.lanes[lane.index()].as_ref().map(|r| &r.place)
    }
}

/// The places, per lane and queue: keyed by (lane, workspace, owner), the owner empty for the
/// `any` lanes.
#[derive(Debug)]
pub struct ClaimBounds {
    full_walk_every: Duration,
    /// Places are used from this horizon age on (0: always).
    from_age: u64,
    /// The server's horizon age, as last read.
    horizon_age: AtomicU64,
    places: Mutex<HashMap<(Lane, String, String), Remembered>>,
}

impl Default for ClaimBounds {
    fn default() -> Self {
        Self::new(FULL_WALK_EVERY, FROM_AGE)
    }
}

impl ClaimBounds {
    pub fn new(full_walk_every: Duration, from_age: u64) -> Self {
        Self {
            full_walk_every,
            from_age,
            horizon_age: AtomicU64::new(0),
            places: Mutex::default(),
        }
    }

    /// Record the server's horizon age. Below the threshold the places are forgotten: they
    /// would be stale when next needed.
    pub fn observe_horizon(&self, age: u64) {
        self.horizon_age.store(age, Ordering::Relaxed);
        if !self.in_use() {
            lock(&self.places).clear();
        }
    }

    /// Whether claims start from remembered places now.
    pub fn in_use(&self) -> bool {
        self.from_age == 0 || self.horizon_age.load(Ordering::Relaxed) >= self.from_age
    }

    /// Where a claim of this queue starts now: `None` for a claim from the head, else the places
    /// of the lanes it reads: the plain ones, and the constrained ones too when `constrained`
    /// (the runner is not plain). A workspace's `any` lanes are read by a workspace runner
    /// (owner `ws:...`) only.
    pub fn starts(&self, workspace: &str, owner: &str, constrained: bool) -> Option<Starts> {
        if !self.in_use() {
            return None;
        }
        let now = Instant::now();
        let mut map = lock(&self.places);
        let mut starts = Starts::default();
        for lane in Lane::ALL {
            if (lane.is_any() && !owner.starts_with("ws:"))
                || (lane.is_constrained() && !constrained)
            {
                continue;
            }
            starts.lanes[lane.index()] = take(
                &mut map,
                &key(lane, workspace, owner),
                now,
                self.full_walk_every,
            );
        }
        Some(starts)
    }

    /// Where each lane of this queue starts for a look that takes no lease (`lease_probe.sql`):
    /// the places remembered, or the head, whether or not a walk from the head is due (a look
    /// leaves that walk to the next claim), and the head in every lane while places are not in
    /// use.
    pub fn peek(&self, workspace: &str, owner: &str) -> Starts {
        let mut starts = Starts::default();
        if !self.in_use() {
            return starts;
        }
        let map = lock(&self.places);
        for lane in Lane::ALL {
            if lane.is_any() && !owner.starts_with("ws:") {
                continue;
            }
            starts.lanes[lane.index()] = map.get(&key(lane, workspace, owner)).cloned();
        }
        starts
    }

    /// Remember what a committed claim that started at `starts` answered: the next place of
    /// each lane it read.
    pub fn learn(&self, workspace: &str, owner: &str, starts: &Starts, answered: &[(Lane, Place)]) {
        let went_back = starts.lanes.iter().flatten().any(|used| {
            answered
                .iter()
                .any(|(_, place)| place.xmin < used.place.xmin)
        });
        let mut map = lock(&self.places);
        if went_back {
            // The database handed out an xmin below one it handed out before: forget them all.
            map.clear();
            return;
        }
        let now = Instant::now();
        for (lane, place) in answered {
            let walked_at = starts.lanes[lane.index()]
                .as_ref()
                .map_or(now, |r| r.walked_at);
            remember(
                &mut map,
                key(*lane, workspace, owner),
                place.clone(),
                walked_at,
                self.full_walk_every,
            );
        }
    }
}

/// The map key of a lane of a queue.
fn key(lane: Lane, workspace: &str, owner: &str) -> (Lane, String, String) {
    let owner = if lane.is_any() { "" } else { owner };
    (lane, workspace.to_owned(), owner.to_owned())
}

/// The place a claim of this queue starts from: `None` (the head) when none is remembered, or
/// when the chain's last walk from the head is a full-walk interval old. Then this claim is the
/// one that walks from the head, and the place stays in use for the claims that start before
/// the walk answers (its time moves on now): one walk per interval, not one per claim in flight.
fn take(
    map: &mut HashMap<(Lane, String, String), Remembered>,
    key: &(Lane, String, String),
    now: Instant,
    full_walk_every: Duration,
) -> Option<Remembered> {
    let r = map.get_mut(key)?;
    if now.duration_since(r.walked_at) < full_walk_every {
        return Some(r.clone());
    }
    r.walked_at = now;
    None
}

/// Keep a committed claim's answer, unless the place remembered came from a later snapshot
/// (claims of one queue commit in any order; any answer is a correct start, and the later
/// snapshot's is the further one). The walk time kept is the later of the two.
fn remember(
    map: &mut HashMap<(Lane, String, String), Remembered>,
    key: (Lane, String, String),
    place: Place,
    walked_at: Instant,
    full_walk_every: Duration,
) {
    if map.len() >= MOST_PLACES {
        let now = Instant::now();
        map.retain(|_, r| now.duration_since(r.walked_at) < full_walk_every);
    }
    match map.get_mut(&key) {
        Some(r) => {
            r.walked_at = r.walked_at.max(walked_at);
            if place.xmin >= r.place.xmin {
                r.place = place;
            }
        }
        None => {
            map.insert(key, Remembered { place, walked_at });
        }
    }
}

/// The map holds plain data: nothing panics while it is locked.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Store {
    /// Read the server's horizon age (`snapshot_horizon_age.sql`) and let the claims
    /// follow it.
    ///
    /// # Errors
    /// The database failed; the claims keep what they did.
    pub async fn watch_horizon(&self) -> Result<u64> {
        let row = self.query_opt(sql::SNAPSHOT_HORIZON_AGE, &[]).await?;
        let age = row.map_or(0, |r| r.get::<_, i64>("age").max(0) as u64);
        self.claim_bounds.observe_horizon(age);
        Ok(age)
    }

    /// Whether claims start from remembered places now: the horizon is old (for the
    /// sweeps, which then read only recent due checks, metrics and tests).
    pub fn claims_from_places(&self) -> bool {
        self.claim_bounds.in_use()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(xmin: u64) -> Place {
        Place {
            priority: 0,
            id: Uuid::now_v7(),
            xmin,
        }
    }

    /// Places always in use.
    fn always(full_walk_every: Duration) -> ClaimBounds {
        ClaimBounds::new(full_walk_every, 0)
    }

    /// The place of the pool's plain lane a claim of the queue would start from now.
    fn own(b: &ClaimBounds, owner: &str) -> Option<Place> {
        b.starts("w", owner, false)
            .expect("in use")
            .place(Lane::Own)
            .cloned()
    }

    /// A claim of the queue's pool's plain lane that answered `place`.
    fn learn_own(b: &ClaimBounds, owner: &str, starts: &Starts, place: Place) {
        b.learn("w", owner, starts, &[(Lane::Own, place)]);
    }

    #[test]
    fn places_are_used_only_while_the_horizon_is_old() {
        let b = ClaimBounds::new(FULL_WALK_EVERY, 100);
        assert!(b.starts("w", "ws:w", true).is_none());
        b.observe_horizon(100);
        let s = b.starts("w", "ws:w", false).expect("in use");
        learn_own(&b, "ws:w", &s, place(10));
        assert!(own(&b, "ws:w").is_some());
        // Young again: the head claim, and the places are forgotten.
        b.observe_horizon(99);
        assert!(b.starts("w", "ws:w", false).is_none());
        b.observe_horizon(1000);
        assert!(own(&b, "ws:w").is_none());
    }

    #[test]
    fn a_lane_starts_at_its_head_until_a_claim_answered() {
        let b = always(FULL_WALK_EVERY);
        let s = b.starts("w", "ws:w", true).unwrap();
        assert!(Lane::ALL.iter().all(|l| s.place(*l).is_none()));
        let answered: Vec<(Lane, Place)> = Lane::ALL.iter().map(|l| (*l, place(10))).collect();
        b.learn("w", "ws:w", &s, &answered);
        let s = b.starts("w", "ws:w", true).unwrap();
        for (lane, p) in &answered {
            assert_eq!(s.place(*lane), Some(p), "{lane:?}");
        }
        // A plain runner's claim reads the plain lanes only.
        let s = b.starts("w", "ws:w", false).unwrap();
        assert!(s.place(Lane::Own).is_some() && s.place(Lane::Any).is_some());
        assert!(s.place(Lane::OwnConstrained).is_none() && s.place(Lane::AnyConstrained).is_none());
        // Another owner's queue, and a personal queue's 'any' (it reads none).
        let s = b.starts("w", "alice", true).unwrap();
        assert!(Lane::ALL.iter().all(|l| s.place(*l).is_none()));
        // A personal queue shares the workspace's `any` places with no one: it has none.
        b.learn("w", "alice", &s, &[(Lane::Own, place(11))]);
        let s = b.starts("w", "alice", true).unwrap();
        assert!(s.place(Lane::Own).is_some() && s.place(Lane::Any).is_none());
    }

    #[test]
    fn a_plain_claim_leaves_a_due_walk_of_the_constrained_lanes_to_the_claim_that_reads_them() {
        let b = always(Duration::from_millis(20));
        let s = b.starts("w", "ws:w", true).unwrap();
        b.learn(
            "w",
            "ws:w",
            &s,
            &[(Lane::Own, place(10)), (Lane::OwnConstrained, place(10))],
        );
        std::thread::sleep(Duration::from_millis(30));
        // A plain claim walks its lane from the head; the constrained lane's walk stays due.
        assert!(b
            .starts("w", "ws:w", false)
            .unwrap()
            .place(Lane::Own)
            .is_none());
        let general = b.starts("w", "ws:w", true).unwrap();
        assert!(general.place(Lane::OwnConstrained).is_none());
        assert!(
            general.place(Lane::Own).is_some(),
            "the plain walk is in flight"
        );
    }

    #[test]
    fn a_look_reads_the_places_and_leaves_a_due_walk_to_the_next_claim() {
        let b = always(Duration::from_millis(20));
        let kept = place(10);
        let s = b.starts("w", "ws:w", true).unwrap();
        b.learn("w", "ws:w", &s, &[(Lane::OwnConstrained, kept.clone())]);
        assert_eq!(b.peek("w", "ws:w").place(Lane::OwnConstrained), Some(&kept));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(b.peek("w", "ws:w").place(Lane::OwnConstrained), Some(&kept));
        let claim = b.starts("w", "ws:w", true).unwrap();
        assert!(
            claim.place(Lane::OwnConstrained).is_none(),
            "the claim walks"
        );
        // Not in use: the head everywhere.
        let young = ClaimBounds::new(FULL_WALK_EVERY, 100);
        assert!(Lane::ALL
            .iter()
            .all(|l| young.peek("w", "ws:w").place(*l).is_none()));
    }

    #[test]
    fn of_claims_that_commit_out_of_order_the_later_snapshots_place_is_kept() {
        let b = always(FULL_WALK_EVERY);
        learn_own(&b, "ws:w", &Starts::default(), place(10));
        let s = b.starts("w", "ws:w", false).unwrap();
        let (later, earlier) = (place(14), place(12));
        learn_own(&b, "ws:w", &s, later.clone());
        // A claim that took its snapshot before the one above, committed after it.
        learn_own(&b, "ws:w", &s, earlier);
        assert_eq!(own(&b, "ws:w"), Some(later));
    }

    #[test]
    fn when_a_walk_from_the_head_is_due_one_claim_walks_and_the_others_keep_the_place() {
        let b = always(Duration::from_millis(20));
        let kept = place(10);
        learn_own(&b, "ws:w", &Starts::default(), kept.clone());
        std::thread::sleep(Duration::from_millis(30));
        let walker = b.starts("w", "ws:w", false).unwrap();
        assert!(
            walker.place(Lane::Own).is_none(),
            "the first claim after the interval walks"
        );
        for _ in 0..3 {
            assert_eq!(
                own(&b, "ws:w").as_ref(),
                Some(&kept),
                "the claims in flight meanwhile do not"
            );
        }
        let walked = place(11);
        learn_own(&b, "ws:w", &walker, walked.clone());
        assert_eq!(own(&b, "ws:w"), Some(walked));
    }

    #[test]
    fn a_lower_xmin_forgets_every_place() {
        let b = always(FULL_WALK_EVERY);
        learn_own(&b, "ws:w", &Starts::default(), place(10));
        learn_own(&b, "bob", &Starts::default(), place(10));
        let s = b.starts("w", "ws:w", false).unwrap();
        learn_own(&b, "ws:w", &s, place(9));
        assert!(own(&b, "ws:w").is_none());
        assert!(own(&b, "bob").is_none());
    }

    #[test]
    fn a_chain_of_claims_reads_from_the_head_again_after_a_full_walk_interval() {
        let b = always(Duration::from_millis(50));
        learn_own(&b, "ws:w", &Starts::default(), place(10));
        assert!(own(&b, "ws:w").is_some());
        // Claims that started from a remembered place keep the time of the walk they came from.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = b.starts("w", "ws:w", false).unwrap();
            if s.place(Lane::Own).is_none() {
                break;
            }
            learn_own(&b, "ws:w", &s, place(11));
            assert!(Instant::now() < deadline, "never read from the head again");
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod stamping {
    use crate::store::sql;

    /// The invariant rests on every transition into `parked` stamping `parked_xid` (an insert
    /// gets it from the column's default).
    #[test]
    fn every_statement_that_parks_a_job_stamps_its_parked_xid() {
        for (file, text) in sql::ALL {
            let code: String = text
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            // The no-runner sweep reads parked jobs only: its 'parked' keeps a job where it is.
            let keeps = *file == "sweep_no_runner.sql";
            let parks = !keeps
                && (code.contains("SET state = 'parked'")
                    || code.contains("ELSE 'parked' END")
                    // A retry's re-park (job_fail.sql, job_complete.sql).
                    || code.contains("THEN 'parked'"));
            if parks {
                assert!(
                    code.contains("parked_xid = pg_current_xact_id()")
                        || code.contains("THEN pg_current_xact_id()"),
                    "{file} makes a job parked without stamping parked_xid"
                );
            }
            if code.contains("INSERT INTO jobs") {
                assert!(
                    !code.contains("parked_xid"),
                    "{file}: a parked job's parked_xid comes from the column's default"
                );
            }
        }
    }
}
