//! The `secondhit` binary as a user runs it: outputs, exit codes and error messages.

mod support;

use std::process::{Command, Output};
use support::child::{stderr_lines, wait_for, ServeChild};
use support::{bin, bundled};

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run secondhit")
}

/// Sends `sig` (e.g. `-HUP`) to `child` with the shell's own `kill` (a fresh machine may have
/// no kill program; every machine has `sh`).
fn signal(child: &std::process::Child, sig: &str) -> std::process::ExitStatus {
    Command::new("sh")
        .arg("-c")
        .arg(format!("kill {sig} {}", child.id()))
        .status()
        .expect("run sh")
}

fn stdout_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

#[test]
fn bloom_sizes_and_measures() {
    let v = stdout_json(&run(&[
        "bloom",
        "--items",
        "20000",
        "--fpr",
        "0.01",
        "--measure",
        "--json",
    ]));
    assert_eq!(v["bits"], 191_702);
    assert_eq!(v["hashes"], 7);
    assert_eq!(v["memory_bytes"], 24_000);
    let fpr = v["measured_fpr"].as_f64().unwrap();
    assert!(fpr > 0.007 && fpr < 0.013, "{fpr}");
    assert!(v["insert_ns"].as_f64().unwrap() > 0.0);
    assert!(v["lookup_ns"].as_f64().unwrap() > 0.0);

    let out = run(&["bloom", "--items", "100000000", "--fpr", "0.01"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("bits per item   9.59"), "{text}");
    assert!(text.contains("hashes (k)      7"), "{text}");
    assert!(text.contains("114.3 MiB per generation"), "{text}");

    let out = run(&["bloom", "--fpr", "1.5"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("got 1.5"), "{err}");
}

#[test]
fn simulate_with_no_arguments_uses_the_bundled_trace() {
    let v = stdout_json(&run(&["simulate", "--json", "-"]));
    assert_eq!(v["requests"], 66_987);
    assert_eq!(v["objects"], 40_240);
    assert_eq!(v["working_set_bytes"], 304_213_576);
    assert!((v["one_hit_wonder_ratio"].as_f64().unwrap() - 0.8272).abs() < 1e-4);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 9);
    for r in results {
        for field in [
            "policy",
            "eviction",
            "capacity_bytes",
            "requests",
            "hits",
            "hit_bytes",
            "hit_ratio",
            "byte_hit_ratio",
            "admissions",
            "admitted_bytes",
            "origin_bytes",
            "requests_per_sec",
        ] {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
        let ratio = r["hit_ratio"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&ratio));
    }
    assert_eq!(results[0]["policy"], "admit-all");
    assert_eq!(results[0]["hits"], 14_021);
}

#[test]
fn simulate_writes_csv_and_plot() {
    let dir = std::env::temp_dir().join(format!("secondhit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, svg) = (dir.join("r.csv"), dir.join("r.svg"));
    let out = run(&[
        "simulate",
        "--trace",
        bundled("trace-mt-20130703.trc.bin.gz").to_str().unwrap(),
        "--policy",
        "admit-all,nth-hit:3",
        "--capacity",
        "100,1000",
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("nth-hit:3"), "{table}");
    let csv = std::fs::read_to_string(csv).unwrap();
    assert_eq!(csv.lines().count(), 5);
    assert!(csv.starts_with("trace,policy,eviction,store,capacity_bytes"));
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("byte hit ratio"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// The texts of an SVG's `<text>` elements (plotters writes each on a line of its own).
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

#[test]
fn simulate_plot_ticks_every_size_with_its_table_label() {
    let dir = std::env::temp_dir().join(format!("secondhit-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("r.svg");
    let trace = bundled("request.trace.xz");
    let out = run(&[
        "simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--capacity-fraction",
        "0.01,0.02,0.05,0.1",
        "--json",
        "-",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let v = stdout_json(&out);
    let svg = std::fs::read_to_string(svg).unwrap();
    let texts = svg_texts(&svg);
    let mut sizes: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["capacity_bytes"].as_u64().unwrap())
        .collect();
    sizes.dedup();
    assert_eq!(sizes.len(), 4);
    for s in sizes {
        // The table's label (binary units), once on each of the two panels by size.
        let label = secondhit::units::bytes(s);
        let ticks = texts.iter().filter(|t| **t == label).count();
        assert_eq!(ticks, 2, "{label} in {texts:?}");
    }
    assert!(
        texts
            .iter()
            .all(|t| !t.ends_with(" MB") && !t.ends_with(" kB")),
        "decimal units beside binary ones: {texts:?}"
    );
    // A legend on each of the three panels, and the trace's file name in the title.
    for policy in [
        "admit-all (lru)",
        "second-hit (lru)",
        "second-hit-exact (lru)",
    ] {
        assert_eq!(texts.iter().filter(|t| *t == policy).count(), 3, "{policy}");
    }
    assert!(texts[0].starts_with("request.trace.xz"), "{}", texts[0]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn trace_stats_measures_second_request_distances() {
    let dir = std::env::temp_dir().join(format!("secondhit-dist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("d.svg");
    let trace = bundled("trace-mt-20130703.trc.bin.gz");
    let trace = trace.to_str().unwrap();
    let v = stdout_json(&run(&[
        "trace-stats",
        trace,
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]));
    let d = &v["second_request_distance"];
    // One second request per object that has one.
    assert_eq!(d["second_requests"], 20_484 - 11_066);
    assert_eq!(v["objects"], 20_484);
    assert_eq!(v["one_hit_wonders"], 11_066);
    // Sizeless: the time is the request's number, so requests and seconds agree.
    for (q, requests, objects) in [
        ("p10", 2, 2),
        ("p25", 57, 46),
        ("p50", 6_786, 3_643),
        ("p75", 22_967, 8_811),
        ("p90", 41_872, 13_395),
    ] {
        assert_eq!(d["requests"][q], requests, "{q}");
        assert_eq!(d["bytes"][q], objects, "{q}");
        assert_eq!(d["seconds"][q].as_f64(), Some(requests as f64), "{q}");
    }
    let served: Vec<u64> = d["lru_bound"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["second_requests_served"].as_u64().unwrap())
        .collect();
    assert_eq!(served, [2_639, 3_300, 3_917]);
    let windows: Vec<&str> = d["within_window"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["window"].as_str().unwrap())
        .collect();
    assert_eq!(windows, ["1m", "10m", "1h", "1d"]);
    let texts = svg_texts(&std::fs::read_to_string(&svg).unwrap());
    for mark in ["cache 204 obj (1 %)", "window 1h"] {
        assert!(texts.iter().any(|t| t == mark), "{mark} in {texts:?}");
    }
    // The text report says the same, and a window that never ends is refused by name.
    let out = run(&["trace-stats", trace, "--capacity", "1024"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("at 1,024 obj"), "{text}");
    assert!(text.contains("3,300 (4.34 % of requests)"), "{text}");
    let out = run(&["trace-stats", trace, "--window", "1h,inf"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("\"inf\""), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_traces_give_one_line_naming_the_file_and_position() {
    let dir = std::env::temp_dir().join(format!("secondhit-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A truncated oracleGeneral file: one whole record and 5 bytes.
    let truncated = dir.join("t.oracleGeneral.bin");
    std::fs::write(&truncated, [0u8; 29]).unwrap();
    let garbage = dir.join("g.tr");
    std::fs::write(&garbage, b"1 2 3\n\xff\xfe binary\n").unwrap();
    for (file, want) in [
        (&truncated, "truncated record at byte 24: 5 of 24 bytes"),
        (&garbage, "g.tr:2: not UTF-8 text"),
    ] {
        for cmd in ["trace-stats", "simulate"] {
            let args: Vec<&str> = if cmd == "simulate" {
                vec![cmd, "--trace", file.to_str().unwrap(), "--capacity", "1000"]
            } else {
                vec![cmd, file.to_str().unwrap()]
            };
            let out = run(&args);
            assert_eq!(out.status.code(), Some(1), "{cmd} {}", file.display());
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains(file.to_str().unwrap()) && err.contains(want),
                "{err}"
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn gen_trace_round_trips_through_trace_stats() {
    let dir = std::env::temp_dir().join(format!("secondhit-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["z.tr.gz", "z.oracleGeneral.bin.zst"] {
        let path = dir.join(name);
        let out = run(&[
            "gen-trace",
            "--out",
            path.to_str().unwrap(),
            "--requests",
            "5000",
            "--objects",
            "300",
            "--one-time-share",
            "0.2",
            "--sizes",
            "fixed:10",
            "--seed",
            "7",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = stdout_json(&run(&["trace-stats", path.to_str().unwrap(), "--json"]));
        assert_eq!(v["requests"], 5000);
        // Every request sized 10: the working set is 10 bytes per object.
        assert_eq!(
            v["working_set_bytes"].as_u64().unwrap(),
            10 * v["objects"].as_u64().unwrap()
        );
    }
    // Same seed, both formats: the same trace.
    let a = stdout_json(&run(&[
        "trace-stats",
        dir.join("z.tr.gz").to_str().unwrap(),
        "--json",
    ]));
    let b = stdout_json(&run(&[
        "trace-stats",
        dir.join("z.oracleGeneral.bin.zst").to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(a["objects"], b["objects"]);
    assert_eq!(a["one_hit_wonders"], b["one_hit_wonders"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_undersized_filter_is_named_and_auto_sizes_it() {
    let dir = std::env::temp_dir().join(format!("secondhit-sizing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.tr");
    // 1,000 requests a second of trace time: a 60 s window holds 60,000 requests.
    let out = run(&[
        "gen-trace",
        "--out",
        trace.to_str().unwrap(),
        "--requests",
        "200000",
        "--objects",
        "20000",
        "--one-time-share",
        "0.5",
        "--seed",
        "3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let simulate = |expected: &str| {
        run(&[
            "simulate",
            "--trace",
            trace.to_str().unwrap(),
            "--policy",
            "second-hit",
            "--window",
            "60s",
            "--capacity-fraction",
            "0.05",
            "--expected-items",
            expected,
            "--json",
            "-",
        ])
    };
    let small = simulate("10000");
    let result = &stdout_json(&small)["results"][0];
    assert!(
        result["rotations_on_count"].as_u64().unwrap() > 10,
        "{result}"
    );
    let stderr = String::from_utf8_lossy(&small.stderr);
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("warning: second-hit:"));
    let warning = warning.unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert!(
        warning.contains("generations sized for 10,000 keys")
            && warning.contains("--expected-items"),
        "{warning}"
    );

    let auto = simulate("auto");
    let json = stdout_json(&auto);
    // The busiest 60 s window of the trace, with a quarter more.
    let sized = json["settings"]["expected_items"].as_u64().unwrap();
    assert!((40_000..80_000).contains(&sized), "{sized}");
    let result = &json["results"][0];
    assert_eq!(result["rotations_on_count"], 0, "{result}");
    assert_eq!(
        result["approx_missed_admissions"], 0,
        "no admission lost to an early rotation"
    );
    assert!(!String::from_utf8_lossy(&auto.stderr).contains("warning:"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_planned_sweep_merged_equals_one_run() {
    let dir = std::env::temp_dir().join(format!("secondhit-plan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sweep = [
        "--policy",
        "admit-all,second-hit",
        "--capacity-fraction",
        "0.05",
    ];
    let planned = run(&[&["simulate", "--plan", dir.to_str().unwrap()], &sweep[..]].concat());
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let jobs = std::fs::read_to_string(dir.join("jobs.txt")).unwrap();
    assert_eq!(jobs.lines().count(), 2, "{jobs}");
    // As a scheduler would: GNU parallel where it is installed (CI installs it), else sh.
    let parallel = Command::new("parallel")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let ran = if parallel {
        // In a process group of its own: GNU parallel signals its group as it ends, which
        // would reach the servers other tests run beside this one.
        use std::os::unix::process::CommandExt;
        Command::new("sh")
            .arg("-c")
            .arg(format!("parallel < {}", dir.join("jobs.txt").display()))
            .process_group(0)
            .output()
            .unwrap()
    } else {
        eprintln!("GNU parallel is not installed: the jobs run one by one under sh");
        Command::new("sh")
            .arg(dir.join("jobs.txt"))
            .output()
            .unwrap()
    };
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let results: Vec<String> = (1..=2)
        .map(|n| {
            dir.join(format!("results/job-{n:04}.json"))
                .display()
                .to_string()
        })
        .collect();
    let merged = run(&[
        &["simulate", "--json", "-", "--merge"],
        &results.iter().map(String::as_str).collect::<Vec<_>>()[..],
    ]
    .concat());
    let one = run(&[&["simulate", "--json", "-"], &sweep[..]].concat());
    let (mut merged, mut one) = (stdout_json(&merged), stdout_json(&one));
    // Everything but the timings.
    for report in [&mut merged, &mut one] {
        report.as_object_mut().unwrap().remove("wall_secs");
        for r in report["results"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("requests_per_sec");
        }
    }
    assert_eq!(merged, one);
    // Results of another sweep do not merge with these.
    let other = dir.join("other.json");
    let out = run(&[
        "simulate",
        "--policy",
        "admit-all",
        "--window",
        "10m",
        "--json",
        other.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let refused = run(&["simulate", "--merge", &results[0], other.to_str().unwrap()]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("other.json") && stderr.contains("do not merge"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    // As `secondhit simulate | head -0`: the reader is gone before anything is written.
    for args in [
        &["simulate", "--limit", "2000"][..],
        &["simulate", "--limit", "2000", "--json", "-"][..],
        &["bloom", "--items", "1000"][..],
    ] {
        let mut child = std::process::Command::new(support::bin())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("error"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn an_infinite_origin_latency_is_refused() {
    let out = std::process::Command::new(support::bin())
        .args(["origin", "--latency", "inf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("finite"), "{err}");
}

#[test]
fn simulate_saves_a_warmed_filter_that_serve_loads() {
    let dir = std::env::temp_dir().join(format!("secondhit-save-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(support::bin())
        .args([
            "simulate",
            "--policy",
            "second-hit",
            "--capacity",
            "1MiB",
            "--save-state",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(dir.join("admission.snapshot")).unwrap();
    // The defaults of simulate are serve's: the same filter loads.
    let policy = secondhit::admission::Settings::default()
        .build(secondhit::admission::Policy::SecondHit)
        .unwrap();
    let now = std::time::Duration::from_secs(1_000);
    policy
        .restore(&bytes, now, secondhit::state::wall_now())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(policy.stats().filter.unwrap().current_items > 0);
    // One filter per file: several runs are refused, naming the count.
    let out = std::process::Command::new(support::bin())
        .args(["simulate", "--policy", "second-hit", "--save-state"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--save-state keeps one filter") && err.contains("3 runs"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `serve`'s configuration file for the signal tests: free loopback ports, an origin that
/// refuses connections.
const SERVE_CONFIG: &str =
    "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\norigin = \"http://127.0.0.1:1\"\n";

/// `/metrics` from the admin listener at `admin`; `None` when nothing listens there.
fn admin_metrics(admin: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    Some(out)
}

/// Polls the admin listener (5 s at most) until the config has been reloaded once.
fn reloaded_once(admin: std::net::SocketAddr, child: &mut std::process::Child) -> bool {
    for _ in 0..100 {
        let Some(text) = admin_metrics(admin) else {
            panic!("serve is gone: {:?}", child.try_wait());
        };
        if text.contains("secondhit_config_reloads_total{result=\"ok\"} 1") {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

#[test]
fn sighup_reloads_the_configuration_file() {
    let mut serve = ServeChild::start("sighup", SERVE_CONFIG);
    let before = admin_metrics(serve.admin).expect("serving");
    assert!(before.contains("secondhit_config_reloads_total{result=\"ok\"} 0"));
    assert!(signal(&serve.child, "-HUP").success());
    assert!(
        reloaded_once(serve.admin, &mut serve.child),
        "SIGHUP reloaded the file"
    );
    assert!(signal(&serve.child, "-TERM").success());
    let status = serve.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// A reload or a log rotation sent the moment `serve` says it is ready (as systemd's
/// `ExecReload` and logrotate may) finds its handler: `serve` registers them before it serves.
/// When they were registered after the ready line, a signal in between took the default action
/// and ended the process: the children that died beside GNU parallel's load.
#[cfg(unix)]
#[test]
fn signals_sent_as_soon_as_serve_is_ready_find_their_handlers() {
    for round in 0..4 {
        let mut serve = ServeChild::start("early", SERVE_CONFIG);
        assert!(signal(&serve.child, "-HUP").success());
        assert!(signal(&serve.child, "-USR1").success());
        assert!(
            reloaded_once(serve.admin, &mut serve.child),
            "round {round}: the early SIGHUP reloaded the file"
        );
        assert!(signal(&serve.child, "-TERM").success());
        let status = serve.child.wait().unwrap();
        assert!(status.success(), "round {round}: {status}");
    }
}

#[cfg(unix)]
#[test]
fn sigusr1_reopens_the_access_log_for_rotation() {
    use std::io::{Read, Write};
    let dir = std::env::temp_dir().join(format!("secondhit-usr1-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let mut child = std::process::Command::new(support::bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--origin",
            "http://127.0.0.1:1",
            "--access-log-format",
            "json",
            "--access-log-file",
        ])
        .arg(&log)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let addr = wait_for(&rx, "serving on http://", ' ');
    // The origin refuses connections: every request is a logged 502.
    let get = |n: usize| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET /r{n} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    };
    let count = |p: &std::path::Path| {
        std::fs::read_to_string(p)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    get(0);
    // The log is written off the request path: rotate once the first line is in the file (a
    // line still queued when the signal comes goes to the new file, as it should).
    for _ in 0..400 {
        if count(&log) == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(count(&log), 1, "the first request's line was written");
    let rotated = dir.join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    let kill = |sig: &str| signal(&child, sig);
    assert!(kill("-USR1").success());
    // The signal is handled asynchronously: request until a line lands in the new file.
    let mut sent = 1;
    while count(&log) == 0 && sent < 200 {
        get(sent);
        sent += 1;
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(kill("-TERM").success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(count(&log) >= 1, "SIGUSR1 reopened access.log");
    assert!(
        count(&rotated) >= 1,
        "the first line stayed in the rotated file"
    );
    assert_eq!(
        count(&log) + count(&rotated),
        sent,
        "every request logged once"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn trace_convert_writes_the_same_objects_with_their_next_accesses() {
    let dir = std::env::temp_dir().join(format!("secondhit-convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join("web.oracleGeneral.bin");
    let source = bundled("request.trace.xz");
    let out = run(&[
        "trace-convert",
        source.to_str().unwrap(),
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("wrote 66,987 requests of 40,240 objects"),
        "{stderr}"
    );
    let bytes = std::fs::read(&out_path).unwrap();
    assert_eq!(bytes.len(), 66_987 * 24);
    // Every next access points forward to a record of the same object (1-based), or is -1.
    let rec = |i: usize| &bytes[i * 24..(i + 1) * 24];
    let id = |i: usize| u64::from_le_bytes(rec(i)[4..12].try_into().unwrap());
    let next = |i: usize| i64::from_le_bytes(rec(i)[16..24].try_into().unwrap());
    let mut never = 0;
    for i in 0..66_987 {
        match next(i) {
            -1 => never += 1,
            n => {
                let j = usize::try_from(n - 1).unwrap();
                assert!(j > i && id(j) == id(i), "record {i}: next {n}");
            }
        }
    }
    assert_eq!(never, 40_240, "one last request per object");
    // The simulator sees the same objects: LRU at 1 % has the original trace's 14,021 hits.
    let v = stdout_json(&run(&[
        "simulate",
        "--trace",
        out_path.to_str().unwrap(),
        "--policy",
        "admit-all",
        "--capacity-fraction",
        "0.01",
        "--json",
        "-",
    ]));
    assert_eq!(v["results"][0]["hits"], 14_021);
    // A bad input is named.
    let out = run(&[
        "trace-convert",
        "/nonexistent.tr",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.tr"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn simulate_refuses_evictions_its_store_lacks_and_runs_all() {
    let out = run(&["simulate", "--eviction", "sieve", "--store", "moka"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("eviction sieve exists only in the exact store"),
        "{e}"
    );
    let out = run(&["simulate", "--eviction", "lfru"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("belady-size"));
    let v = stdout_json(&run(&[
        "simulate",
        "--eviction",
        "all",
        "--policy",
        "admit-all",
        "--capacity-fraction",
        "0.01",
        "--json",
        "-",
    ]));
    let names: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["eviction"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "lru",
            "fifo",
            "clock",
            "sieve",
            "s3fifo",
            "arc",
            "wtinylfu",
            "lfu",
            "belady",
            "belady-size"
        ]
    );
    let best = &v["answers"][0]["best_hit_ratio"];
    assert_eq!(
        (best["policy"].as_str(), best["eviction"].as_str()),
        (Some("admit-all"), Some("s3fifo"))
    );
    assert!((v["answers"][0]["belady_hit_ratio"].as_f64().unwrap() - 0.3142).abs() < 1e-4);
}

/// Two-tier runs: flags need --disk-capacity, bad flash evictions are named, and a merge of a
/// flash sweep with a memory-only one shows both tables, each row against its own baseline.
#[test]
fn two_tier_runs_report_per_tier_and_merge_beside_memory_runs() {
    let out = run(&["simulate", "--disk-policy", "admit-all"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--disk-capacity"));
    let out = run(&[
        "simulate",
        "--disk-capacity",
        "1MiB",
        "--disk-eviction",
        "arc",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--disk-eviction arc"));
    let dir = std::env::temp_dir().join(format!("secondhit-cli-tiers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    let flash = run(&[
        "simulate",
        "--policy",
        "admit-all",
        "--capacity",
        "4MiB",
        "--disk-capacity",
        "32MiB",
        "--json",
        a.to_str().unwrap(),
    ]);
    assert!(
        flash.status.success(),
        "{}",
        String::from_utf8_lossy(&flash.stderr)
    );
    let text = String::from_utf8_lossy(&flash.stdout);
    assert!(
        text.contains("flash policy") && text.contains("second-hit"),
        "{text}"
    );
    let memory = run(&[
        "simulate",
        "--policy",
        "admit-all,second-hit",
        "--capacity",
        "4MiB",
        "--json",
        b.to_str().unwrap(),
    ]);
    assert!(memory.status.success());
    let merged = run(&[
        "simulate",
        "--merge",
        a.to_str().unwrap(),
        "--merge",
        b.to_str().unwrap(),
    ]);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let text = String::from_utf8_lossy(&merged.stdout);
    assert!(text.contains("memory only:"), "{text}");
    // second-hit's row is set against the memory-only admit-all, not the two-tier one.
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&b).unwrap()).unwrap();
    let hit = |i: usize| json["results"][i]["hit_ratio"].as_f64().unwrap();
    let pp = format!("{:+.2} pp", (hit(1) - hit(0)) * 100.0);
    assert!(text.contains(&pp), "{pp} in {text}");
    let _ = std::fs::remove_dir_all(&dir);
}
