//! Every statement in `sql/` prepares against the migrated schema, so a renamed column fails
//! here and never in production.

use crate::support::TestApp;

#[tokio::test]
async fn every_statement_prepares_against_the_migrated_schema() {
    let app = TestApp::spawn().await;
    let results = app.store.prepare_all().await.unwrap();
    assert_eq!(results.len(), leasehold::store::sql::ALL.len());
    let sql_files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/sql"))
        .unwrap()
        .count();
    assert_eq!(
        sql_files,
        results.len(),
        "every file in sql/ is listed in store::sql::ALL"
    );
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "statements that do not prepare: {failed:#?}"
    );
}
