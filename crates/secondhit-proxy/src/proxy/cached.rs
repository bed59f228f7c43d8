//! What the store holds: a stored response ([`CachedObject`]) or, under a primary key whose
//! responses vary, the list of fields they vary on ([`Entry::Variants`]). Both are entries of the
//! one moka store and both are weighed, so the capacity bounds everything the cache keeps.

use crate::http_cache::Freshness;
use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use std::sync::Arc;
use std::time::Duration;

/// Response headers as stored: every value in one buffer of their own (never a slice of a read
/// buffer), each field a name and a range of it. A `HeaderMap` costs about 190 bytes a field
/// when it is kept (its table keeps room to grow and each value is an allocation of its own);
/// this costs the name, two offsets and the value's bytes. Values are handed out as
/// reference-counted slices of the one buffer.
#[derive(Clone, Debug, Default)]
pub struct StoredHeaders {
    values: Bytes,
    fields: Box<[(HeaderName, u32, u32)]>,
    /// `values` is all ASCII (checked once, here, rather than on every HIT).
    ascii: bool,
}

impl StoredHeaders {
    /// A copy of `headers`, in the order they came.
    pub fn new(headers: &HeaderMap) -> StoredHeaders {
        let mut values = BytesMut::with_capacity(headers.iter().map(|(_, v)| v.len()).sum());
        let mut fields = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let start = values.len();
            values.extend_from_slice(value.as_bytes());
            // Header blocks are bounded far below 4 GiB (limits.max_origin_header_bytes).
            let offset = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            fields.push((name.clone(), offset(start), offset(values.len())));
        }
        StoredHeaders {
            ascii: values.is_ascii(),
            values: values.freeze(),
            fields: fields.into_boxed_slice(),
        }
    }

    fn value(&self, start: u32, end: u32) -> Option<HeaderValue> {
        let bytes = self.values.get(start as usize..end as usize)?;
        let bytes = self.values.slice_ref(bytes);
        if !self.ascii {
            return HeaderValue::from_maybe_shared(bytes).ok();
        }
        // SAFETY: `from_maybe_shared_unchecked` requires valid UTF-8 (its documented condition;
        // debug builds of `http` check the value bytes instead and panic): `new` found the
        // whole buffer ASCII, and it is immutable. The bytes are also valid value bytes
        // (`HeaderValue`'s own invariant, no CR, LF or NUL, on which no memory safety rests):
        // `new` is the only way to make a StoredHeaders (the disk tier too builds a `HeaderMap`
        // first), its fields are private, and every range it records is exactly the bytes of
        // one `HeaderValue` it was given (`stored_values_come_back_as_they_were`). So a HIT
        // does not check them again.
        Some(unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) })
    }

    /// The first value of `name`.
    pub fn get(&self, name: &HeaderName) -> Option<HeaderValue> {
        self.fields
            .iter()
            .find(|(n, _, _)| n == name)
            .and_then(|&(_, a, b)| self.value(a, b))
    }

    /// Every field, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, HeaderValue)> + '_ {
        self.fields
            .iter()
            .filter_map(|(n, a, b)| Some((n, self.value(*a, *b)?)))
    }

    /// The fields as a `HeaderMap` (for a response, or the rules that read one).
    pub fn to_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.fields.len() + 2);
        for (name, value) in self.iter() {
            map.append(name.clone(), value);
        }
        map
    }

    /// Bytes they hold: the buffer, the fields, and the names (a standard name is held by no
    /// buffer, so this overcounts them a little).
    pub fn weight(&self) -> usize {
        self.fields
            .iter()
            .map(|(n, a, b)| field_weight(n, b.saturating_sub(*a) as usize))
            .sum()
    }

    /// What [`weight`](StoredHeaders::weight) would say of `headers` once stored, without
    /// storing them.
    pub fn weight_of(headers: &HeaderMap) -> usize {
        headers.iter().map(|(n, v)| field_weight(n, v.len())).sum()
    }
}

/// What one stored field costs: its value's bytes, its slot, and its name.
fn field_weight(name: &HeaderName, value: usize) -> usize {
    value + std::mem::size_of::<(HeaderName, u32, u32)>() + name.as_str().len()
}

/// A stored response.
#[derive(Debug)]
pub struct CachedObject {
    /// Status.
    pub status: StatusCode,
    /// End-to-end headers as the origin sent them (without `Age`; with `Content-Length`).
    pub headers: StoredHeaders,
    /// The whole body.
    pub body: Bytes,
    /// When it was stored, on the proxy's clock.
    pub stored_at: Duration,
    /// When it stops being fresh, on the proxy's clock.
    pub fresh_until: Duration,
    /// Its age when it arrived.
    pub initial_age: Duration,
    /// Whether it may answer requests with `Authorization`.
    pub auth_ok: bool,
    /// How long past `fresh_until` it may be served while refreshed in the background
    /// (`stale-while-revalidate`; zero under `must-revalidate` or `no-cache`).
    pub stale_while_revalidate: Duration,
    /// How long past `fresh_until` it may be served when the origin fails (`stale-if-error` or
    /// the configured default; zero under `must-revalidate` or `no-cache`).
    pub stale_if_error: Duration,
    /// When the store may drop it: `fresh_until` plus `cache.stale_keep` (or the stale
    /// windows, if longer), so it can still be revalidated or served stale.
    pub keep_until: Duration,
    /// Its surrogate keys (`Surrogate-Key`, `Cache-Tag`), for purge by tag.
    pub tags: Box<[Box<str>]>,
    /// The flash tier's policy admitted it and it is not on disk yet: memory's eviction writes
    /// it there (once: the flag is taken). Never set on an object read from disk.
    pub bound_for_disk: std::sync::atomic::AtomicBool,
}

impl CachedObject {
    /// A stored response, arriving at `now` with `freshness`, kept `stale_keep` past it.
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        now: Duration,
        freshness: &Freshness,
        stale_keep: Duration,
    ) -> CachedObject {
        let fresh_until = now + freshness.remaining();
        let tags = surrogate_keys(&headers);
        let auth_ok = crate::http_cache::usable_with_authorization(&headers);
        CachedObject {
            status,
            headers: StoredHeaders::new(&headers),
            body,
            stored_at: now,
            fresh_until,
            initial_age: freshness.initial_age,
            auth_ok,
            stale_while_revalidate: freshness.stale_while_revalidate,
            stale_if_error: freshness.stale_if_error,
            keep_until: fresh_until
                + stale_keep
                    .max(freshness.stale_while_revalidate)
                    .max(freshness.stale_if_error),
            tags,
            bound_for_disk: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Its age at `now` (RFC 9111 §4.2.3).
    pub fn age(&self, now: Duration) -> Duration {
        self.initial_age + now.saturating_sub(self.stored_at)
    }

    /// Whether it is still fresh at `now`.
    pub fn is_fresh(&self, now: Duration) -> bool {
        now < self.fresh_until
    }

    /// Seconds of freshness left at `now`; negative once stale.
    pub fn ttl(&self, now: Duration) -> i64 {
        let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        if now < self.fresh_until {
            secs(self.fresh_until - now)
        } else {
            -secs(now - self.fresh_until)
        }
    }

    /// Whether, stale at `now`, it may be served while it is refreshed in the background.
    pub fn may_serve_while_revalidating(&self, now: Duration) -> bool {
        now < self.fresh_until + self.stale_while_revalidate
    }

    /// Whether, stale at `now`, it may be served because the origin failed.
    pub fn may_serve_on_error(&self, now: Duration) -> bool {
        now < self.fresh_until + self.stale_if_error
    }

    /// A copy that is stale from `now` on (a soft purge), its stale windows kept.
    pub fn expired_at(&self, now: Duration) -> CachedObject {
        let fresh_until = self.fresh_until.min(now);
        CachedObject {
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.clone(),
            stored_at: self.stored_at,
            fresh_until,
            initial_age: self.initial_age,
            auth_ok: self.auth_ok,
            stale_while_revalidate: self.stale_while_revalidate,
            stale_if_error: self.stale_if_error,
            keep_until: self.keep_until,
            tags: self.tags.clone(),
            bound_for_disk: std::sync::atomic::AtomicBool::new(
                self.bound_for_disk
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
        }
    }

    /// Whether it carries the surrogate key `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| &**t == tag)
    }
}

/// The surrogate keys of a response: `Surrogate-Key` (space-separated, as Fastly) and
/// `Cache-Tag` (comma-separated, as Cloudflare).
fn surrogate_keys(headers: &HeaderMap) -> Box<[Box<str>]> {
    let mut tags: Vec<Box<str>> = Vec::new();
    for (name, split) in [("surrogate-key", ' '), ("cache-tag", ',')] {
        for v in headers.get_all(name).iter().filter_map(|v| v.to_str().ok()) {
            tags.extend(
                v.split(split)
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(Box::from),
            );
        }
    }
    tags.sort();
    tags.dedup();
    tags.into_boxed_slice()
}

/// One store entry.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A response, under its primary key or a variant key.
    Object(Arc<CachedObject>),
    /// Under a primary key: the responses vary on these fields (sorted, lower-case); each
    /// variant is stored under [`variant_key`](crate::http_cache::variant_key).
    Variants(Arc<[HeaderName]>),
    /// Under a primary key: the object is stored in slices ([`super::slice`]), each under
    /// its slice key; this is its head and version.
    Sliced(Arc<Sliced>),
}

/// What one version of an object is known by: its strong `ETag`, else its `Last-Modified`, and
/// its length. Every slice of a stored object carries the same; a slice that comes back with
/// another means the object changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// The strong entity tag, if any.
    pub etag: Option<HeaderValue>,
    /// `Last-Modified`, when there is no strong entity tag.
    pub last_modified: Option<HeaderValue>,
    /// The whole object's length.
    pub total: u64,
}

impl Version {
    /// The version `headers` name for an object of `total` bytes; `None` without a strong
    /// `ETag` or a `Last-Modified` (two versions could then not be told apart, so such an
    /// object is never stored in slices).
    pub fn of(headers: &HeaderMap, total: u64) -> Option<Version> {
        let etag = headers
            .get(http::header::ETAG)
            .filter(|v| !v.as_bytes().starts_with(b"W/"))
            .cloned();
        let last_modified = match etag {
            Some(_) => None,
            None => Some(headers.get(http::header::LAST_MODIFIED)?.clone()),
        };
        Some(Version {
            etag,
            last_modified,
            total,
        })
    }

    /// Whether the stored slice `obj` belongs to this version.
    pub fn owns(&self, obj: &CachedObject) -> bool {
        match (&self.etag, &self.last_modified) {
            (Some(e), _) => obj.headers.get(&http::header::ETAG).as_ref() == Some(e),
            (None, Some(lm)) => obj.headers.get(&http::header::LAST_MODIFIED).as_ref() == Some(lm),
            (None, None) => false,
        }
    }
}

/// An object stored in slices: the head of its whole response, its version, and the slice size
/// it was cut in (a reload may change `cache.slice_size`; stored slices keep theirs).
#[derive(Debug)]
pub struct Sliced {
    /// The whole response as a 200 would carry it (`Content-Length` the whole length), its
    /// freshness, and no body.
    pub head: Arc<CachedObject>,
    /// Which version the slices must be.
    pub version: Version,
    /// Bytes a slice (the last may be shorter).
    pub slice_size: u64,
}

impl Sliced {
    /// The whole object's length.
    pub fn total(&self) -> u64 {
        self.version.total
    }

    /// How many slices the object has.
    pub fn count(&self) -> u64 {
        self.total().div_ceil(self.slice_size.max(1))
    }

    /// The bytes slice `index` covers: `start..=end`.
    pub fn bounds(&self, index: u64) -> (u64, u64) {
        slice_bounds(index, self.slice_size, self.total())
    }
}

/// The bytes slice `index` of `size`-byte slices covers in an object of `total` bytes
/// (`start..=end`; `total` must exceed `start`).
pub fn slice_bounds(index: u64, size: u64, total: u64) -> (u64, u64) {
    let start = index.saturating_mul(size);
    let end = start.saturating_add(size).min(total).saturating_sub(1);
    (start, end)
}

/// What moka keeps per entry beside the key and the value: its node, the entry's info, the
/// access-order and timer-wheel nodes. Measured: 200,000 inserts into a cache built as the
/// store is (weigher, per-entry expiry, invalidation closures) grew the process by 485 bytes an
/// entry, of which the 45-byte key and the 8-byte value with their allocations were about 100.
const MOKA_ENTRY: usize = 384;

/// What a stored object costs beside its key, headers and body: moka's part, the `Arc`'d
/// object itself, and the allocator's header on each of its four allocations (key, header
/// values, header fields, body). So that `cache.capacity` bounds the memory the cache really
/// takes, and many small objects cannot outgrow it (`scripts/bench-proxy.sh` fill_1k checks it).
const ENTRY_OVERHEAD: usize = MOKA_ENTRY + std::mem::size_of::<CachedObject>() + 16 + 4 * 16;

/// The same for a Variants entry: moka's part, the `Arc`'d slice's counts, two allocations.
const VARIANTS_OVERHEAD: usize = MOKA_ENTRY + 16 + 2 * 16;

/// The bytes an object of `body` bytes stored under a key of `key` bytes with header fields of
/// `head` bytes ([`StoredHeaders::weight`]) counts against the capacity: what
/// [`Entry::weight`] charges it (`lab`: its body only).
pub fn object_weight(key: usize, head: usize, body: u64, lab: bool) -> u64 {
    if lab {
        body
    } else {
        body.saturating_add((key + head + ENTRY_OVERHEAD) as u64)
    }
}

impl Entry {
    /// The bytes the entry counts against the capacity: key, headers, body and overhead.
    /// `lab`: the body only (as `simulate --store moka` weighs an object), and nothing for a
    /// Variants entry.
    pub fn weight(&self, key: &str, lab: bool) -> u32 {
        let bytes = match self {
            Entry::Object(o) if lab => o.body.len(),
            Entry::Variants(_) | Entry::Sliced(_) if lab => 0,
            Entry::Sliced(m) => {
                key.len()
                    + m.head.headers.weight()
                    + ENTRY_OVERHEAD
                    + std::mem::size_of::<Sliced>()
                    + 16
            }
            Entry::Object(o) => usize::try_from(object_weight(
                key.len(),
                o.headers.weight(),
                o.body.len() as u64,
                false,
            ))
            .unwrap_or(usize::MAX),
            Entry::Variants(fields) => {
                key.len()
                    + fields
                        .iter()
                        .map(|f| f.as_str().len() + std::mem::size_of::<HeaderName>())
                        .sum::<usize>()
                    + VARIANTS_OVERHEAD
            }
        };
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }
}

/// moka's per-entry expiry: an object lives until its `keep_until` (memory reclamation only;
/// whether a hit is fresh is decided on the proxy's own clock); a Variants entry lives until
/// evicted. A replaced entry (a revalidated or refreshed object) lives as long as the new one
/// says: moka's default would keep the old entry's expiry, and drop the refreshed object when
/// the stale one would have gone.
pub struct FreshFor;

impl FreshFor {
    fn keep(value: &Entry) -> Option<Duration> {
        match value {
            Entry::Object(o) => Some(o.keep_until.saturating_sub(o.stored_at)),
            Entry::Sliced(m) => Some(m.head.keep_until.saturating_sub(m.head.stored_at)),
            Entry::Variants(_) => None,
        }
    }
}

impl moka::Expiry<String, Entry> for FreshFor {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Entry,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        FreshFor::keep(value)
    }

    fn expire_after_update(
        &self,
        _key: &String,
        value: &Entry,
        _updated_at: std::time::Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        FreshFor::keep(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{self, HeaderValue};

    #[test]
    fn stored_values_come_back_as_they_were() {
        let mut headers = HeaderMap::new();
        let values: [&[u8]; 5] = [b"", b"a\tb", b"caf\xc3\xa9 \xff", b" x ", b"plain"];
        for v in values {
            headers.append("x-v", HeaderValue::from_bytes(v).unwrap());
        }
        headers.append(header::ETAG, HeaderValue::from_static("\"e1\""));
        let stored = StoredHeaders::new(&headers);
        assert_eq!(stored.to_map(), headers);
        let back: Vec<_> = stored.iter().map(|(_, v)| v).collect();
        let want: Vec<_> = headers.values().cloned().collect();
        assert_eq!(back, want);
        assert_eq!(stored.get(&header::ETAG).unwrap(), "\"e1\"");
        assert!(!stored.ascii, "obs-text: the checked path");
        // All ASCII: the unchecked path, the same values.
        headers.remove("x-v");
        headers.append("x-v", HeaderValue::from_static("a\tb"));
        headers.append("x-v", HeaderValue::from_static(""));
        let stored = StoredHeaders::new(&headers);
        assert!(stored.ascii);
        assert_eq!(stored.to_map(), headers);
    }

    #[test]
    fn stored_headers_keep_every_field_in_one_buffer_of_their_own() {
        // Header values parsed by hyper are slices of its read buffer: storing them as they
        // are would pin that whole buffer (often as large as the body) for the entry's life.
        // Measured before the copy: 215 MiB resident for 99 MiB of 64 KiB objects.
        let buffer = Bytes::from(vec![b'x'; 65_536]);
        let mut parsed = HeaderMap::new();
        let shared = HeaderValue::from_maybe_shared(buffer.slice(0..10)).unwrap();
        assert_eq!(
            shared.as_bytes().as_ptr(),
            buffer.as_ptr(),
            "a slice of the buffer"
        );
        parsed.append(header::ETAG, shared);
        parsed.append(header::VARY, HeaderValue::from_static("accept"));
        parsed.append(header::VARY, HeaderValue::from_static("cookie"));
        parsed.append(
            HeaderName::from_static("x-custom"),
            HeaderValue::from_static(""),
        );
        let stored = StoredHeaders::new(&parsed);
        assert_eq!(
            stored.to_map(),
            parsed,
            "every field, repeated ones in order"
        );
        let etag = stored.get(&header::ETAG).unwrap();
        assert_eq!(etag.as_bytes(), b"xxxxxxxxxx");
        let inside = buffer.as_ptr_range().contains(&etag.as_bytes().as_ptr());
        assert!(
            !inside,
            "the stored value must not point into the read buffer"
        );
        assert_eq!(
            stored.get(&header::VARY).unwrap(),
            "accept",
            "the first value"
        );
        assert_eq!(stored.get(&header::AGE), None);
        let names: Vec<&str> = stored.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["etag", "vary", "vary", "x-custom"]);
        // 10 + 6 + 6 + 0 value bytes, four fields, the names' bytes.
        let field = std::mem::size_of::<(HeaderName, u32, u32)>();
        assert_eq!(stored.weight(), 22 + 4 * field + (4 + 4 + 4 + 8));
    }

    #[test]
    fn every_entry_weighs_its_key_and_contents() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ETAG, HeaderValue::from_static("\"1\""));
        let freshness = Freshness {
            lifetime: Duration::from_secs(1),
            initial_age: Duration::ZERO,
            no_cache: false,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
        };
        let obj = Entry::Object(Arc::new(CachedObject::new(
            StatusCode::OK,
            headers,
            Bytes::from(vec![0; 1000]),
            Duration::ZERO,
            &freshness,
            Duration::ZERO,
        )));
        assert_eq!(obj.weight("k", true), 1000);
        // Key, the header's value, field and name, the body, and the bookkeeping: moka's node,
        // the object, the allocator's headers.
        let field = std::mem::size_of::<(HeaderName, u32, u32)>();
        let bookkeeping = 384 + std::mem::size_of::<CachedObject>() + 16 + 64;
        assert_eq!(
            obj.weight("k", false) as usize,
            1 + (3 + field + 4) + 1000 + bookkeeping
        );
        let v = Entry::Variants(Arc::from(vec![header::ACCEPT_LANGUAGE]));
        let long_key = "k".repeat(5000);
        let name = std::mem::size_of::<HeaderName>();
        assert_eq!(
            v.weight(&long_key, false) as usize,
            5000 + (15 + name) + 384 + 48
        );
        assert_eq!(v.weight(&long_key, true), 0);
    }
}

#[cfg(test)]
mod stale_tests {
    use super::*;
    use http::header::HeaderValue;

    #[test]
    fn stale_windows_tags_and_soft_purge() {
        let mut headers = HeaderMap::new();
        headers.append("surrogate-key", HeaderValue::from_static("a b  b"));
        headers.append("cache-tag", HeaderValue::from_static("c, a"));
        let f = Freshness {
            lifetime: Duration::from_secs(10),
            initial_age: Duration::from_secs(2),
            no_cache: false,
            stale_while_revalidate: Duration::from_secs(30),
            stale_if_error: Duration::from_secs(600),
        };
        let s = Duration::from_secs;
        let o = CachedObject::new(StatusCode::OK, headers, Bytes::new(), s(100), &f, s(60));
        assert_eq!(o.fresh_until, s(108));
        assert_eq!(o.keep_until, s(108 + 600));
        assert_eq!(&*o.tags, [Box::from("a"), Box::from("b"), Box::from("c")]);
        assert!(o.has_tag("b") && !o.has_tag("d"));
        assert_eq!((o.ttl(s(100)), o.ttl(s(118))), (8, -10));
        assert!(o.may_serve_while_revalidating(s(137)) && !o.may_serve_while_revalidating(s(138)));
        assert!(o.may_serve_on_error(s(707)) && !o.may_serve_on_error(s(708)));
        let soft = o.expired_at(s(104));
        assert!(!soft.is_fresh(s(104)) && o.is_fresh(s(104)));
        assert!(soft.may_serve_while_revalidating(s(133)));
    }

    #[test]
    fn a_replaced_entry_lives_as_long_as_the_new_one_says() {
        use moka::Expiry;
        let f = |secs| Freshness {
            lifetime: Duration::from_secs(secs),
            initial_age: Duration::ZERO,
            no_cache: false,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
        };
        let s = Duration::from_secs;
        let refreshed = Entry::Object(Arc::new(CachedObject::new(
            StatusCode::OK,
            HeaderMap::new(),
            Bytes::new(),
            s(1000),
            &f(3600),
            s(60),
        )));
        let key = String::from("k");
        let now = std::time::Instant::now();
        // The old entry had a second left; the refreshed one is kept for its hour and a minute.
        let kept = FreshFor.expire_after_update(&key, &refreshed, now, Some(s(1)));
        assert_eq!(kept, Some(s(3660)));
        assert_eq!(FreshFor.expire_after_create(&key, &refreshed, now), kept);
    }
}
