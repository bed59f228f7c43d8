//! Every trace reader on arbitrary bytes: errors are fine, panics and hangs are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use secondhit::trace::{self, CsvSpec, Format};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let formats = [
        Format::OracleGeneral,
        Format::Webcachesim,
        Format::Cache2k,
        Format::TencentPhoto,
        Format::Csv(CsvSpec::default()),
        Format::Csv(CsvSpec { delimiter: b' ', time: None, key: 1, size: Some(2), range: Some(3), header: true }),
        Format::Recording,
    ];
    // `None`: recognised by content (a recording), else by the name (a csv here).
    for f in formats.iter().map(Some).chain([None]) {
        let bytes: Box<dyn std::io::BufRead + Send> = Box::new(std::io::Cursor::new(data.to_vec()));
        if let Ok(reader) = trace::reader(Path::new("fuzz.csv"), f, bytes) {
            for r in reader.take(100_000) {
                let _ = r;
            }
        }
    }
});
