//! The proxy crate serves traffic and nothing else: no command-line, plotting, progress-bar or
//! trace-compression crate may reach it (those are the binary's and the lab's). zstd is the one
//! exception, and only through foyer-storage, which compresses flash-tier entries with it.

use std::process::Command;

/// Crates that belong to the binary or the lab, never to what serves traffic.
const FORBIDDEN: &[&str] = &["clap", "plotters", "indicatif", "xz2", "bzip2", "flate2"];

/// `cargo tree -p secondhit-proxy -e normal -i name --depth 1`: what in the proxy's dependency
/// tree depends on `name` directly, or `None` when nothing does by a normal edge.
fn direct_dependents(name: &str) -> Option<Vec<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-p", "secondhit-proxy", "-e", "normal"])
        .args(["--prefix", "none", "--depth", "1", "-i", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // Not in the tree: cargo says the package spec matched nothing. (Two versions of one
        // crate in the lock file make the spec ambiguous instead: name one then.)
        assert!(
            stderr.contains("did not match any packages"),
            "cargo tree -i {name}: {stderr}"
        );
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The first line is `name` itself; each name is followed by its version.
    let names: Vec<String> = stdout
        .lines()
        .skip(1)
        .map(|l| l.split(' ').next().unwrap_or(l).to_string())
        .collect();
    // In the tree only through a dev-dependency (criterion's clap, for the benches): nothing
    // depends on it by a normal edge, and it is not built into what serves traffic.
    (!names.is_empty()).then_some(names)
}

#[test]
fn the_proxy_crate_pulls_in_no_cli_plotting_progress_or_trace_compression_crate() {
    for name in FORBIDDEN {
        assert_eq!(
            direct_dependents(name),
            None,
            "{name} reaches secondhit-proxy"
        );
    }
    assert_eq!(
        direct_dependents("zstd"),
        Some(vec!["foyer-storage".to_string()])
    );
    // The question is asked of the right tree: a crate the proxy does use is found in it.
    assert!(direct_dependents("hyper").is_some_and(|d| d.iter().any(|n| n == "secondhit-proxy")));
}
