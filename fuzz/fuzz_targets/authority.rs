//! The Host / :authority parser: never panics, and what it accepts is a fixed point (parsing the
//! normalised form gives it back) that holds no byte a path or a key separator could use.
#![no_main]
use libfuzzer_sys::fuzz_target;
use secondhit::proxy::authority::Host;

fuzz_target!(|data: &[u8]| {
    for default_port in [80u16, 443] {
        if let Ok(h) = Host::parse(data, default_port) {
            let text = h.as_str();
            assert!(!text.is_empty());
            assert!(!text.bytes().any(|b| matches!(b, b'/' | b'?' | b'#' | b'@' | b'\\' | b' ' | b'\n' | b'\r') || !b.is_ascii()));
            assert!(text.starts_with(h.name()));
            let again = Host::parse(text.as_bytes(), default_port).expect("normal form parses");
            assert_eq!(again.as_str(), text, "normalising is idempotent");
        }
    }
});
