//! The admin listener: purge, reload and metrics are powerful, so a listener that is not on
//! loopback needs a token, and a token, once set, guards everything but `/healthz`.

mod support;

use http::StatusCode;
use secondhit::config::Config;
use support::origin;
use support::proxy::{admin_with, start};

#[tokio::test]
async fn a_token_guards_every_admin_endpoint_but_healthz() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), "admin_token = \"s3cret\"").await;
    let a = p.admin_addr;
    for (path, post) in [
        ("/metrics", false),
        ("/purge-all", true),
        ("/purge?url=http://x/", true),
    ] {
        assert_eq!(
            admin_with(a, path, post, None).await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        assert_eq!(
            admin_with(a, path, post, Some("wrong")).await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        assert_eq!(
            admin_with(a, path, post, Some("s3cre")).await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        assert_eq!(
            admin_with(a, path, post, Some("s3cret")).await.0,
            StatusCode::OK,
            "{path}"
        );
    }
    assert_eq!(
        admin_with(a, "/healthz", false, None).await.0,
        StatusCode::OK
    );
    p.shutdown().await;
}

#[tokio::test]
async fn a_token_file_works_like_a_token() {
    let o = origin::start().await;
    let file = std::env::temp_dir().join(format!("secondhit-token-{}", std::process::id()));
    std::fs::write(&file, "from-file\nignored second line\n").unwrap();
    let (p, _) = start(
        &o.url(),
        &format!("admin_token_file = \"{}\"", file.display()),
    )
    .await;
    assert_eq!(
        admin_with(p.admin_addr, "/metrics", false, Some("from-file"))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        admin_with(p.admin_addr, "/metrics", false, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    p.shutdown().await;
    std::fs::remove_file(file).unwrap();
}

#[test]
fn a_non_loopback_admin_listener_needs_a_token() {
    let base = "origin = \"http://127.0.0.1:1\"\nadmin_listen = \"0.0.0.0:9090\"\n";
    let e = Config::from_toml(base)
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("admin_listen") && e.contains("not a loopback") && e.contains("admin_token"),
        "{e}"
    );
    assert!(Config::from_toml(&format!("{base}admin_token = \"t\""))
        .unwrap()
        .validate()
        .is_ok());
    let e = Config::from_toml(&format!("{base}admin_token_file = \"/nonexistent/token\""))
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/token"), "{e}");
    let e = Config::from_toml(&format!("{base}admin_token = \"  \""))
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.contains("admin_token") && e.contains("empty"), "{e}");
    // On loopback no token is needed.
    assert!(Config::from_toml("origin = \"http://127.0.0.1:1\"")
        .unwrap()
        .validate()
        .is_ok());
}
