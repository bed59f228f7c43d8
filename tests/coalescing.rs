//! Coalesced fetches against clients that read slowly or not at all: a fetch being stored runs
//! at the origin's pace, and its followers stream it from the first byte, each at its own pace.

mod support;

use std::time::{Duration, Instant};
use support::origin;
use support::proxy::{get_until, read_rest, start};

const CONFIG: &str = "[admission]\npolicy = \"admit-all\"\n[timeouts]\ncoalesce_wait = \"10s\"";

/// The attack: the first client reads 10 bytes of a 5 MB object and stops; a second client for
/// the same URL must not wait for it (it used to wait the whole `coalesce_wait`, 10 s).
#[tokio::test]
async fn a_client_that_stops_reading_holds_nobody_behind_it() {
    let o = origin::start().await;
    let (p, _clock) = start(&o.url(), CONFIG).await;
    let path = "/cache/big?size=5000000";
    let (stuck, _) = get_until(p.addr, path, &[], 10).await;
    let started = Instant::now();
    let (s, head) = get_until(p.addr, path, &[], 1).await;
    let (body, clean) = read_rest(s, head).await;
    let took = started.elapsed();
    assert!(clean, "the second client's response ended cleanly");
    assert_eq!(body, origin::content("/cache/big", 5_000_000));
    assert!(
        took < Duration::from_secs(5),
        "the second client waited {took:?} behind the first"
    );
    assert_eq!(o.count(path), 1, "one origin fetch for both");
    drop(stuck);
    p.shutdown().await;
}

/// A follower gets the leader's bytes as the origin sends them, not when the body is whole:
/// the origin sends half of the body and stalls; the follower has that half from the one
/// fetch, then its response is cut when the fetch fails, and nothing is stored.
#[tokio::test]
async fn followers_stream_the_leaders_body_as_it_arrives() {
    let o = origin::start().await;
    let extra = format!(
        "{CONFIG}
first_byte = \"2s\""
    );
    let (p, _clock) = start(&o.url(), &extra).await;
    let path = "/stall/half?size=200000";
    let (leader, _) = get_until(p.addr, path, &[], 10).await;
    // The half the origin sent before it stalled reaches the follower.
    let (follower, got) = get_until(p.addr, path, &[], 100_000).await;
    assert_eq!(
        o.count(path),
        1,
        "the follower streamed the leader's fetch, not one of its own"
    );
    let (body, _) = read_rest(follower, got).await;
    assert_eq!(body.len(), 100_000, "cut where the origin stalled");
    assert_eq!(body, origin::content("/stall/half", 200_000)[..100_000]);
    drop(leader);
    // Nothing was stored: the next request goes to the origin.
    let (s, head) = get_until(p.addr, path, &[], 1).await;
    drop(read_rest(s, head).await);
    assert_eq!(o.count(path), 2);
    p.shutdown().await;
}
