//! Cache-Control parsing, storability and freshness, conditional requests, 304 updates and Vary
//! on arbitrary header values.
#![no_main]
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use libfuzzer_sys::fuzz_target;
use secondhit::http_cache::{self, StoreRules};
use std::time::{Duration, SystemTime};

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    let names = ["cache-control", "expires", "date", "age", "vary", "etag", "last-modified",
                 "if-none-match", "if-modified-since", "set-cookie", "pragma", "connection",
                 "cdn-cache-control", "content-length"];
    for (i, chunk) in data.split(|&b| b == b'\n').enumerate() {
        if let Ok(v) = HeaderValue::from_bytes(chunk) {
            headers.append(HeaderName::from_static(names[i % names.len()]), v);
        }
    }
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let _ = http_cache::CacheControl::parse(&headers);
    for status in [200u16, 404, 500] {
        let s = StatusCode::from_u16(status).unwrap();
        for (authorization, cookie) in [(false, false), (true, false), (false, true)] {
            let who = http_cache::Credentials {
                authorization,
                cookie,
            };
            if let Ok(f) = http_cache::storability(s, &headers, who, &StoreRules::default(), now) {
                // Stored stale only when it can be revalidated.
                assert!(!f.remaining().is_zero() || http_cache::has_validator(&headers));
            }
        }
    }
    let _ = http_cache::not_modified(&headers, headers.get("etag"), headers.get("last-modified"));
    let updated = http_cache::updated_headers(&headers, &headers);
    assert_eq!(updated.get("content-length"), headers.get("content-length"));
    let _ = http_cache::validates(&headers, &updated);
    let fields = http_cache::vary_fields(&headers);
    let _ = http_cache::variant_key("k", &fields, &headers);
    let mut h = headers.clone();
    http_cache::strip_hop_by_hop(&mut h);
    assert!(!h.contains_key("connection"));
});
