//! The server-side holes of the second attack (issue 18), each closed and defended here over
//! real HTTP on PostgreSQL.
//!
//! Invariants defended: a runner's recorded repository targets stay at most 100, its oldest
//! `pending` ones dropped first and `approved`/`revoked` ones never (row 8); enrolment and
//! pairing record the runner and its advertised targets in one transaction, so a failure of
//! either burns no join code and leaves no runner (row 11); one `GET /v1/jobs` holds a bounded
//! amount of memory however large the jobs it lists (row 7): pages end at a byte budget with
//! `next` set, and walking `next` still lists every job once.

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use reqwest::Method;
use serde_json::json;

use crate::secrets::call;
use crate::support::{
    code, connect, enrol_req, fresh_database, join_code, key_in, pair, serve_process, TestApp,
};

fn git(repository: &str) -> wire::AdvertisedTarget {
    wire::AdvertisedTarget::git(repository)
}

fn targets(prefix: &str, n: usize) -> Vec<wire::AdvertisedTarget> {
    (0..n)
        .map(|i| git(&format!("https://git.example.com/{prefix}/{i}.git")))
        .collect()
}

async fn advertise(runner: &Client, t: Vec<wire::AdvertisedTarget>) -> wire::Runner {
    runner
        .runner_heartbeat(&wire::RunnerHeartbeat {
            repo_targets: Some(t),
            ..Default::default()
        })
        .await
        .expect("heartbeat")
        .runner
}

fn status_of(runner: &wire::Runner, repository: &str) -> Option<String> {
    runner
        .repo_targets
        .iter()
        .find(|t| t.repository == repository)
        .map(|t| t.status.clone())
}

fn repo(prefix: &str, i: usize) -> String {
    format!("https://git.example.com/{prefix}/{i}.git")
}

/// Row 8: heartbeats (and lease calls) that keep advertising new targets never grow a runner
/// past 100 recorded targets; the oldest pending go first, operator decisions stay, and with
/// 100 decided targets a new one is not recorded.
#[tokio::test]
async fn a_runners_recorded_targets_are_capped_at_100_oldest_pending_dropped_first() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (me, runner) = pair(&alice, Tier::Personal, &["linux"], 1).await;

    let first = advertise(&runner, targets("a", 100)).await;
    assert_eq!(first.repo_targets.len(), 100);
    let id_of = |r: &wire::Runner, repository: &str| {
        r.repo_targets
            .iter()
            .find(|t| t.repository == repository)
            .unwrap()
            .id
    };
    alice
        .set_repo_target(me.id, id_of(&first, &repo("a", 0)), true)
        .await
        .unwrap();
    alice
        .set_repo_target(me.id, id_of(&first, &repo("a", 1)), false)
        .await
        .unwrap();

    // 100 new ones beyond the cap: the 98 old pending go, then the two oldest new ones.
    let after = advertise(&runner, targets("b", 100)).await;
    assert_eq!(after.repo_targets.len(), 100, "capped at 100");
    assert_eq!(
        status_of(&after, &repo("a", 0)).as_deref(),
        Some("approved")
    );
    assert_eq!(status_of(&after, &repo("a", 1)).as_deref(), Some("revoked"));
    for i in 2..100 {
        assert_eq!(
            status_of(&after, &repo("a", i)),
            None,
            "old pending a/{i} dropped"
        );
    }
    assert_eq!(status_of(&after, &repo("b", 0)), None);
    assert_eq!(status_of(&after, &repo("b", 1)), None);
    for i in 2..100 {
        assert_eq!(status_of(&after, &repo("b", i)).as_deref(), Some("pending"));
    }

    // A lease call's advertisement is capped the same way.
    let (status, _) = call(
        &app.url(0),
        runner.token().unwrap(),
        Method::POST,
        "/v1/runner/lease",
        Some(json!({"wait_ms": 0, "repo_targets": [git(&repo("c", 0))]})),
    )
    .await;
    assert_eq!(status, 200);
    let listed = |list: Vec<wire::Runner>| list.into_iter().find(|r| r.id == me.id).unwrap();
    let now = listed(alice.runners(Tier::Personal).await.unwrap());
    assert_eq!(now.repo_targets.len(), 100);
    assert_eq!(status_of(&now, &repo("c", 0)).as_deref(), Some("pending"));
    assert_eq!(
        status_of(&now, &repo("b", 2)),
        None,
        "the oldest pending went"
    );

    // Every recorded target decided: a new one is not recorded at all.
    for t in now.repo_targets.iter().filter(|t| t.status == "pending") {
        alice.set_repo_target(me.id, t.id, true).await.unwrap();
    }
    let full = advertise(&runner, vec![git(&repo("d", 0))]).await;
    assert_eq!(full.repo_targets.len(), 100);
    assert_eq!(status_of(&full, &repo("d", 0)), None, "not recorded");
    assert!(full.repo_targets.iter().all(|t| t.status != "pending"));
    let db = connect(&app.database_url).await;
    let n: i64 = db
        .query_one(
            "SELECT count(*) FROM runner_repo_targets WHERE runner_id = $1",
            &[&me.id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 100);
}

/// Row 11: a failure of the targets' write (injected by a trigger on this test's own database,
/// answering as a standby would mid-failover) fails enrolment and pairing whole: 503, the join
/// code still unburnt and usable, no runner recorded.
#[tokio::test]
async fn enrolment_and_pairing_write_the_runner_and_its_targets_in_one_transaction() {
    let app = TestApp::spawn().await;
    let db = connect(&app.database_url).await;
    db.batch_execute(
        "CREATE FUNCTION fail_targets() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             RAISE EXCEPTION 'injected failure' USING ERRCODE = '25006';
         END $$;
         CREATE TRIGGER fail_targets BEFORE INSERT ON runner_repo_targets
             FOR EACH ROW WHEN (NEW.repository LIKE '%/fail.git') EXECUTE FUNCTION fail_targets();",
    )
    .await
    .unwrap();
    let failing = vec![
        git("https://git.example.com/acme/ok.git"),
        git("https://git.example.com/acme/fail.git"),
    ];
    let runners_labelled = |label: &'static str| {
        let db = &db;
        async move {
            db.query_one("SELECT count(*) FROM runners WHERE label = $1", &[&label])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };

    let alice = app.operator("acme", "alice", false).await;
    let anon = Client::new(app.url(0), None);
    let jc = join_code(&alice, Tier::Personal, false).await;
    let mut req = enrol_req(&jc, "doomed");
    req.repo_targets = Some(failing.clone());
    assert_eq!(code(anon.enroll(&req).await), "unavailable");
    assert_eq!(
        runners_labelled("doomed").await,
        0,
        "no runner was enrolled"
    );
    let unburnt: i64 = db
        .query_one("SELECT count(*) FROM join_codes WHERE used_at IS NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(unburnt, 1, "the code is not burnt");
    // The same code still enrols.
    let mut req = enrol_req(&jc, "second-try");
    req.repo_targets = Some(vec![git("https://git.example.com/acme/ok.git")]);
    let enrolled = anon.enroll(&req).await.expect("the code still works");
    assert_eq!(enrolled.runner.repo_targets.len(), 1);
    assert_eq!(enrolled.runner.repo_targets[0].status, "pending");

    // Pairing: both tiers.
    let admin = app.operator("acme", "root", true).await;
    for (operator, tier) in [(&alice, Tier::Personal), (&admin, Tier::Workspace)] {
        let r = operator
            .pair_runner(
                tier,
                &wire::CreateRunner {
                    label: "doomed-pair".into(),
                    repo_targets: Some(failing.clone()),
                    ..Default::default()
                },
            )
            .await;
        assert_eq!(code(r), "unavailable");
    }
    assert_eq!(
        runners_labelled("doomed-pair").await,
        0,
        "no runner was paired"
    );
    assert!(!admin
        .runners(Tier::Workspace)
        .await
        .unwrap()
        .iter()
        .any(|r| r.label == "doomed-pair" || r.label == "doomed"));
}

/// The peak resident memory of process `pid` (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

/// Row 7: 200 jobs with 1 MB payloads, six concurrent `GET /v1/jobs?limit=200`. Before, the
/// server's peak RSS went from 33 MB to 2.2 GB (every page whole in memory, several times
/// over); now each page stops at its byte budget, so the peak grows by a bounded amount.
#[tokio::test]
async fn listing_large_jobs_holds_bounded_memory_and_pages_end_early_with_next() {
    let database_url = fresh_database().await;
    let key = key_in(&database_url, "acme", "alice", false).await;
    let server = serve_process(&database_url, &[]).await;
    let pid = server.pid().unwrap();
    let http = reqwest::Client::new();
    let big = "x".repeat(1_000_000);
    let (status, first) = call(
        &server.url,
        &key,
        Method::POST,
        "/v1/jobs",
        Some(json!({"target": {"pool": "personal"}, "payload": {"blob": big}})),
    )
    .await;
    assert_eq!(status, 201, "{first}");
    // 199 more like it, written straight into the test's database (the server's memory is
    // what is measured, so the jobs do not pass through it).
    let db = connect(&database_url).await;
    let first_id: uuid::Uuid = first["id"].as_str().unwrap().parse().unwrap();
    db.execute(
        "INSERT INTO jobs SELECT (jsonb_populate_record(j, jsonb_build_object(
                 'id', gen_random_uuid()))).*
           FROM jobs j, generate_series(1, 199) WHERE j.id = $1",
        &[&first_id],
    )
    .await
    .unwrap();
    let list = |query: String| {
        let http = http.clone();
        let (url, key) = (server.url.clone(), key.clone());
        async move {
            let r = http
                .get(format!("{url}/v1/jobs?{query}"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    // Warm up (allocator arenas, prepared statements), then measure.
    list("limit=1".into()).await;
    let before = peak_rss(pid);
    let pages = futures_util::future::join_all((0..6).map(|_| list("limit=200".into()))).await;
    let after = peak_rss(pid);
    let grown = after.saturating_sub(before);
    eprintln!(
        "serve peak RSS {} MB before, {} MB after six concurrent lists of 200 x 1 MB jobs",
        before >> 20,
        after >> 20
    );
    assert!(
        grown < 256 << 20,
        "six concurrent lists grew the server's peak RSS by {} MB",
        grown >> 20
    );
    for page in &pages {
        let n = page["jobs"].as_array().unwrap().len();
        assert!((1..200).contains(&n), "the page ended early ({n} jobs)");
        assert_eq!(
            page["next"],
            page["jobs"][n - 1]["id"],
            "an early end sets next to the last id returned"
        );
    }
    // Walking next lists every job exactly once, in order, both ways (over 40 of them: this
    // debug build serialises and parses JSON slowly).
    db.execute(
        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs ORDER BY id OFFSET 40)",
        &[],
    )
    .await
    .unwrap();
    for order in ["asc", "desc"] {
        let mut seen: Vec<String> = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let q = match &after {
                Some(a) => format!("limit=200&order={order}&after={a}"),
                None => format!("limit=200&order={order}"),
            };
            let page = list(q).await;
            for j in page["jobs"].as_array().unwrap() {
                assert_eq!(j["payload"]["blob"].as_str().map(str::len), Some(1_000_000));
                seen.push(j["id"].as_str().unwrap().to_owned());
            }
            match page["next"].as_str() {
                Some(n) => after = Some(n.to_owned()),
                None => break,
            }
        }
        assert_eq!(seen.len(), 40, "{order}: every job once");
        let mut sorted = seen.clone();
        sorted.sort();
        if order == "desc" {
            sorted.reverse();
        }
        assert_eq!(seen, sorted, "{order}: in id order");
        sorted.dedup();
        assert_eq!(sorted.len(), 40);
    }
    // Small jobs still come 100 to a page.
    let (_, small) = call(
        &server.url,
        &key,
        Method::GET,
        "/v1/jobs?limit=2&state=parked",
        None,
    )
    .await;
    assert_eq!(small["jobs"].as_array().unwrap().len(), 2);
    assert!(small["next"].is_string());
}
