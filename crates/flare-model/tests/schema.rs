//! The committed JSON Schema of the findings document is the one the types generate.
//! After changing a type, regenerate it with `FLARE_BLESS=1 cargo test -p flare-model
//! --test schema` and review the diff: fields may only be added.

use flare_model::FindingsDocument;

const SCHEMA_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../schema/findings.schema.json"
);

#[test]
fn committed_schema_matches_the_types() {
    let generated = serde_json::to_string_pretty(&FindingsDocument::schema()).unwrap() + "\n";
    if std::env::var_os("FLARE_BLESS").is_some() {
        std::fs::write(SCHEMA_PATH, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(SCHEMA_PATH)
        .unwrap_or_else(|e| panic!("{SCHEMA_PATH}: {e}; run with FLARE_BLESS=1 to write it"));
    assert!(
        committed == generated,
        "{SCHEMA_PATH} differs from the schema the types generate; run with FLARE_BLESS=1 and review the diff"
    );
}
