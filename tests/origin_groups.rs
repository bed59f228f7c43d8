//! Origin groups against real origins on 127.0.0.1:0: the split by weight, backups only when no
//! primary is left, failover of a GET that failed before any byte reached the client, ejection
//! and readmission on the proxy's own (injected) clock, a request with a body never sent twice,
//! probes taking a server out and bringing it back, every server down (stale, else 503), and a
//! reload that keeps what health knows.

mod support;

use http::{Method, StatusCode};
use serde_json::Value;
use std::time::Duration;
use support::origin::{self, TestOrigin};
use support::proxy::{admin, start, Http, RunningProxy};

/// `[origins.g]` of these origins' URLs, with `options` after them.
fn group_of(servers: &[String], options: &str) -> String {
    format!(
        "[origins.g]\nservers = [{}]\n{options}\n",
        servers.join(", ")
    )
}

fn url(o: &TestOrigin) -> String {
    format!("\"{}\"", o.url())
}

async fn origins_view(p: &RunningProxy) -> Value {
    let (status, body) = admin(p.admin_addr, "/origins", false).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_str(&body).unwrap()
}

/// The servers of group `g` in `/origins`.
async fn servers(p: &RunningProxy) -> Vec<Value> {
    let v = origins_view(p).await;
    v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "g")
        .unwrap()["servers"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn requests_split_by_weight_and_backups_wait_for_every_primary() {
    let (a, b, c) = (
        origin::start().await,
        origin::start().await,
        origin::start().await,
    );
    let extra = group_of(
        &[
            url(&a),
            format!("{{ url = {}, weight = 2 }}", url(&b)),
            format!("{{ url = {}, backup = true }}", url(&c)),
        ],
        "",
    );
    let (p, _) = start("g", &extra).await;
    let client = Http::new(p.addr);
    for i in 0..300 {
        let g = client.get(&format!("/nostore/{i}")).await;
        assert_eq!(g.status, StatusCode::OK);
    }
    assert_eq!((a.total(), b.total(), c.total()), (100, 200, 0));
    let view = servers(&p).await;
    assert_eq!(view.len(), 3);
    assert_eq!(view[1]["requests"], 200);
    assert_eq!(view[2]["up"], true);
    assert_eq!(view[0]["url"], a.url());
    p.shutdown().await;
}

#[tokio::test]
async fn a_get_that_failed_before_any_byte_goes_to_another_server_and_a_failing_one_is_ejected_until_its_time_is_up(
) {
    let (a, b) = (origin::start().await, origin::start().await);
    let b_addr = b.addr;
    let extra = group_of(
        &[url(&a), url(&b)],
        "[origins.g.outlier]\nconsecutive = 2\nejection = \"10s\"\nmax_ejection = \"60s\"",
    );
    let (p, clock) = start("g", &extra).await;
    let client = Http::new(p.addr);
    b.stop();
    // Every request is answered: those sent to b first (refused) are tried on a.
    for i in 0..10 {
        let g = client.get(&format!("/nostore/{i}")).await;
        assert_eq!(g.status, StatusCode::OK, "request {i}");
    }
    assert_eq!(a.total(), 10);
    let view = servers(&p).await;
    // Two refusals in a row ejected b; after that no request went to it.
    assert_eq!(view[1]["up"], false);
    assert_eq!(view[1]["ejections"], 1);
    assert_eq!(view[1]["errors_by_kind"]["connect"], 2);
    assert_eq!(view[1]["requests"], 2);
    let (_, metrics) = admin(p.admin_addr, "/metrics", false).await;
    assert!(
        metrics.contains("secondhit_origin_retries_total 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "secondhit_origin_server_up{{group=\"g\",server=\"http://{b_addr}\"}} 0"
        )),
        "{metrics}"
    );
    // b comes back, but stays out until its ejection ends on the proxy's clock.
    let b = origin::start_at(b_addr).await;
    for i in 10..14 {
        assert_eq!(
            client.get(&format!("/nostore/{i}")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(b.total(), 0);
    clock.advance(Duration::from_secs(10));
    for i in 14..18 {
        assert_eq!(
            client.get(&format!("/nostore/{i}")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(b.total(), 2);
    assert_eq!(servers(&p).await[1]["up"], true);
    p.shutdown().await;
}

#[tokio::test]
async fn retry_on_statuses_and_a_request_with_a_body_is_never_sent_twice() {
    let (a, b) = (origin::start().await, origin::start().await);
    let extra = group_of(
        &[url(&a), url(&b)],
        "retry_on = [\"503\"]\n[origins.g.outlier]\nconsecutive = 0",
    );
    let (p, _) = start("g", &extra).await;
    let client = Http::new(p.addr);
    // A 503 from the first server: the second is asked, and answers 503 too; the client gets
    // the last answer.
    let g = client.get("/fail/503").await;
    assert_eq!(g.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.count("/fail/503") + b.count("/fail/503"), 2);
    // A 502 is not in retry_on: one request.
    let g = client.get("/fail/502").await;
    assert_eq!(g.status, StatusCode::BAD_GATEWAY);
    assert_eq!(a.count("/fail/502") + b.count("/fail/502"), 1);
    // A POST whose answer is a 503 reached an origin with its body: never sent again.
    let g = client
        .send(Method::POST, "/reval/post?post_status=503", &[])
        .await;
    assert_eq!(g.status, StatusCode::SERVICE_UNAVAILABLE);
    let posts = a.count("/reval/post?post_status=503") + b.count("/reval/post?post_status=503");
    assert_eq!(posts, 1);
    p.shutdown().await;
}

/// Polls `/origins` (10 s at most) until server `i` of group `g` is up or down.
async fn until_up(p: &RunningProxy, i: usize, up: bool) {
    for _ in 0..1000 {
        if servers(p).await[i]["up"] == up {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("server {i} never became up={up}");
}

#[tokio::test]
async fn probes_take_a_dead_server_out_and_with_every_server_down_stale_is_served_else_503() {
    let a = origin::start().await;
    let a_addr = a.addr;
    let extra = format!(
        "{}[cache]\nstale_if_error = \"1h\"\n",
        group_of(
            &[url(&a)],
            "[origins.g.health]\npath = \"/fail/ok\"\ninterval = \"50ms\"\ntimeout = \"50ms\"\nrise = 1\nfall = 1",
        )
    );
    let (p, clock) = start("g", &extra).await;
    let client = Http::new(p.addr);
    for _ in 0..2 {
        client.get("/short-ttl/s").await;
    }
    assert_eq!(client.get("/short-ttl/s").await.x_cache(), "HIT");
    a.stop();
    until_up(&p, 0, false).await;
    // Stale: the stored copy, past its freshness, within stale-if-error.
    clock.advance(Duration::from_secs(10));
    let g = client.get("/short-ttl/s").await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::OK, "STALE"));
    // Nothing stored: 503, Retry-After, and Cache-Status says why.
    let g = client.get("/cache/never-stored").await;
    assert_eq!(g.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(g.header("retry-after"), Some("1"));
    assert!(g
        .header("cache-status")
        .unwrap()
        .contains("detail=origin-down"));
    // The server comes back: the probes bring it up.
    let a = origin::start_at(a_addr).await;
    until_up(&p, 0, true).await;
    assert_eq!(
        client.get("/cache/never-stored").await.status,
        StatusCode::OK
    );
    assert!(a.total() >= 1);
    let view = servers(&p).await;
    assert_eq!(view[0]["probe_changes"], 2);
    p.shutdown().await;
}

#[tokio::test]
async fn a_reload_keeps_the_health_of_servers_that_stay() {
    let (a, b) = (origin::start().await, origin::start().await);
    let dir = std::env::temp_dir().join(format!("secondhit-groups-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("serve.toml");
    let write = |servers: &[String]| {
        let text = format!(
            "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\norigin = \"g\"\n{}",
            group_of(
                servers,
                "[origins.g.outlier]\nconsecutive = 1\nejection = \"1h\"\nmax_ejection = \"1h\""
            )
        );
        std::fs::write(&file, text).unwrap();
    };
    write(&[url(&a), url(&b)]);
    let config = secondhit::config::Config::from_file(&file)
        .unwrap()
        .validate()
        .unwrap();
    let source_file = file.clone();
    let source: secondhit::server::ConfigSource =
        std::sync::Arc::new(move || secondhit::config::Config::from_file(&source_file)?.validate());
    let clock = std::sync::Arc::new(secondhit::clock::ManualClock::new(Duration::from_secs(
        1000,
    )));
    let p = secondhit::server::start_with_source(config, clock, Some(source))
        .await
        .unwrap();
    let client = Http::new(p.addr);
    b.stop();
    for i in 0..4 {
        assert_eq!(
            client.get(&format!("/nostore/{i}")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(servers(&p).await[1]["ejections"], 1);
    // A third server joins; b stays ejected, and its counts stay.
    let c = origin::start().await;
    write(&[url(&a), url(&b), url(&c)]);
    let (status, body) = admin(p.admin_addr, "/reload", true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = servers(&p).await;
    assert_eq!(view.len(), 3);
    assert_eq!(
        (view[1]["up"].clone(), view[1]["ejections"].clone()),
        (Value::Bool(false), 1.into())
    );
    assert_eq!(view[2]["up"], true);
    for i in 4..10 {
        assert_eq!(
            client.get(&format!("/nostore/{i}")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(c.total(), 3);
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_origin_flag_naming_a_group_must_be_the_only_one() {
    let (a, b) = (origin::start().await, origin::start().await);
    let out = std::process::Command::new(support::bin())
        .args([
            "serve",
            "--origin",
            &a.url(),
            "--origin",
            &b.url(),
            "--origin",
            "g",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--origin g: a group's name must be the only --origin"),
        "{err}"
    );
}
