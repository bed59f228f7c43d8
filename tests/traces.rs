//! Every trace reader on a real file: the summaries must match `traces/README.md` and the team's
//! `shared/traces/SOURCES.md` exactly.

mod support;

use secondhit::trace::{self, stats, Format};
use std::path::Path;
use support::{bundled, shared};

fn summary(path: &Path, format: Option<&Format>) -> stats::TraceStats {
    let reader = trace::open(path, format).unwrap_or_else(|e| panic!("{e}"));
    stats::collect(reader).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn webcachesim_request_trace() {
    let paths = [
        Some(bundled("request.trace.xz")),
        shared("request.trace.xz"),
    ];
    for path in paths.into_iter().flatten() {
        let s = summary(&path, None);
        assert_eq!(s.requests, 66_987);
        assert_eq!(s.objects, 40_240);
        assert_eq!(s.one_hit_wonders, 33_288);
        assert_eq!(format!("{:.2}", s.one_hit_wonder_ratio * 100.0), "82.72");
        assert_eq!(s.working_set_bytes, 304_213_576);
        assert_eq!(s.requested_bytes, 485_457_552);
        assert_eq!(s.duration_secs, 66_986.0);
    }
}

#[test]
fn cache2k_web07_trace() {
    let paths = [
        Some(bundled("trace-mt-20130703.trc.bin.gz")),
        shared("trace-mt-20130703.trc.bin.gz"),
    ];
    for path in paths.into_iter().flatten() {
        let s = summary(&path, None);
        assert_eq!(s.requests, 76_118);
        assert_eq!(s.objects, 20_484);
        assert_eq!(s.one_hit_wonders, 11_066);
        assert_eq!(format!("{:.2}", s.one_hit_wonder_ratio * 100.0), "54.02");
        assert_eq!(s.working_set_bytes, 20_484);
    }
}

#[test]
fn tencent_photo_sample() {
    let Some(path) = shared("cloud_photos-sample.bz2") else {
        return;
    };
    let s = summary(&path, None);
    assert_eq!(s.requests, 9_954); // 10,000 rows less 46 of size 0
    assert_eq!(s.objects, 9_659);
    assert_eq!(s.one_hit_wonders, 9_451);
    assert_eq!(format!("{:.2}", s.one_hit_wonder_ratio * 100.0), "97.85");
    assert_eq!(s.working_set_bytes, 305_537_207);
    assert_eq!(s.duration_secs, 11.0);
}

#[test]
fn oracle_general_cloudphysics() {
    let Some(path) = shared("cloudPhysicsIO.oracleGeneral.bin") else {
        return;
    };
    let s = summary(&path, None);
    assert_eq!(s.requests, 113_872);
    assert_eq!(s.objects, 48_974);
    assert_eq!(s.one_hit_wonders, 21_049);
    assert_eq!(format!("{:.2}", s.one_hit_wonder_ratio * 100.0), "42.98");
    assert_eq!(s.working_set_bytes, 2_029_769_728);
    assert_eq!(s.duration_secs, 7_200.0);
}

#[test]
fn explicit_format_overrides_the_name() {
    // The same web trace read as CSV with space-separated columns gives the same summary
    // only when keyed the same way; keyed on the id alone it has fewer objects (36,815, the
    // libCacheSim csv reader's rule, see SOURCES.md).
    let spec = trace::CsvSpec {
        delimiter: b' ',
        time: Some(1),
        key: 2,
        size: Some(3),
        range: None,
        header: false,
    };
    let s = summary(&bundled("request.trace.xz"), Some(&Format::Csv(spec)));
    assert_eq!(s.requests, 66_987);
    assert_eq!(s.objects, 36_815);
}
