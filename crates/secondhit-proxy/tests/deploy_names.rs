//! The Grafana dashboard and the Prometheus alert rules in `deploy/` query the proxy by metric
//! name: every `secondhit_*` name they use must be one `/metrics` exports, or a panel stays
//! empty and an alert never fires, silently. The proxy here runs with every component that adds
//! metrics (the flash tier, shadow policies, the recording), so that all of them are exported.

use secondhit_proxy::clock::SystemClock;
use secondhit_proxy::config::Config;
use secondhit_proxy::server;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The deploy files that query the metrics.
const QUERIERS: [&str; 2] = ["grafana-dashboard.json", "prometheus-alerts.yml"];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every series name the exposition can hold: each family's name (counters carry `_total`
/// there), and a histogram's `_bucket`, `_sum` and `_count`.
fn exported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split(' ');
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            panic!("a TYPE line without a name and a type: {line}");
        };
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
        names.insert(name.to_string());
    }
    names
}

/// The `secondhit_*` words of a file.
fn used(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("secondhit_") {
        let word: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + word.len()..];
        names.insert(word);
    }
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_use_is_exported() {
    let scratch =
        std::env::temp_dir().join(format!("secondhit-deploy-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let mut config = Config::from_toml(&format!(
        "origin = \"http://127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         [cache.disk]\ndir = \"{}\"\ncapacity = \"4MiB\"\nblock_size = \"1MiB\"\n\
         [lab]\nshadow = [\"admit-all\"]\nrecord = \"{}\"\n",
        scratch.join("disk").display(),
        scratch.join("edge.oracleGeneral").display(),
    ))
    .unwrap();
    config.workers = 1;
    let running = server::start(config.validate().unwrap(), Arc::new(SystemClock::new()))
        .await
        .unwrap();
    let exposition = running.proxy.render_metrics();
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&scratch);
    let exported = exported(&exposition);
    // Each component's families are there: the check below compares with all of them.
    for name in [
        "secondhit_requests_total",
        "secondhit_latency_seconds_bucket",
        "secondhit_disk_hits_total",
        "secondhit_shadow_hits_total",
        "secondhit_record_records_total",
    ] {
        assert!(
            exported.contains(name),
            "{name} not exported:\n{exposition}"
        );
    }
    for file in QUERIERS {
        let path = deploy_dir().join(file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let used = used(&text);
        assert!(used.len() >= 10, "{file} queries only {used:?}");
        let unknown: Vec<&String> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses names /metrics does not export: {unknown:?}\nexported: {exported:?}"
        );
    }
}
