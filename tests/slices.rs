//! Large objects in slices (`cache.slice_size`), against a real origin that honours ranges,
//! both on 127.0.0.1:0: which ranges reach the origin, which slices are stored, the bytes the
//! client gets, one version of an object, and origins that break the rules.

mod support;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use secondhit::metrics::SliceSource;
use std::time::Duration;
use support::origin::{self, media, TestOrigin};
use support::proxy::{get_until, read_rest, start, Http, RunningProxy};

const KIB64: u64 = 65_536;
/// Five slices of 64 KiB, the last one short.
const SIZE: usize = 300_000;

async fn sliced(o: &TestOrigin, policy: &str) -> RunningProxy {
    let extra = format!("[cache]\nslice_size = \"64KiB\"\n[admission]\npolicy = \"{policy}\"\n");
    start(&o.url(), &extra).await.0
}

/// `bytes=S-E` of the aligned slices `first..=last` of a `SIZE`-byte object, as the proxy asks
/// the origin.
fn slice_ranges(slices: std::ops::RangeInclusive<u64>) -> Vec<String> {
    slices
        .map(|i| {
            let end = (i * KIB64 + KIB64 - 1).min(SIZE as u64 - 1);
            format!("bytes={}-{end}", i * KIB64)
        })
        .collect()
}

/// A counter's value in the proxy's `/metrics` text.
fn metric(p: &RunningProxy, name: &str) -> u64 {
    let text = p.proxy.render_metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

#[tokio::test]
async fn each_slice_is_admitted_on_its_second_request_and_then_served_from_memory() {
    let o = origin::start().await;
    let p = sliced(&o, "second-hit").await;
    let c = Http::new(p.addr);
    let url = "/media/a?size=300000";
    let want = media("/media/a", 0, SIZE);
    for (round, x_cache) in [(1, "MISS"), (2, "MISS"), (3, "HIT")] {
        let g = c.get(url).await;
        assert_eq!(g.status, StatusCode::OK, "round {round}");
        assert_eq!(g.header("content-length"), Some("300000"));
        assert!(g.header("content-range").is_none());
        assert_eq!(g.bytes(), &want[..], "round {round}");
        assert_eq!(g.x_cache(), x_cache, "round {round}");
        let fetched = o.media_ranges("/media/a");
        match round {
            // The first two fetch every slice by its own range: seen once, then stored.
            1 | 2 => assert_eq!(fetched, slice_ranges(0..=4), "round {round}"),
            _ => assert!(
                fetched.is_empty(),
                "round 3 reached the origin: {fetched:?}"
            ),
        }
    }
    assert_eq!(p.proxy.metrics().stores(), 5);
    assert_eq!(p.proxy.metrics().slices(SliceSource::Memory), 5);
    assert_eq!(p.proxy.metrics().slices(SliceSource::Origin), 10);
    // Freshness counts from the response's Date (one-second resolution): 59 or 60 s left.
    let hit = c.get(url).await;
    let status = hit.header("cache-status").unwrap();
    assert!(
        ["59", "60"]
            .map(|ttl| format!("secondhit; hit; detail=\"slices hit=0-4\"; ttl={ttl}"))
            .contains(&status.to_string()),
        "{status}"
    );
    // A range from memory: exactly its bytes, from two slices.
    let g = c
        .send(Method::GET, url, &[("range", "bytes=65000-66000")])
        .await;
    assert_eq!(g.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(g.header("content-range"), Some("bytes 65000-66000/300000"));
    assert_eq!(g.header("content-length"), Some("1001"));
    assert_eq!(g.bytes(), &want[65_000..=66_000]);
    assert_eq!(g.x_cache(), "HIT");
    // HEAD and a matching validator need no slice.
    let h = c.send(Method::HEAD, url, &[]).await;
    assert_eq!(
        (h.status, h.header("content-length")),
        (StatusCode::OK, Some("300000"))
    );
    let nm = c
        .send(Method::GET, url, &[("if-none-match", "\"v0\"")])
        .await;
    assert_eq!(nm.status, StatusCode::NOT_MODIFIED);
    assert!(o.media_ranges("/media/a").is_empty());
    p.shutdown().await;
}

#[tokio::test]
async fn a_range_miss_fetches_only_the_slices_it_covers() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let c = Http::new(p.addr);
    let url = "/media/r?size=300000";
    let want = media("/media/r", 0, SIZE);
    let g = c
        .send(Method::GET, url, &[("range", "bytes=200000-210000")])
        .await;
    assert_eq!(g.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        g.header("content-range"),
        Some("bytes 200000-210000/300000")
    );
    assert_eq!(g.bytes(), &want[200_000..=210_000]);
    assert_eq!(o.media_ranges("/media/r"), slice_ranges(3..=3));
    // The tail: the short last slice, asked as an aligned slice and answered to the end.
    let g = c
        .send(Method::GET, url, &[("range", "bytes=299990-")])
        .await;
    assert_eq!(
        g.header("content-range"),
        Some("bytes 299990-299999/300000")
    );
    assert_eq!(g.bytes(), &want[299_990..]);
    assert_eq!(o.media_ranges("/media/r"), slice_ranges(4..=4));
    // The whole object now needs slices 0 to 2 only; each is then in memory.
    let g = c.get(url).await;
    assert_eq!(g.bytes(), &want[..]);
    assert_eq!(g.x_cache(), "MISS");
    // Slices 3 and 4 were in memory when the head went out, 0 to 2 were not.
    assert_eq!(
        g.header("cache-status"),
        Some("secondhit; fwd=partial; detail=\"slices hit=3-4 miss=0-2\"")
    );
    assert_eq!(o.media_ranges("/media/r"), slice_ranges(0..=2));
    // A suffix range is answered from the head's length once the object is known.
    let g = c.send(Method::GET, url, &[("range", "bytes=-5")]).await;
    assert_eq!(g.bytes(), &want[SIZE - 5..]);
    assert_eq!(g.x_cache(), "HIT");
    // Past the end: 416 with the length.
    let g = c
        .send(Method::GET, url, &[("range", "bytes=300000-")])
        .await;
    assert_eq!(g.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(g.header("content-range"), Some("bytes */300000"));
    // Several ranges: the whole object (bounded: no fetch per range).
    let g = c
        .send(Method::GET, url, &[("range", "bytes=0-1,5-6,9-10")])
        .await;
    assert_eq!((g.status, g.bytes().len()), (StatusCode::OK, SIZE));
    assert!(o.media_ranges("/media/r").is_empty());
    p.shutdown().await;
}

#[tokio::test]
async fn an_object_of_one_slice_is_stored_whole() {
    let o = origin::start().await;
    let p = sliced(&o, "second-hit").await;
    let c = Http::new(p.addr);
    let url = "/media/small?size=1000";
    let want = media("/media/small", 0, 1000);
    let outcomes: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let g = c.get(url).await;
            assert_eq!((g.status, g.bytes()), (StatusCode::OK, &want[..]));
            assert_eq!(g.header("content-length"), Some("1000"));
            v.push(g.x_cache().to_string());
        }
        v
    };
    assert_eq!(outcomes, ["DEFERRED", "MISS", "HIT"]);
    assert_eq!(
        o.media_ranges("/media/small"),
        [slice_ranges(0..=0), slice_ranges(0..=0)].concat()
    );
    assert_eq!(p.proxy.metrics().stores(), 1);
    // Its ranges come from the whole object.
    let g = c.send(Method::GET, url, &[("range", "bytes=10-19")]).await;
    assert_eq!(
        (g.status, g.bytes()),
        (StatusCode::PARTIAL_CONTENT, &want[10..20])
    );
    assert_eq!(g.x_cache(), "HIT");
    // A range miss of a small object is stored whole as well (one slice is the object).
    let g = c
        .send(
            Method::GET,
            "/media/small2?size=1000",
            &[("range", "bytes=10-19")],
        )
        .await;
    assert_eq!(g.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(g.bytes(), &media("/media/small2", 0, 1000)[10..20]);
    assert_eq!(g.x_cache(), "DEFERRED");
    p.shutdown().await;
}

/// Reads a response's body frame by frame: the bytes that arrived, and whether it ended cleanly.
async fn read_until_cut(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Vec<u8>, bool) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = send
        .send_request(b.body(http_body_util::Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), body.frame()).await {
            Ok(Some(Ok(f))) => got.extend_from_slice(f.data_ref().map_or(&[][..], |d| d)),
            Ok(Some(Err(_))) | Err(_) => return (status, got, false),
            Ok(None) => return (status, got, true),
        }
    }
}

#[tokio::test]
async fn a_changed_object_is_cut_rather_than_mixed_and_then_served_whole_again() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let c = Http::new(p.addr);
    let url = "/media/v?size=300000";
    let v0 = media("/media/v", 0, SIZE);
    let v1 = media("/media/v", 1, SIZE);
    // Slice 0 of version 0 is stored.
    let g = c.send(Method::GET, url, &[("range", "bytes=0-99")]).await;
    assert_eq!(g.bytes(), &v0[..100]);
    o.set_version("/media/v", 1);
    // The whole object: slice 0 from memory goes out, slice 1 comes back as version 1. The
    // client's body is cut after version 0's bytes; never a byte of version 1.
    let (status, got, clean) = read_until_cut(p.addr, url, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!clean, "a response of two versions ended cleanly");
    assert!(got.len() < SIZE);
    assert_eq!(
        got[..],
        v0[..got.len()],
        "bytes of another version were sent"
    );
    assert_eq!(metric(&p, "secondhit_slice_versions_changed_total"), 1);
    // The old version is gone: the next request is version 1, whole.
    let g = c.get(url).await;
    assert_eq!(g.bytes(), &v1[..]);
    p.shutdown().await;
}

#[tokio::test]
async fn a_change_found_before_the_head_goes_out_is_answered_from_the_new_version() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let c = Http::new(p.addr);
    let url = "/media/w?size=300000";
    let g = c.send(Method::GET, url, &[("range", "bytes=0-9")]).await;
    assert_eq!(g.bytes(), &media("/media/w", 0, SIZE)[..10]);
    o.set_version("/media/w", 7);
    // Slice 2 is not stored: it comes back as version 7, before anything was sent.
    let g = c
        .send(Method::GET, url, &[("range", "bytes=140000-140009")])
        .await;
    assert_eq!(g.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(g.bytes(), &media("/media/w", 7, SIZE)[140_000..140_010]);
    assert_eq!(g.header("etag"), Some("\"v7\""));
    assert_eq!(metric(&p, "secondhit_slice_versions_changed_total"), 1);
    // Version 0's slice 0 went with its head: the next read of it is version 7.
    let g = c.send(Method::GET, url, &[("range", "bytes=0-9")]).await;
    assert_eq!(g.bytes(), &media("/media/w", 7, SIZE)[..10]);
    assert_eq!(
        o.media_ranges("/media/w"),
        [
            slice_ranges(0..=0),
            slice_ranges(2..=2),
            slice_ranges(0..=0)
        ]
        .concat()
    );
    p.shutdown().await;
}

#[tokio::test]
async fn an_origin_that_ignores_ranges_is_answered_whole_and_never_sliced() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let c = Http::new(p.addr);
    let url = "/media/n?size=300000&noranges=1";
    let want = media("/media/n", 0, SIZE);
    // A 200 to the slice's range: the client gets it whole (RFC 9110 §14.2 lets a server
    // ignore Range), stored whole as any miss of a 300 KB object.
    let g = c
        .send(Method::GET, url, &[("range", "bytes=100-199")])
        .await;
    assert_eq!((g.status, g.bytes()), (StatusCode::OK, &want[..]));
    assert_eq!(g.x_cache(), "MISS");
    let g = c
        .send(Method::GET, url, &[("range", "bytes=100-199")])
        .await;
    assert_eq!(
        (g.status, g.bytes(), g.x_cache()),
        (StatusCode::PARTIAL_CONTENT, &want[100..200], "HIT")
    );
    assert_eq!(o.media_ranges("/media/n").len(), 1);
    assert_eq!(metric(&p, "secondhit_slices_total{source=\"origin\"}"), 0);
    p.shutdown().await;
}

#[tokio::test]
async fn an_object_without_a_validator_is_never_stored_in_slices() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let c = Http::new(p.addr);
    let url = "/media/nv?size=300000&novalidator=1";
    let want = media("/media/nv", 0, SIZE);
    // A range inside the probed slice is answered from it.
    let g = c
        .send(Method::GET, url, &[("range", "bytes=100-199")])
        .await;
    assert_eq!(
        (g.status, g.bytes()),
        (StatusCode::PARTIAL_CONTENT, &want[100..200])
    );
    assert_eq!(g.x_cache(), "BYPASS");
    assert_eq!(o.media_ranges("/media/nv"), slice_ranges(0..=0));
    // The whole object is forwarded as the client asked (and, 300 KB, stored whole).
    let g = c.get(url).await;
    assert_eq!((g.status, g.bytes()), (StatusCode::OK, &want[..]));
    assert_eq!(
        o.media_ranges("/media/nv"),
        [slice_ranges(0..=0), vec!["-".into()]].concat()
    );
    assert_eq!(p.proxy.metrics().stores(), 1);
    assert_eq!(metric(&p, "secondhit_slices_total{source=\"origin\"}"), 0);
    p.shutdown().await;
}

#[tokio::test]
async fn purges_by_url_and_by_tag_remove_every_slice() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let c = Http::new(p.addr);
    let url = "/media/p?size=300000&tag=show-1";
    for _ in 0..2 {
        assert_eq!(c.get(url).await.bytes().len(), SIZE);
    }
    assert_eq!(o.media_ranges("/media/p"), slice_ranges(0..=4));
    let purge = format!("/purge?url=http://{}{url}", p.addr).replace('&', "%26");
    let (status, _) = support::proxy::admin(p.admin_addr, &purge, true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(c.get(url).await.bytes(), &media("/media/p", 0, SIZE)[..]);
    assert_eq!(o.media_ranges("/media/p"), slice_ranges(0..=4));
    let (status, _) = support::proxy::admin(p.admin_addr, "/purge?tag=show-1", true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(c.get(url).await.x_cache(), "MISS");
    assert_eq!(o.media_ranges("/media/p"), slice_ranges(0..=4));
    assert_eq!(c.get(url).await.x_cache(), "HIT");
    p.shutdown().await;
}

#[tokio::test]
async fn a_206_for_another_range_or_of_another_length_is_a_broken_origin() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let c = Http::new(p.addr);
    for lie in ["range", "long"] {
        let url = format!("/media/lie-{lie}?size=300000&lie={lie}");
        let g = c.get(&url).await;
        assert_eq!(g.status, StatusCode::BAD_GATEWAY, "lie={lie}");
        let g = c
            .send(Method::GET, &url, &[("range", "bytes=70000-")])
            .await;
        assert_eq!(g.status, StatusCode::BAD_GATEWAY, "lie={lie}");
    }
    assert_eq!(p.proxy.metrics().stores(), 0);
    assert_eq!(
        metric(&p, "secondhit_origin_errors_total{kind=\"body\"}"),
        4
    );
    p.shutdown().await;
}

#[tokio::test]
async fn a_stale_head_is_confirmed_by_one_slice_and_the_others_are_kept() {
    let o = origin::start().await;
    let (p, clock) = start(
        &o.url(),
        "[cache]\nslice_size = \"64KiB\"\n[admission]\npolicy = \"admit-all\"\n",
    )
    .await;
    let c = Http::new(p.addr);
    let url = "/media/s?size=300000&cc=max-age%3D10";
    assert_eq!(c.get(url).await.bytes().len(), SIZE);
    assert_eq!(o.media_ranges("/media/s"), slice_ranges(0..=4));
    clock.advance(std::time::Duration::from_secs(30));
    let g = c.get(url).await;
    assert_eq!(g.bytes(), &media("/media/s", 0, SIZE)[..]);
    // One range confirmed the version; slices 1 to 4 came from memory.
    assert_eq!(o.media_ranges("/media/s"), slice_ranges(0..=0));
    assert_eq!(g.header("age"), Some("0"));
    let g = c.get(url).await;
    assert_eq!(g.x_cache(), "HIT");
    assert!(o.media_ranges("/media/s").is_empty());
    p.shutdown().await;
}

#[tokio::test]
async fn requests_for_one_slice_make_one_origin_request() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let url = "/media/c?size=300000";
    let gate = o.hold(url);
    let send = |range: &'static str| {
        let c = Http::new(p.addr);
        tokio::spawn(async move { c.send(Method::GET, url, &[("range", range)]).await })
    };
    let leader = send("bytes=70000-70099");
    gate.arrivals(1).await;
    let follower = send("bytes=80000-80099");
    let want = "secondhit_coalescing_waiters 1\n";
    let mut waited = false;
    for _ in 0..2000 {
        if p.proxy.render_metrics().contains(want) {
            waited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        waited,
        "the second request never waited on the first's slice"
    );
    gate.open();
    let (a, b) = (leader.await.unwrap(), follower.await.unwrap());
    let bytes = media("/media/c", 0, SIZE);
    assert_eq!(a.bytes(), &bytes[70_000..70_100]);
    assert_eq!(b.bytes(), &bytes[80_000..80_100]);
    assert_eq!(o.media_ranges("/media/c"), slice_ranges(1..=1));
    assert_eq!(
        metric(&p, "secondhit_slices_total{source=\"collapsed\"}"),
        1
    );
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_go_to_flash_and_rebuild_their_head_after_a_restart() {
    let d = std::env::temp_dir().join(format!("secondhit-slices-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let o = origin::start().await;
    // Memory holds two slices (lab mode weighs bodies only); what it evicts goes to flash.
    let extra = format!(
        "[admission]\npolicy = \"admit-all\"\ndisk = \"admit-all\"\n\
         [cache]\ncapacity = \"140KB\"\nlab_mode = true\nslice_size = \"64KiB\"\n\
         [cache.disk]\ndir = \"{}\"\ncapacity = \"4MiB\"\nblock_size = \"1MiB\"",
        d.display()
    );
    let url = "/media/f?size=300000";
    let want = media("/media/f", 0, SIZE);
    let host = [("host", "edge.test")];
    let (p, _) = start(&o.url(), &extra).await;
    let c = Http::new(p.addr);
    assert_eq!(c.send(Method::GET, url, &host).await.bytes(), &want[..]);
    let g = c.send(Method::GET, url, &host).await;
    assert_eq!(g.bytes(), &want[..]);
    assert_eq!(o.media_ranges("/media/f"), slice_ranges(0..=4));
    assert!(p.proxy.metrics().slices(SliceSource::Disk) >= 3);
    p.shutdown().await;
    // A new process: memory is empty, the head is gone; a slice on flash rebuilds it.
    let (p, _) = start(&o.url(), &extra).await;
    let c = Http::new(p.addr);
    let g = c
        .send(
            Method::GET,
            url,
            &[("host", "edge.test"), ("range", "bytes=0-")],
        )
        .await;
    assert_eq!(g.bytes(), &want[..]);
    assert_eq!(g.x_cache(), "HIT");
    assert!(o.media_ranges("/media/f").is_empty());
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&d);
}

/// A slice is streamed as the origin sends it, to the request whose fetch brings it and to the
/// requests that follow that fetch: while the origin holds back the second half of slice 1,
/// both clients already have the first half, from one origin request; once it is whole, both
/// have every byte and the slice is stored.
#[tokio::test]
async fn a_slice_streams_to_its_fetcher_and_followers_as_it_arrives() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let url = "/media/m?size=300000&midway=65536";
    let c = Http::new(p.addr);
    // The head, and slice 0.
    let g = c.send(Method::GET, url, &[("range", "bytes=0-99")]).await;
    assert_eq!(g.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(o.media_ranges("/media/m"), slice_ranges(0..=0));
    let gate = o.hold("/media/m#rest");
    let range = [("range", "bytes=65536-131071")];
    let (leader, lgot) = get_until(p.addr, url, &range, 32_768).await;
    let (follower, fgot) = get_until(p.addr, url, &range, 32_768).await;
    assert_eq!(gate.arrived(), 1, "the origin holds one fetch of slice 1");
    assert_eq!(o.media_ranges("/media/m"), slice_ranges(1..=1));
    gate.open();
    let want = &media("/media/m", 0, SIZE)[65_536..131_072];
    for (s, got) in [(leader, lgot), (follower, fgot)] {
        let (body, clean) = read_rest(s, got).await;
        assert!(clean);
        assert_eq!(body, want);
    }
    assert_eq!(
        metric(&p, "secondhit_slices_total{source=\"collapsed\"}"),
        1
    );
    let g = c.send(Method::GET, url, &range).await;
    assert_eq!(g.x_cache(), "HIT");
    assert_eq!(g.bytes(), want);
    assert!(o.media_ranges("/media/m").is_empty());
    p.shutdown().await;
}

/// A slice whose fetch breaks off after bytes went out cuts every response reading it where the
/// origin stopped (never padded or completed from elsewhere), and is not stored.
#[tokio::test]
async fn a_slice_that_breaks_off_cuts_its_readers_and_is_not_stored() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let url = "/media/b?size=300000&midway=65536";
    let c = Http::new(p.addr);
    let g = c.send(Method::GET, url, &[("range", "bytes=0-99")]).await;
    assert_eq!(g.status, StatusCode::PARTIAL_CONTENT);
    let stores = p.proxy.metrics().stores();
    let _gate = o.hold("/media/b#rest");
    // The whole object: slice 0 from memory, then slice 1 arriving.
    let (leader, lgot) = get_until(p.addr, url, &[], 65_536 + 32_768).await;
    let (follower, fgot) = get_until(p.addr, url, &[("range", "bytes=65536-")], 32_768).await;
    o.stop();
    let bytes = media("/media/b", 0, SIZE);
    let (body, _) = read_rest(leader, lgot).await;
    assert_eq!(
        body,
        &bytes[..65_536 + 32_768],
        "cut where the origin stopped"
    );
    let (body, _) = read_rest(follower, fgot).await;
    assert_eq!(body, &bytes[65_536..65_536 + 32_768]);
    assert_eq!(p.proxy.metrics().stores(), stores, "nothing more stored");
    assert_eq!(
        metric(&p, "secondhit_origin_errors_total{kind=\"body\"}"),
        1
    );
    p.shutdown().await;
}

/// The first requests of an object not yet known (the probe for its first slice, which tells
/// its length) stream that slice too: while the origin holds back the second half of slice 0,
/// the request that fetches it and one that follows it both have the first half; then both get
/// the whole object, each slice asked of the origin once.
#[tokio::test]
async fn a_new_objects_first_slice_streams_to_its_fetcher_and_followers() {
    let o = origin::start().await;
    let p = sliced(&o, "admit-all").await;
    let url = "/media/n?size=300000&midway=0";
    let gate = o.hold("/media/n#rest");
    let (leader, lgot) = get_until(p.addr, url, &[], 32_768).await;
    let (follower, fgot) = get_until(p.addr, url, &[], 32_768).await;
    assert_eq!(gate.arrived(), 1, "the origin holds one fetch of slice 0");
    gate.open();
    let want = media("/media/n", 0, SIZE);
    for (s, got) in [(leader, lgot), (follower, fgot)] {
        let (body, clean) = read_rest(s, got).await;
        assert!(clean);
        assert_eq!(body, want);
    }
    assert_eq!(o.media_ranges("/media/n"), slice_ranges(0..=4));
    p.shutdown().await;
}
