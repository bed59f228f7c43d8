//! The Range parser: whatever it returns must lie inside the body.
#![no_main]
use libfuzzer_sys::fuzz_target;
use secondhit::http_cache::{parse_range, RangeRequest};

fuzz_target!(|data: (&str, u32)| {
    let (value, len) = data;
    let len = u64::from(len);
    if let RangeRequest::Partial { start, end } = parse_range(value, len) {
        assert!(start <= end && end < len, "{value:?} of {len}: {start}-{end}");
    }
});
