//! Hot reload (POST /reload on the admin listener, and SIGHUP): a changed file swaps routes,
//! origins, limits and the cache's size in while the cache and the admission filter keep what
//! they hold; a broken file changes nothing, answers 400 naming the file and place, and is
//! counted.

mod support;

use http::StatusCode;
use secondhit::clock::ManualClock;
use secondhit::config::Config;
use secondhit::server::{self, ConfigSource};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use support::origin;
use support::proxy::{admin, Http};

struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str) -> ConfigFile {
        ConfigFile(std::env::temp_dir().join(format!(
            "secondhit-reload-{name}-{}.toml",
            std::process::id()
        )))
    }
    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
    fn source(&self) -> ConfigSource {
        let path = self.0.clone();
        Arc::new(move || Config::from_file(&path)?.validate())
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn config_text(origin: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\norigin = \"{origin}\"\n{extra}"
    )
}

async fn start(file: &ConfigFile) -> server::Running {
    let config = Config::from_file(&file.0).unwrap().validate().unwrap();
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_000)));
    server::start_with_source(config, clock, Some(file.source()))
        .await
        .unwrap()
}

fn metric(text: &str, line: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{line} missing"))
}

#[tokio::test]
async fn a_reload_swaps_settings_in_and_keeps_the_cache_and_the_filter() {
    let (a, b) = (origin::start().await, origin::start().await);
    let file = ConfigFile::new("swap");
    file.write(&config_text(&a.url(), "[cache]\ncapacity = \"1MiB\""));
    let p = start(&file).await;
    let c = Http::new(p.addr);
    assert_eq!(c.get("/cache/kept").await.x_cache(), "DEFERRED");
    assert_eq!(c.get("/cache/kept").await.x_cache(), "MISS");
    assert_eq!(c.get("/cache/seen").await.x_cache(), "DEFERRED");

    // Another origin, a bigger cache, another window and sizing for the filter.
    file.write(&config_text(
        &b.url(),
        "[cache]\ncapacity = \"4MiB\"\n[admission]\nwindow = \"30m\"\nexpected_items = 2000000",
    ));
    let (s, body) = admin(p.admin_addr, "/reload", true).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(body.contains("\"reloaded\":true"), "{body}");
    // The cache kept its object; the filter kept its sighting (a second request admits).
    assert_eq!(c.get("/cache/kept").await.x_cache(), "HIT");
    assert_eq!(c.get("/cache/seen").await.x_cache(), "MISS");
    // New requests go to the new origin.
    assert_eq!(c.get("/cache/new").await.x_cache(), "DEFERRED");
    assert_eq!((a.count("/cache/new"), b.count("/cache/new")), (0, 1));
    assert_eq!(b.count("/cache/seen"), 1);
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert_eq!(
        metric(&m, "secondhit_config_reloads_total{result=\"ok\"} "),
        1
    );
    assert!(
        metric(&m, "secondhit_cache_bytes ") > 0,
        "the store moved with its contents"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn a_broken_file_changes_nothing_and_says_where() {
    let (a, b) = (origin::start().await, origin::start().await);
    let file = ConfigFile::new("broken");
    file.write(&config_text(&a.url(), ""));
    let p = start(&file).await;
    let c = Http::new(p.addr);
    // A syntax error, then a value that does not validate.
    for broken in [
        format!("{}\n[cache\n", config_text(&b.url(), "")),
        config_text(
            &b.url(),
            "[cache]\ncapacity = \"1KiB\"\nmax_object_size = \"2KiB\"",
        ),
    ] {
        file.write(&broken);
        let (s, body) = admin(p.admin_addr, "/reload", true).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body.trim().lines().count(), 1, "{body}");
        assert!(
            body.contains("line") || body.contains("cache.max_object_size"),
            "{body}"
        );
    }
    // Still on the old origin.
    c.get("/cache/x").await;
    assert_eq!((a.count("/cache/x"), b.count("/cache/x")), (1, 0));
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert_eq!(
        metric(&m, "secondhit_config_reloads_total{result=\"error\"} "),
        2
    );
    assert_eq!(
        metric(&m, "secondhit_config_reloads_total{result=\"ok\"} "),
        0
    );
    p.shutdown().await;
}

#[tokio::test]
async fn what_a_reload_cannot_change_is_said() {
    let o = origin::start().await;
    let file = ConfigFile::new("notes");
    file.write(&config_text(&o.url(), ""));
    let p = start(&file).await;
    file.write(&config_text(
        &o.url(),
        "workers = 5\n[admission]\npolicy = \"nth-hit:3\"\n[limits]\nmax_connections = 10",
    ));
    let (s, body) = admin(p.admin_addr, "/reload", true).await;
    assert_eq!(s, StatusCode::OK);
    assert!(body.contains("another policy needs a restart"), "{body}");
    assert!(body.contains("limits.max_connections changed"), "{body}");
    assert!(body.contains("workers changed"), "{body}");
    // The policy stayed second-hit: a second request admits.
    let c = Http::new(p.addr);
    assert_eq!(c.get("/cache/p").await.x_cache(), "DEFERRED");
    assert_eq!(c.get("/cache/p").await.x_cache(), "MISS");
    p.shutdown().await;
    // Without a file there is nothing to reload.
    let config = Config::from_toml(&config_text(&o.url(), ""))
        .unwrap()
        .validate()
        .unwrap();
    let p = server::start(config, Arc::new(ManualClock::default()))
        .await
        .unwrap();
    let (s, body) = admin(p.admin_addr, "/reload", true).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(body.contains("without --config"), "{body}");
    p.shutdown().await;
}
