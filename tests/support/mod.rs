//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// A trace bundled in this repository's `traces/`.
pub fn bundled(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces")
        .join(name)
}

/// A trace in the team's `../shared/traces/` (beside the repository, also in CI).
pub fn shared(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("shared")
        .join("traces")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: the tests expect the team's shared/ folder beside the repository",
        p.display()
    );
    p
}

/// The `secondhit` binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_secondhit"))
}

pub mod origin;
pub mod proxy;
pub mod raw_origin;
