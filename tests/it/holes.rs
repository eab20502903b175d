//! The server-side holes of the second attack (issue 18), each closed and defended here over
//! real HTTP on PostgreSQL.
//!
//! Invariants defended: a runner's recorded repository targets stay at most 100, its oldest
//! `pending` ones dropped first and `approved`/`revoked` ones never (row 8); enrolment and
//! pairing record the runner and its advertised targets in one transaction, so a failure of
//! either burns no join code and leaves no runner (row 11); a `workspace` secret (the default
//! scope) never reaches a personal runner, however it is named or targeted, and a member cannot
//! name an `admin` secret (row 5); one `GET /v1/jobs` holds a bounded
//! amount of memory however large the jobs it lists (row 7): pages end at a byte budget with
//! `next` set, and walking `next` still lists every job once.

use leasehold::client::Client;
use leasehold::wire::{self, Tier};
use reqwest::Method;
use serde_json::{json, Value};

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
        .map(|t| t.status.to_string())
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

/// `POST /v1/jobs` with `body`: status and JSON answer.
async fn post_job(url: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    call(url, key, Method::POST, "/v1/jobs", body).await
}

/// `POST /v1/jobs/batch` with `body`: status and JSON answer.
async fn post_batch(url: &str, key: &str, body: Value) -> (u16, Value) {
    call(url, key, Method::POST, "/v1/jobs/batch", Some(body)).await
}

/// `POST /v1/jobs` with `body`, which must be `201`: the job.
async fn post_created(url: &str, key: &str, body: Value) -> Value {
    let (status, job) = post_job(url, key, Some(body)).await;
    assert_eq!(status, 201, "{job}");
    job
}

/// A job as `key` reads it.
async fn job_state(url: &str, key: &str, job: &Value) -> Value {
    let id = job["id"].as_str().unwrap();
    let (status, j) = call(url, key, Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, 200);
    j
}

/// A dispatch body naming `secrets` (and a source whose credential is `credential`).
fn with_secrets(target: Value, secrets: &[&str], credential: Option<&str>) -> Value {
    let mut d = json!({"target": target, "payload": {"argv": ["true"]}, "secrets": secrets});
    if let Some(c) = credential {
        d["source"] = json!({"provider": "git", "repository": "https://git.example.com/acme/a.git",
                             "commit_sha": "0123456789abcdef0123456789abcdef01234567",
                             "credential_secret": c});
    }
    d
}

/// Row 5, the original attack and its variants: a member pairs a personal runner and names a
/// workspace secret. To the personal pool, to the runner by id, as a source credential, or in a
/// batch: 400 naming `secrets`. Through the `any` pool: the personal runner never receives
/// it (it skips the job, even while long-polling), a workspace runner does. A member naming an
/// `admin` secret gets 403; an admin may. `any` secrets still reach personal runners, and a
/// scope narrowed after dispatch is enforced when the job is leased.
#[tokio::test]
async fn a_workspace_secret_never_reaches_a_personal_runner_and_admin_secrets_need_an_admin() {
    let app = crate::secrets::app_with_secrets().await;
    let url = app.url(0);
    let root_key = app.key("acme", "root", true).await;
    let alice_key = app.key("acme", "alice", false).await;
    let admin = Client::new(&url, Some(root_key.clone()));
    let alice = Client::new(&url, Some(alice_key.clone()));
    admin.put_secret("NPM_TOKEN", "npm-value-1").await.unwrap();
    admin
        .put_secret_scoped("SHARED", "shared-value-2", Some("any"), None)
        .await
        .unwrap();
    admin
        .put_secret_scoped("PROD_KEY", "prod-value-3", Some("workspace"), Some("admin"))
        .await
        .unwrap();
    // The list shows each secret's scope; the defaults are the safe ones.
    let listed: Vec<(String, String, String)> = alice
        .secrets()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.runners, s.dispatch))
        .collect();
    let triple = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    assert_eq!(
        listed,
        [
            triple("NPM_TOKEN", "workspace", "member"),
            triple("PROD_KEY", "workspace", "admin"),
            triple("SHARED", "any", "member"),
        ]
    );
    for (body, field) in [
        (json!({"value": "v", "runners": "everyone"}), "runners"),
        (json!({"value": "v", "dispatch": "anyone"}), "dispatch"),
    ] {
        let (status, err) = call(&url, &root_key, Method::PUT, "/v1/secrets/BAD", Some(body)).await;
        assert_eq!(status, 400);
        assert!(
            err["error"]["message"].as_str().unwrap().starts_with(field),
            "{err}"
        );
    }

    let (me, personal) = pair(&alice, Tier::Personal, &[], 4).await;
    let refused = |status: u16, err: &Value, field: &str| {
        assert_eq!(status, 400, "{err}");
        assert_eq!(err["error"]["code"], "bad_request");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field}: 'NPM_TOKEN'")),
            "{message}"
        );
        assert!(!message.contains("npm-value-1"));
    };
    let personal_pool = json!({"pool": "personal"});
    let named = json!({"runner_id": me.id});
    for body in [
        with_secrets(personal_pool.clone(), &["NPM_TOKEN"], None),
        with_secrets(named.clone(), &["SHARED", "NPM_TOKEN"], None),
        with_secrets(personal_pool.clone(), &[], Some("NPM_TOKEN")),
    ] {
        let (status, err) = post_job(&url, &alice_key, Some(body)).await;
        refused(status, &err, "secrets");
    }
    let batch = json!({"jobs": [
        with_secrets(personal_pool.clone(), &["SHARED"], None),
        with_secrets(named.clone(), &["NPM_TOKEN"], None),
    ]});
    let (status, err) = post_batch(&url, &alice_key, batch).await;
    refused(status, &err, "jobs[1].secrets");
    // An admin secret: 403 for a member, whatever the target; an admin may name it.
    for target in [json!({"pool": "workspace"}), json!({"pool": "any"})] {
        let (status, err) = post_job(
            &url,
            &alice_key,
            Some(with_secrets(target, &["PROD_KEY"], None)),
        )
        .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (403, Some("forbidden"))
        );
    }
    let batch = json!({"jobs": [with_secrets(json!({"pool": "any"}), &["PROD_KEY"], None)]});
    let (status, _) = post_batch(&url, &alice_key, batch).await;
    assert_eq!(status, 403);
    let (status, _) = post_job(
        &url,
        &root_key,
        Some(with_secrets(
            json!({"pool": "workspace"}),
            &["PROD_KEY"],
            None,
        )),
    )
    .await;
    assert_eq!(status, 201);
    // Nothing refused was parked.
    let db = connect(&app.database_url).await;
    let parked: i64 = db
        .query_one("SELECT count(*) FROM jobs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(parked, 1, "only the admin's job");

    // Through the any pool: the personal runner, long-polling as the job arrives, skips it.
    let waiting = {
        let personal = personal.clone();
        tokio::spawn(async move { crate::support::lease(&personal, 1500, 4).await })
    };
    crate::support::until_waiters(&url, 1, std::time::Duration::from_secs(10)).await;
    let (status, job) = post_job(
        &url,
        &alice_key,
        Some(with_secrets(json!({"pool": "any"}), &["NPM_TOKEN"], None)),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    assert!(
        waiting.await.unwrap().is_empty(),
        "the personal runner got nothing"
    );
    assert!(crate::support::lease(&personal, 0, 4).await.is_empty());
    assert_eq!(job_state(&url, &alice_key, &job).await["state"], "parked");
    // A workspace runner takes it, with the value.
    let (_, shared) = pair(&admin, Tier::Workspace, &[], 4).await;
    let leased = crate::support::lease(&shared, 5000, 4).await;
    let got = leased
        .iter()
        .find(|l| l.id.to_string() == job["id"].as_str().unwrap())
        .expect("the workspace runner leases the any job");
    assert_eq!(
        got.secrets.0.get("NPM_TOKEN").map(String::as_str),
        Some("npm-value-1")
    );

    // An `any` secret still reaches the personal runner.
    let shared_job = || {
        post_created(
            &url,
            &alice_key,
            with_secrets(personal_pool.clone(), &["SHARED"], None),
        )
    };
    shared_job().await;
    let mine = crate::support::lease(&personal, 5000, 4).await;
    assert_eq!(mine.len(), 1);
    assert_eq!(
        mine[0].secrets.0.get("SHARED").map(String::as_str),
        Some("shared-value-2")
    );

    // Narrowed after dispatch: the job that was allowed is rejected at lease, valueless.
    let late = shared_job().await;
    admin.put_secret("SHARED", "shared-value-2").await.unwrap();
    assert!(crate::support::lease(&personal, 0, 4).await.is_empty());
    let late = job_state(&url, &alice_key, &late).await;
    assert_eq!(late["state"], "rejected");
    assert_eq!(late["error"]["reason"], "secret_missing");
    assert!(late["error"]["message"]
        .as_str()
        .unwrap()
        .contains("SHARED"));
    assert_eq!(late["attempts"], 0);
    // The events of every job hold no secret value.
    let events: Vec<String> = db
        .query("SELECT data::text FROM job_events", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(events.iter().all(|e| !e.contains("-value-")));
}

/// Row 7, for events: a page of `GET /v1/jobs/{id}/events` also ends at the byte budget, with
/// `next` the last seq returned, and following `next` reads every event once, in order.
#[tokio::test]
async fn an_events_page_ends_at_the_byte_budget_and_next_reads_on() {
    let app = TestApp::spawn().await;
    let alice = app.operator("acme", "alice", false).await;
    let (_, runner) = pair(&alice, Tier::Personal, &[], 1).await;
    let job = crate::support::dispatch(&alice, crate::support::personal(), json!("x")).await;
    let leased = crate::support::lease(&runner, 5000, 1).await;
    assert_eq!(leased.len(), 1);
    // 8 calls of 15 events of 60 KB: about 7 MB of data.
    for _ in 0..8 {
        let events = (0..15)
            .map(|_| wire::NewEvent {
                kind: "stdout".into(),
                data: Some(json!({"text": "y".repeat(60_000)})),
            })
            .collect();
        runner
            .append_events(job.id, leased[0].epoch, events)
            .await
            .unwrap();
    }
    let first = alice.events(job.id, 0, 0).await.unwrap();
    let n = first.events.len();
    assert!(n > 1 && n < 121, "the first page ended early: {n} events");
    assert_eq!(first.next, i64::from(first.events[n - 1].seq));
    let mut seqs: Vec<i64> = first.events.iter().map(|e| i64::from(e.seq)).collect();
    let mut after = first.next;
    loop {
        let page = alice.events(job.id, after, 0).await.unwrap();
        if page.events.is_empty() {
            break;
        }
        seqs.extend(page.events.iter().map(|e| i64::from(e.seq)));
        after = page.next;
    }
    // The `parked` and `leased` state events, then the 120 appended.
    assert_eq!(seqs, (1..=122).collect::<Vec<i64>>());
}
