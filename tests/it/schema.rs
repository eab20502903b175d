//! Every statement in `sql/` prepares against the migrated schema and returns every column its
//! row mapping reads, so a renamed or dropped column fails here and never in production.

use leasehold::store::rows::MAPPED;

use crate::support::TestApp;

#[tokio::test]
async fn every_statement_prepares_and_returns_what_its_mapping_reads() {
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
    for (file, wanted) in MAPPED {
        let (_, columns) = results
            .iter()
            .find(|(f, _)| f == file)
            .unwrap_or_else(|| panic!("{file} is not in sql/"));
        let names: Vec<&str> = columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let missing: Vec<_> = wanted.iter().filter(|w| !names.contains(w)).collect();
        assert!(
            missing.is_empty(),
            "{file} does not return {missing:?} (it returns {names:?})"
        );
    }
}
