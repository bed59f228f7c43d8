//! The lean HTTP/1 origin client (`crates/secondhit-proxy/src/origin/h1.rs`: head parser,
//! framing, chunked decoder) against httparse and hyper's client on the same bytes, read whole and split across reads:
//! never more lenient than hyper, never a different status, field, reason or body where both
//! read a response (`secondhit::origin::h1::differential::check`). The first byte's low bit
//! makes the request a HEAD; the rest is what the origin sends before it closes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use secondhit::origin::h1::differential;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, wire)) = data.split_first() else {
        return;
    };
    differential::check(wire, flags & 1 == 1);
});
