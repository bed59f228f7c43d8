//! Large objects in slices (`cache.slice_size`), as nginx's `slice` module and Traffic Server's
//! `slice` plugin keep them: with slicing on, a GET miss asks the origin for the aligned slice
//! that holds the first byte it wants (`Range: bytes=S-E`, `Proxy::probe`). The answer says
//! how long the object is:
//!
//! - an object of one slice or less is the object itself: stored whole under its key, as any
//!   miss (admitted on its own id, which is slice 0's);
//! - a longer one is kept as aligned slices of `slice_size` bytes, each an entry of its own (key
//!   `primary\nslice=N`, object id [`slice_id`]) for admission, coalescing, the store and the
//!   flash tier; the primary key holds the object's head and version ([`Sliced`]).
//!
//! So the slices of a video that are played (its first minutes) are stored on their second
//! request, and its long tail never is. Every GET of a sliced object (`Proxy::serve_sliced`)
//! is answered slice by slice, each from memory, from flash, from the fetch another request
//! leads, or from the origin by a `Range` request; only the slices the request covers.
//!
//! One version: every slice must carry the version of the head (strong `ETag`, else
//! `Last-Modified`, and the length). A slice that comes back with another, or an origin that
//! stops answering ranges with 206, removes the object's head and slices; if the client has had
//! bytes already, its response is cut rather than completed with another version's bytes
//! (before any byte went out, the request is answered from the new version). An object
//! without a strong `ETag` or a `Last-Modified`, one that is not storable (private,
//! `no-store`, ...) and one that varies (`Vary`) is never stored in slices: the request is
//! answered from the probe's bytes when they cover it, else forwarded as it came.
//!
//! Each stored slice carries the whole response's fields and its own `Content-Range`, so a
//! slice found without its head (the store evicted the head, or only the flash tier kept the
//! slice) rebuilds the head.
//!
//! A slice fetched from the origin streams (`Proxy::stream_slice`): it is read at the
//! origin's pace into a `Growing` buffer, which the request that fetches it and every request
//! that follows the fetch read from the first byte, each at its own pace, as the bytes arrive;
//! once whole it is stored (if admitted), before its end reaches the readers. A probe's slice
//! streams too when the object turns out to be sliced; one slice or less, or an object that
//! may not be sliced, is read whole (its bytes decide how it is answered).
//!
//! What a hostile peer meets: a slice's 206 must name the range asked with the length of that
//! range before any of it is served (anything else is an origin failure); its bytes are read
//! within that length and within the budget of bodies buffered at once
//! (`limits.store_buffer_bytes`), and one that breaks off, stalls or comes short cuts every
//! response reading it and is not stored; a slow client paces the fetches (one slice ahead at
//! most); a request for many ranges gets the whole object (RFC 9110 §14.2), not one fetch per
//! range.

use super::cached::{slice_bounds, CachedObject, Entry, Sliced, Version};
use super::check::Target;
use super::classify::{classify, Intent, ResponseHead};
use super::coalesce::{Fetched, Joined, Leader, Role, Streaming};
use super::fetch::{response_head, upstream_request, FetchError, OriginHead};
use super::growing::{Growing, GrowingBody};
use super::outcome::{CacheStatus, Fwd, Outcome};
use super::pump::{StoreJob, Tiers};
use super::{hit, Answer, Exchange, Kept, Live, Proxy, Sight, Storing};
use crate::admission::Decision;
use crate::body::{
    channel, channel_within, empty, full, text, ConnectionBudget, ProxyBody, Sender,
};
use crate::hash::{slice_id, KeyHash};
use crate::http_cache::{
    conditional_answer, is_conditional, range_answer, storability, Conditional, Credentials,
    Freshness, NoStore, RangeAnswer, RequestPlan, Validators,
};
use crate::metrics::SliceSource;
use crate::origin::{OriginBody, OriginError};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::OwnedSemaphorePermit;

/// The key slice `index` of the object under `primary` is stored under: a variant-like key
/// (`\n` after the primary key), so that a purge of the URL, here and on the flash tier,
/// covers it.
pub fn slice_key(primary: &str, index: u64) -> String {
    format!("{primary}\nslice={index}")
}

/// `bytes first-last/total` (RFC 9110 §14.4), digits only; `None` for anything else (`*`, an
/// unknown total, an inverted range, a last byte past the total).
pub fn content_range(value: &HeaderValue) -> Option<(u64, u64, u64)> {
    let rest = value.to_str().ok()?.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let (first, last, total) = (digits(first)?, digits(last)?, digits(total)?);
    (first <= last && last < total).then_some((first, last, total))
}

/// A decimal number of at most 19 digits (no sign, no spaces inside).
fn digits(s: &str) -> Option<u64> {
    let s = s.trim();
    (!s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// The first byte a request's `Range` asks for, when it is one `bytes=A-` or `bytes=A-B` range:
/// the slice that holds it can be fetched before the length is known. `None` for a suffix
/// range, several ranges or anything else.
pub fn range_start(headers: &HeaderMap) -> Option<u64> {
    let spec = headers
        .get(header::RANGE)?
        .to_str()
        .ok()?
        .trim()
        .strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let start = digits(first)?;
    if !last.trim().is_empty() && digits(last)? < start {
        return None;
    }
    Some(start)
}

/// Where a miss starts when slicing is on: the first byte it wants (0 for a whole GET), whose
/// slice is fetched first; `None` when the miss takes the ordinary way: slicing off, not a
/// GET, a request with `Authorization` (its answers are rarely shared), a `no-cache` refresh,
/// or a `Range` that names no first byte (a suffix, several ranges).
pub fn probe_start(parts: &Parts, plan: RequestPlan, slice_size: u64) -> Option<u64> {
    if slice_size == 0
        || parts.method != Method::GET
        || parts.headers.contains_key(header::AUTHORIZATION)
    {
        return None;
    }
    match plan {
        RequestPlan::Lookup if !parts.headers.contains_key(header::RANGE) => Some(0),
        RequestPlan::LookupOnly(NoStore::Range) => range_start(&parts.headers),
        _ => None,
    }
}

/// The runs of slice indexes in `list` (sorted), as `0-3,5`, at most `max` runs (then `...`).
fn runs(list: &[u64], max: usize) -> String {
    let mut out = String::new();
    let mut i = 0;
    let mut n = 0;
    while i < list.len() {
        let start = list[i];
        let mut end = start;
        while i + 1 < list.len() && list[i + 1] == end + 1 {
            i += 1;
            end += 1;
        }
        i += 1;
        if n == max {
            out.push_str(",...");
            break;
        }
        if n > 0 {
            out.push(',');
        }
        out.push_str(&start.to_string());
        if end != start {
            out.push('-');
            out.push_str(&end.to_string());
        }
        n += 1;
    }
    out
}

/// Which slices of a sliced response were hits (memory, flash, another request's fetch) when
/// its head went out and which go to the origin: carried in the response's extensions to
/// `Proxy::finish`, which writes it into `Cache-Status` as `detail="slices hit=0-3 miss=4"`.
/// The slice the head waited for is settled; the later ones are what the store held then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceDetail(pub String);

impl SliceDetail {
    fn of(hits: &[u64], misses: &[u64]) -> SliceDetail {
        let mut s = String::from("slices");
        if !hits.is_empty() {
            s.push_str(" hit=");
            s.push_str(&runs(hits, 16));
        }
        if !misses.is_empty() {
            s.push_str(" miss=");
            s.push_str(&runs(misses, 16));
        }
        SliceDetail(s)
    }

    /// `status` rendered with this detail (a Structured Field string: digits, letters, `=`,
    /// `,`, `-`, `.` and spaces only).
    pub fn header(&self, status: &CacheStatus) -> HeaderValue {
        let s = status.render_with(Some(&self.0));
        HeaderValue::from_maybe_shared(Bytes::from(s)).unwrap_or_else(|_| status.header())
    }
}

/// A 206 for the bytes asked, read whole.
struct Part {
    headers: HeaderMap,
    start: u64,
    end: u64,
    total: u64,
    body: Bytes,
}

/// What the origin answered to a slice's `Range` request: `P` the 206, read ([`Part`]) or not
/// yet ([`PartHead`]).
enum Reply<P = Part> {
    /// A 206 for the bytes asked.
    Part(P),
    /// Anything else (a 200 that ignores the range, an error status), its body untouched.
    Other(Response<OriginBody>),
}

/// Why a slice could not be had.
enum SliceError {
    /// The origin failed.
    Fetch(FetchError),
    /// The slices being read at once fill `limits.store_buffer_bytes`: 503.
    Busy,
    /// The origin's slice is of another version (given, when the origin sent it as a 206), or
    /// it stopped answering ranges with 206: the stored object is gone.
    Changed(Option<Part>),
}

/// What a sliced answer needs beyond the proxy: owned, as its body's task outlives the request
/// handler.
struct SliceCtx {
    head: Arc<Sliced>,
    primary: String,
    /// The object id of the primary key (slice ids derive from it).
    id: u64,
    target: Target,
    client: IpAddr,
    /// The client's fields without conditionals and ranges: each slice's request adds its own.
    base: HeaderMap,
    credentials: Credentials,
    budget: Option<ConnectionBudget>,
    live: Arc<Live>,
}

/// A slice in hand: its index, its bytes and where they came from.
type Got = (u64, SliceData, SliceSource);

/// A slice's bytes: whole (stored, or read whole), or arriving from a fetch, read at the
/// origin's pace into a buffer that this reader takes from as the bytes come (the fetch this
/// request leads, or the one it follows).
enum SliceData {
    Whole(Bytes),
    Arriving(GrowingBody),
}

/// A 206 for the bytes asked, its body not read yet; its length is reserved from the budget of
/// bodies buffered at once (`permit`).
struct PartHead {
    headers: HeaderMap,
    start: u64,
    end: u64,
    total: u64,
    body: OriginBody,
    permit: OwnedSemaphorePermit,
}

/// The fields of a sliced object's head, from a response for it: `Content-Length` the whole
/// length, no `Content-Range` or `Age`.
fn whole_head(headers: &HeaderMap, total: u64) -> HeaderMap {
    let mut h = headers.clone();
    h.remove(header::CONTENT_RANGE);
    h.remove(header::AGE);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
    h
}

/// A freshness that leaves `remaining` (for a slice stored under its head's freshness, or a
/// head rebuilt from a slice).
fn fresh_for(remaining: Duration, of: &CachedObject) -> Freshness {
    Freshness {
        lifetime: remaining,
        initial_age: Duration::ZERO,
        no_cache: false,
        stale_while_revalidate: of.stale_while_revalidate,
        stale_if_error: of.stale_if_error,
    }
}

impl Sliced {
    /// The bytes a request's `Range` asks of this object (`None`: all, or none usable).
    pub fn range_of(&self, headers: &HeaderMap) -> Option<(u64, u64)> {
        match range_answer(headers.get(header::RANGE), self.total()) {
            RangeAnswer::Partial { start, end, .. } => Some((start, end)),
            _ => None,
        }
    }

    /// Whether `obj` is this object's slice `index`: its version, and exactly its bytes.
    fn holds(&self, obj: &CachedObject, index: u64) -> bool {
        let (start, end) = self.bounds(index);
        self.heads(obj, index) && obj.body.len() as u64 == end - start + 1
    }

    /// Whether `obj` (a slice's head, its body perhaps still arriving) is this object's slice
    /// `index`: its version and its `Content-Range`.
    fn heads(&self, obj: &CachedObject, index: u64) -> bool {
        let (start, end) = self.bounds(index);
        self.version.owns(obj) && slice_range(obj) == Some((start, end, self.total()))
    }
}

/// The `Content-Range` a stored slice carries.
fn slice_range(obj: &CachedObject) -> Option<(u64, u64, u64)> {
    if obj.status != StatusCode::PARTIAL_CONTENT {
        return None;
    }
    content_range(&obj.headers.get(&header::CONTENT_RANGE)?)
}

mod answer;
mod fetch;
mod probe;

/// What a probe's follower got from the leader.
enum Followed {
    /// The whole object (one slice or less), answered.
    Whole(Answer),
    /// The slice, and the head it rebuilds, to answer in slices from.
    Slice(Arc<Sliced>, Got),
}

/// What a probe that found a whole object carries to its store.
struct Whole {
    /// The request's fields as the origin got them (they select a stored variant).
    base: HeaderMap,
    credentials: Credentials,
    tiers: Option<Tiers>,
    leader: Option<Leader>,
}

/// The client's fields without conditionals and ranges (each slice's request adds its own),
/// what credentials go to the origin with them, and the connection's budget.
fn request_base(parts: &Parts, live: &Live) -> (HeaderMap, Credentials, Option<ConnectionBudget>) {
    let forwarding = super::check::Forwarding::new(&Method::GET, &live.forwarded);
    let credentials = Credentials::of(&parts.headers).forwarded(|n| forwarding.keeps(n));
    let mut base = parts.headers.clone();
    super::revalidate::strip_client_conditionals(&mut base);
    (
        base,
        credentials,
        parts.extensions.get::<ConnectionBudget>().cloned(),
    )
}

/// What a request asks of a sliced object.
// Made once per request and taken apart at once.
#[allow(clippy::large_enum_variant)]
enum Planned {
    /// An answer that sends no slice (304, 412, 416, HEAD).
    Answered(Answer),
    /// An answer that sends bytes.
    Send(SlicePlan),
}

/// A sliced answer that sends bytes: its status and fields, and which bytes.
struct SlicePlan {
    code: StatusCode,
    headers: HeaderMap,
    span: Span,
}

/// The bytes a sliced answer sends, of an object in `slice_size`-byte slices.
#[derive(Clone, Copy, Debug)]
struct Span {
    /// First and last byte sent.
    start: u64,
    end: u64,
    slice_size: u64,
    total: u64,
}

impl SlicePlan {
    fn first_index(&self) -> u64 {
        self.span.first_index()
    }
}

impl Span {
    fn first_index(&self) -> u64 {
        self.start / self.slice_size
    }

    /// The bytes of slice `i` that the answer sends, as offsets in the slice: first and last.
    fn within(&self, i: u64) -> (u64, u64) {
        let (s, e) = slice_bounds(i, self.slice_size, self.total);
        (self.start.max(s) - s, self.end.min(e) - s)
    }

    /// The part of slice `i` (its bytes `b`) that the answer sends.
    fn piece(&self, i: u64, b: Bytes) -> Bytes {
        let (from, to) = self.within(i);
        let n = b.len() as u64;
        if from > to || to >= n {
            return Bytes::new();
        }
        b.slice(from as usize..=to as usize)
    }

    /// Sends the part of slice `i` (`data`) that the answer sends: at once when it is whole,
    /// else as its bytes arrive. `Err(None)`: the client is gone; `Err(Some(why))`: the slice
    /// did not arrive whole, and the response must be cut.
    async fn send(&self, tx: &Sender, i: u64, data: SliceData) -> Result<(), Option<&'static str>> {
        let mut reader = match data {
            SliceData::Whole(b) => {
                return tx
                    .send(Frame::data(self.piece(i, b)))
                    .await
                    .map_err(|_| None);
            }
            SliceData::Arriving(reader) => reader,
        };
        let (from, to) = self.within(i);
        let mut at = 0u64;
        while at <= to {
            let data = match reader.frame().await {
                None => break,
                Some(Err(_)) => return Err(Some(FETCH_FAILED)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
            };
            let (s, e) = (at, at + data.len() as u64);
            at = e;
            let (lo, hi) = (from.max(s), (to + 1).min(e));
            if lo < hi {
                let piece = data.slice((lo - s) as usize..(hi - s) as usize);
                tx.send(Frame::data(piece)).await.map_err(|_| None)?;
            }
        }
        if at <= to {
            return Err(Some(FETCH_FAILED));
        }
        Ok(())
    }
}

/// Why a response is cut when a slice's fetch fails once bytes went out.
const FETCH_FAILED: &str = "the origin failed while a slice was fetched";

/// An answer of a sliced object that sends no slice (304, 412, 416, HEAD).
fn sliced_plain(response: Response<ProxyBody>, status: CacheStatus) -> Answer {
    Answer {
        response,
        outcome: Outcome::Hit,
        status,
        sight: Sight::Skip,
    }
}

/// Why a slice that could not be had cuts a response already under way.
fn cut_reason(e: &SliceError) -> &'static str {
    match e {
        SliceError::Fetch(_) => FETCH_FAILED,
        SliceError::Busy => "the cache is reading too many slices at once",
        SliceError::Changed(_) => "the object changed while it was sent",
    }
}

/// Ends a sliced body that cannot go on: the client sees it cut, never another version's bytes.
async fn cut(tx: &Sender, why: &'static str) {
    tracing::warn!(why, "sliced response cut");
    tx.fail(why.into()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges_parse_strictly() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert_eq!(content_range(&v("bytes 0-99/1000")), Some((0, 99, 1000)));
        assert_eq!(
            content_range(&v("bytes 900-999/1000")),
            Some((900, 999, 1000))
        );
        for bad in [
            "bytes */1000",
            "bytes 0-99/*",
            "bytes 99-0/1000",
            "bytes 0-1000/1000",
            "bytes -1-5/10",
            "bits 0-1/2",
            "bytes 0-99999999999999999999/1",
            "bytes 0x1-2/3",
            "bytes 0 - 1/2x",
        ] {
            assert_eq!(content_range(&v(bad)), None, "{bad}");
        }
    }

    #[test]
    fn only_a_single_range_with_a_first_byte_starts_a_probe() {
        let h = |s: &'static str| {
            let mut m = HeaderMap::new();
            m.insert(header::RANGE, HeaderValue::from_static(s));
            m
        };
        assert_eq!(range_start(&h("bytes=1048576-")), Some(1 << 20));
        assert_eq!(range_start(&h("bytes=5-9")), Some(5));
        for other in [
            "bytes=-500",
            "bytes=0-1,5-6",
            "bytes=9-5",
            "items=0-1",
            "bytes=x-",
            "bytes=1-x",
        ] {
            assert_eq!(range_start(&h(other)), None, "{other}");
        }
        assert_eq!(range_start(&HeaderMap::new()), None);
    }

    #[test]
    fn probes_start_only_for_plain_gets_and_first_byte_ranges() {
        let parts = |method: Method, fields: &[(&'static str, &'static str)]| {
            let mut b = http::Request::builder().method(method).uri("/v");
            for (n, v) in fields {
                b = b.header(*n, *v);
            }
            b.body(()).unwrap().into_parts().0
        };
        let get = parts(Method::GET, &[]);
        assert_eq!(probe_start(&get, RequestPlan::Lookup, 1 << 20), Some(0));
        assert_eq!(
            probe_start(&get, RequestPlan::Lookup, 0),
            None,
            "slicing off"
        );
        assert_eq!(probe_start(&get, RequestPlan::Refresh, 1 << 20), None);
        let ranged = parts(Method::GET, &[("range", "bytes=3000000-")]);
        let plan = crate::http_cache::request_plan(&ranged.method, &ranged.headers, false);
        assert_eq!(probe_start(&ranged, plan, 1 << 20), Some(3_000_000));
        let suffix = parts(Method::GET, &[("range", "bytes=-10")]);
        let plan = crate::http_cache::request_plan(&suffix.method, &suffix.headers, false);
        assert_eq!(probe_start(&suffix, plan, 1 << 20), None);
        let head = parts(Method::HEAD, &[]);
        let plan = crate::http_cache::request_plan(&head.method, &head.headers, false);
        assert_eq!(probe_start(&head, plan, 1 << 20), None);
        let auth = parts(Method::GET, &[("authorization", "Basic eA==")]);
        assert_eq!(probe_start(&auth, RequestPlan::Lookup, 1 << 20), None);
    }

    #[test]
    fn slice_runs_are_compact_and_bounded() {
        assert_eq!(runs(&[0, 1, 2, 3, 5, 7, 8], 16), "0-3,5,7-8");
        assert_eq!(runs(&[], 16), "");
        let many: Vec<u64> = (0..100).map(|i| i * 2).collect();
        assert!(runs(&many, 4).ends_with(",..."));
        assert_eq!(
            SliceDetail::of(&[0, 1], &[2, 4]).0,
            "slices hit=0-1 miss=2,4"
        );
        let status = CacheStatus::forwarded(Fwd::Partial, None);
        assert_eq!(
            SliceDetail::of(&[0, 1], &[2]).header(&status),
            "secondhit; fwd=partial; detail=\"slices hit=0-1 miss=2\""
        );
    }

    #[test]
    fn pieces_cover_the_range_exactly() {
        let plan = Span {
            start: 15,
            end: 34,
            slice_size: 10,
            total: 40,
        };
        let slice =
            |i: u64| Bytes::from((i * 10..i * 10 + 10).map(|b| b as u8).collect::<Vec<_>>());
        let sent: Vec<u8> = (1..=3)
            .flat_map(|i| plan.piece(i, slice(i)).to_vec())
            .collect();
        assert_eq!(sent, (15..=34).collect::<Vec<u8>>());
        assert_eq!(slice_bounds(0, 10, 25), (0, 9));
        assert_eq!(slice_bounds(2, 10, 25), (20, 24));
    }
}
