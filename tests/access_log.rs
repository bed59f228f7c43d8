//! The access log: one line per request with the cache outcome and the origin's time, in JSON
//! or combined format, to a file that is reopened for rotation and retargeted on reload.

mod support;

use secondhit::clock::ManualClock;
use secondhit::config::Config;
use secondhit::server::{self, ConfigSource};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::origin;
use support::proxy::{admin, raw, Http};

/// A fresh directory for one test's files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("secondhit-access-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn log_config(origin: &str, format: &str, file: &Path) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\norigin = \"{origin}\"\n\
         [log]\naccess_log = true\naccess_log_format = \"{format}\"\naccess_log_file = {:?}\n",
        file.display().to_string()
    )
}

#[tokio::test]
async fn json_lines_carry_the_outcome_bytes_and_origin_time() {
    let o = origin::start().await;
    let d = dir("json");
    let file = d.join("access.log");
    let config = Config::from_toml(&log_config(&o.url(), "json", &file))
        .unwrap()
        .validate()
        .unwrap();
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_000)));
    let p = server::start(config, clock).await.unwrap();
    let c = Http::new(p.addr);
    let ua = [("user-agent", "tester/1 \"quoted\"")];
    let mut sizes = Vec::new();
    for want in ["DEFERRED", "MISS", "HIT"] {
        let got = c
            .send(http::Method::GET, "/cache/logged?size=1234", &ua)
            .await;
        assert_eq!(got.x_cache(), want);
        sizes.push(got.bytes().len());
    }
    let refused = raw(
        p.addr,
        b"GET /x HTTP/1.1\r\nHost: bad host\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(p.proxy.flush_access_log(Duration::from_secs(10)));

    let got = lines(&file);
    assert_eq!(got.len(), 4, "{got:#?}");
    let v: Vec<serde_json::Value> = got
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, want) in ["DEFERRED", "MISS", "HIT"].iter().enumerate() {
        assert_eq!(v[i]["cache"], *want);
        assert_eq!(v[i]["method"], "GET");
        assert_eq!(v[i]["path"], "/cache/logged?size=1234");
        assert_eq!(v[i]["status"], 200);
        assert_eq!(v[i]["bytes"], sizes[i] as u64);
        assert_eq!(v[i]["client"], "127.0.0.1");
        assert!(v[i]["total_ms"].as_f64().unwrap() > 0.0);
        assert!(v[i]["time"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(sizes, [1234, 1234, 1234]);
    // The origin was asked for the first two only.
    assert!(v[0]["origin_ms"].as_f64().is_some());
    assert!(v[1]["origin_ms"].as_f64().is_some());
    assert!(v[2]["origin_ms"].is_null());
    assert!(v[2]["cache_status"].as_str().unwrap().contains("hit"));
    // Refused before the origin: logged too.
    assert_eq!(v[3]["status"], 400);
    assert_eq!(v[3]["origin_ms"], serde_json::Value::Null);
    let (_, m) = admin(p.admin_addr, "/metrics", false).await;
    assert!(
        m.contains("secondhit_access_log_dropped_total 0"),
        "nothing dropped"
    );
    p.shutdown().await;
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test]
async fn rotation_reopens_and_reload_retargets() {
    let o = origin::start().await;
    let d = dir("rotate");
    let (first, second) = (d.join("access.log"), d.join("other.log"));
    let config_path = d.join("secondhit.toml");
    std::fs::write(&config_path, log_config(&o.url(), "combined", &first)).unwrap();
    let path = config_path.clone();
    let source: ConfigSource = Arc::new(move || Config::from_file(&path)?.validate());
    let config = Config::from_file(&config_path).unwrap().validate().unwrap();
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_000)));
    let p = server::start_with_source(config, clock, Some(source))
        .await
        .unwrap();
    let c = Http::new(p.addr);
    c.get("/cache/a").await;
    assert!(p.proxy.flush_access_log(Duration::from_secs(10)));

    // logrotate's way: rename, then signal. Until the reopen lines go to the renamed file.
    let rotated = d.join("access.log.1");
    std::fs::rename(&first, &rotated).unwrap();
    c.get("/cache/b").await;
    assert!(p.proxy.flush_access_log(Duration::from_secs(10)));
    p.proxy.reopen_access_log();
    c.get("/cache/c").await;
    assert!(p.proxy.flush_access_log(Duration::from_secs(10)));

    // A reload moves the log to another file and format.
    std::fs::write(&config_path, log_config(&o.url(), "json", &second)).unwrap();
    let (s, body) = admin(p.admin_addr, "/reload", true).await;
    assert_eq!(s.as_u16(), 200, "{body}");
    c.get("/cache/d").await;
    assert!(p.proxy.flush_access_log(Duration::from_secs(10)));

    // A reload to a file that cannot be opened changes nothing and says which file.
    let bad = d.join("no-such-dir").join("x.log");
    std::fs::write(&config_path, log_config(&o.url(), "json", &bad)).unwrap();
    let (s, body) = admin(p.admin_addr, "/reload", true).await;
    assert_eq!(s.as_u16(), 400, "{body}");
    assert!(body.contains("no-such-dir"), "{body}");
    c.get("/cache/e").await;
    p.shutdown().await; // flushes the log

    let old = lines(&rotated);
    let renamed_target: Vec<&str> = old
        .iter()
        .map(|l| l.split('"').nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        renamed_target,
        ["GET /cache/a HTTP/1.1", "GET /cache/b HTTP/1.1"]
    );
    assert!(old[0].starts_with("127.0.0.1 - - ["), "{}", old[0]);
    assert!(old[0].contains(" 200 ") && old[0].contains("cache=DEFERRED origin_ms="));
    let reopened = lines(&first);
    assert_eq!(reopened.len(), 1, "{reopened:#?}");
    assert!(reopened[0].contains("GET /cache/c HTTP/1.1"));
    let json = lines(&second);
    let paths: Vec<String> = json
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["path"].to_string())
        .collect();
    assert_eq!(paths, ["\"/cache/d\"", "\"/cache/e\""]);
    std::fs::remove_dir_all(&d).unwrap();
}
