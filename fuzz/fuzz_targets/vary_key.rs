//! The Vary variant key: never panics, and two requests share a key only if their selecting
//! values normalise to the same bytes (list members trimmed and joined by `,`, whitespace next
//! to `;` or `=` dropped; the field here is case-sensitive), an absent field never matching a
//! present one. The normalisation is written again here, independently of the crate's.
#![no_main]
use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use secondhit::http_cache::variant_key;

fn request(value: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(value) {
        h.append(HeaderName::from_static("x-v"), v);
    }
    h
}

fn normalise(h: &HeaderMap) -> Option<Vec<u8>> {
    let v = h.get("x-v")?.as_bytes();
    let ows = |b: u8| b == b' ' || b == b'\t';
    let mut members = Vec::new();
    for m in v.split(|&b| b == b',') {
        let start = m.iter().position(|&b| !ows(b)).unwrap_or(m.len());
        let end = m.iter().rposition(|&b| !ows(b)).map_or(start, |e| e + 1);
        let m = &m[start..end.max(start)];
        if m.is_empty() {
            continue;
        }
        let sep = |i: Option<usize>| i.and_then(|i| m.get(i)).is_some_and(|&c| c == b';' || c == b'=');
        let kept: Vec<u8> = m
            .iter()
            .enumerate()
            .filter(|&(i, &b)| !(ows(b) && (sep(i.checked_sub(1)) || sep(Some(i + 1)))))
            .map(|(_, &b)| b)
            .collect();
        members.push(kept);
    }
    Some(members.join(&b','))
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |&b| b == 0);
    let a = parts.next().unwrap_or(b"");
    let fields = [HeaderName::from_static("x-v")];
    let ha = request(a);
    let hb = match parts.next() {
        Some(b) => request(b),
        None => HeaderMap::new(),
    };
    let ka = variant_key("GET http://h/p", &fields, &ha);
    let kb = variant_key("GET http://h/p", &fields, &hb);
    let (na, nb) = (normalise(&ha), normalise(&hb));
    assert_eq!(ka == kb, na == nb, "keys {ka:?} / {kb:?} for {na:?} / {nb:?}");
});
