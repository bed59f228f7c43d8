//! The configuration parser and validator on arbitrary text.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(c) = secondhit::config::Config::from_toml(text) {
        let _ = c.validate();
    }
});
