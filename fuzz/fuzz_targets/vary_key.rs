//! The Vary variant key: never panics, and two requests get the same key only if their
//! selecting values are the same bytes (after trimming whitespace), an absent field never
//! matching a present one.
#![no_main]
use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use secondhit::http_cache::variant_key;

fn request(values: &[&[u8]]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        if let Ok(v) = HeaderValue::from_bytes(v) {
            h.append(HeaderName::from_static("x-v"), v);
        }
    }
    h
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |&b| b == 0);
    let a = parts.next().unwrap_or(b"");
    let b = parts.next();
    let fields = [HeaderName::from_static("x-v")];
    let ha = request(&[a]);
    let hb = match b {
        Some(b) => request(&[b]),
        None => HeaderMap::new(),
    };
    let ka = variant_key("GET http://h/p", &fields, &ha);
    let kb = variant_key("GET http://h/p", &fields, &hb);
    let va = ha.get("x-v").map(|v| trim(v.as_bytes()).to_vec());
    let vb = hb.get("x-v").map(|v| trim(v.as_bytes()).to_vec());
    if ka == kb {
        assert_eq!(va, vb, "different selecting values share a key: {ka:?}");
    }
    if va == vb {
        assert_eq!(ka, kb);
    }
});
