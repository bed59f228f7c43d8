//! Conditional requests answered from the cache (RFC 9110 §13.2.2's order), over a real proxy
//! and origin on 127.0.0.1: `If-Match` and `If-Unmodified-Since` that fail get 412 (a hit, the
//! body not sent), `If-None-Match` and `If-Modified-Since` 304, and a `Range` is honoured only
//! when `If-Range` matches strongly; otherwise the whole 200. The same on a fresh hit and on a
//! stale answer. On a miss the origin decides, and its 412 is never stored.

mod support;

use http::{Method, StatusCode};
use std::time::Duration;
use support::origin::{self, content};
use support::proxy::{start, Got, Http};
use support::raw_origin::RawOrigin;

const ADMIT_ALL: &str = "[admission]\npolicy = \"admit-all\"";
/// The test origin's Last-Modified for every path.
const LM: &str = "Wed, 01 Jan 2025 00:00:00 GMT";
const BEFORE_LM: &str = "Tue, 31 Dec 2024 00:00:00 GMT";
const AFTER_LM: &str = "Thu, 02 Jan 2025 00:00:00 GMT";

fn cache_status(g: &Got) -> &str {
    g.header("cache-status").unwrap_or_default()
}

#[tokio::test]
async fn preconditions_and_if_range_are_answered_from_a_hit() {
    let o = origin::start().await;
    let (p, _) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let path = "/cache/c?size=1000";
    let body = content("/cache/c", 1000);
    assert_eq!(c.get(path).await.x_cache(), "MISS");
    // The origin's strong ETag; hyper's Date (now) is well after its Last-Modified, so the
    // stored Last-Modified is a strong validator too (§8.8.2.2).
    let etag = c.get(path).await.header("etag").unwrap().to_string();
    let weak = format!("W/{etag}");
    let send = |headers: Vec<(&'static str, String)>, method: Method| {
        let c = &c;
        async move {
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            c.send(method, path, &h).await
        }
    };
    let get = |headers: Vec<(&'static str, String)>| send(headers, Method::GET);
    let range = || ("range", "bytes=10-19".to_string());

    // If-Range: a range only when it matches, by strong comparison or the exact date.
    for (if_range, partial) in [
        (etag.clone(), true),
        (LM.to_string(), true),
        ("\"other\"".to_string(), false),
        (weak.clone(), false),
        (AFTER_LM.to_string(), false),
        ("garbage".to_string(), false),
    ] {
        let g = get(vec![range(), ("if-range", if_range.clone())]).await;
        assert_eq!(g.x_cache(), "HIT", "If-Range {if_range}");
        if partial {
            assert_eq!(g.status, StatusCode::PARTIAL_CONTENT, "If-Range {if_range}");
            assert_eq!(g.header("content-range"), Some("bytes 10-19/1000"));
            assert_eq!(g.bytes(), &body[10..20]);
        } else {
            assert_eq!(g.status, StatusCode::OK, "If-Range {if_range}");
            assert_eq!(g.header("content-range"), None);
            assert_eq!(g.bytes(), &body[..], "If-Range {if_range}: the whole body");
        }
    }

    // If-Match: strong comparison, `*` matches what is stored; a failure is 412, not the body.
    for (if_match, ok) in [
        (etag.clone(), true),
        ("*".to_string(), true),
        (format!("\"other\", {etag}"), true),
        ("\"other\"".to_string(), false),
        (weak.clone(), false),
    ] {
        let g = get(vec![("if-match", if_match.clone())]).await;
        assert_eq!(g.x_cache(), "HIT", "If-Match {if_match}");
        if ok {
            assert_eq!(g.status, StatusCode::OK, "If-Match {if_match}");
            assert_eq!(g.bytes(), &body[..]);
        } else {
            assert_eq!(
                g.status,
                StatusCode::PRECONDITION_FAILED,
                "If-Match {if_match}"
            );
            assert_ne!(g.bytes(), &body[..]);
            assert!(
                cache_status(&g).starts_with("secondhit; hit"),
                "{}",
                cache_status(&g)
            );
        }
    }
    // A resumed download of another version: 412, never a range of this one.
    let g = get(vec![range(), ("if-match", "\"other\"".into())]).await;
    assert_eq!(g.status, StatusCode::PRECONDITION_FAILED);
    let g = get(vec![range(), ("if-match", etag.clone())]).await;
    assert_eq!(g.status, StatusCode::PARTIAL_CONTENT);

    // If-Unmodified-Since: 412 when the stored Last-Modified is later; ignored under If-Match.
    let g = get(vec![("if-unmodified-since", BEFORE_LM.into())]).await;
    assert_eq!(
        (g.status, g.x_cache()),
        (StatusCode::PRECONDITION_FAILED, "HIT")
    );
    let g = get(vec![("if-unmodified-since", AFTER_LM.into())]).await;
    assert_eq!(g.status, StatusCode::OK);
    let g = get(vec![
        ("if-match", etag.clone()),
        ("if-unmodified-since", BEFORE_LM.into()),
    ])
    .await;
    assert_eq!(g.status, StatusCode::OK);
    let g = get(vec![("if-unmodified-since", "not a date".into())]).await;
    assert_eq!(g.status, StatusCode::OK);

    // A passing If-Match, then If-None-Match: 304.
    let g = get(vec![
        ("if-match", etag.clone()),
        ("if-none-match", etag.clone()),
    ])
    .await;
    assert_eq!(g.status, StatusCode::NOT_MODIFIED);
    // A failing one comes first: 412, not 304.
    let g = get(vec![
        ("if-match", "\"other\"".into()),
        ("if-none-match", etag.clone()),
    ])
    .await;
    assert_eq!(g.status, StatusCode::PRECONDITION_FAILED);

    // HEAD: preconditions apply, ranges do not (GET is the only method with range handling).
    let g = send(vec![("if-match", "\"other\"".into())], Method::HEAD).await;
    assert_eq!(g.status, StatusCode::PRECONDITION_FAILED);
    let g = send(vec![range()], Method::HEAD).await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::OK, "HIT"));
    assert_eq!(g.header("content-length"), Some("1000"));

    // Every answer came from the one stored copy.
    assert_eq!(o.count(path), 1);
    p.shutdown().await;
}

#[tokio::test]
async fn a_stale_answer_evaluates_the_preconditions_too() {
    let o = origin::start().await;
    let (p, clock) = start(&o.url(), ADMIT_ALL).await;
    let c = Http::new(p.addr);
    let path = "/reval/s?cc=max-age%3D1%2C%20stale-while-revalidate%3D60";
    assert_eq!(c.get(path).await.x_cache(), "MISS");
    clock.advance(Duration::from_secs(2));
    let g = c
        .send(Method::GET, path, &[("if-match", "\"other\"")])
        .await;
    assert_eq!(
        (g.status, g.x_cache()),
        (StatusCode::PRECONDITION_FAILED, "STALE")
    );
    let cs = cache_status(&g);
    assert!(
        cs.starts_with("secondhit; hit") && cs.contains("detail=stale-while-revalidate"),
        "{cs}"
    );
    p.shutdown().await;
}

/// On a miss the request goes to the origin, which decides; a 412 it sends is passed on and
/// never stored, even when it says it may be.
#[tokio::test]
async fn an_origin_412_on_a_miss_is_passed_on_and_not_stored() {
    let o = RawOrigin::start(|head| {
        if head.to_ascii_lowercase().contains("\r\nif-match:") {
            b"HTTP/1.1 412 Precondition Failed\r\ncache-control: max-age=60\r\ncontent-length: 4\r\n\r\nnope"
                .to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\netag: \"v1\"\r\ncontent-length: 4\r\n\r\nbody"
                .to_vec()
        }
    })
    .await;
    // Second-hit: the first request of the URL is forwarded as it came (deferred).
    let (p, _) = start(&o.url(), "").await;
    let c = Http::new(p.addr);
    let g = c.send(Method::GET, "/x", &[("if-match", "\"v0\"")]).await;
    assert_eq!(g.status, StatusCode::PRECONDITION_FAILED);
    assert_ne!(g.x_cache(), "HIT");
    assert!(
        o.requests()[0]
            .to_ascii_lowercase()
            .contains("if-match: \"v0\""),
        "the condition reached the origin: {:?}",
        o.requests()
    );
    // The next requests are the stored 200, never the 412.
    for _ in 0..3 {
        let g = c.get("/x").await;
        assert_eq!((g.status, g.bytes()), (StatusCode::OK, &b"body"[..]));
    }
    let g = c.send(Method::GET, "/x", &[("if-match", "\"v1\"")]).await;
    assert_eq!((g.status, g.x_cache()), (StatusCode::OK, "HIT"));
    assert_eq!(g.bytes(), b"body");
    p.shutdown().await;
}
