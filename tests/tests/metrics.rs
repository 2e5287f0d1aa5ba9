//! Prometheus scrapes: each server serves `/metrics` on its `metrics_addr`
//! (which `shoal up --metrics` chooses) and a mount on `shoal mount
//! --metrics ADDR`. Scraped over TCP as
//! Prometheus would, parsed by a Prometheus text-format parser; known work
//! must show up in the request counts and the latency histograms.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use prometheus_parse::{Sample, Scrape, Value};
use shoal_tests::Cluster;

/// `GET /metrics` from `addr`, parsed.
fn scrape(addr: SocketAddr) -> Vec<Sample> {
    scrape_with_help(addr).samples
}

/// `GET /metrics` from `addr`, parsed, with each metric's HELP text.
fn scrape_with_help(addr: SocketAddr) -> Scrape {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the Prometheus text format")
}

/// Every metric the Grafana dashboard's queries name, as its HELP line
/// names it (a histogram's `_bucket` series by the histogram's name).
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/shoal.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("JSON");
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a query");
            for (start, _) in expr.match_indices("shoal_") {
                let name: String = expr[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                names.insert(name.trim_end_matches("_bucket").to_string());
            }
        }
    }
    names
}

/// The value of each sample named `metric`, by its labels other than `le`.
fn values(samples: &[Sample], metric: &str) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|s| s.metric == metric)
        .map(|s| {
            let v = match &s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
                other => panic!("{metric}: not a number: {other:?}"),
            };
            (s.labels.to_string(), v)
        })
        .collect()
}

/// Checks every histogram named `metric`: cumulative buckets ending in
/// +Inf at the `_count` of the same labels, which equals `requests`' value
/// (the same labels' request counter). Returns how many it checked.
fn check_histograms(samples: &[Sample], metric: &str, requests: &str) -> usize {
    let counts = values(samples, requests);
    let mut checked = 0;
    for s in samples.iter().filter(|s| s.metric == metric) {
        let Value::Histogram(buckets) = &s.value else {
            panic!("{metric} is not a histogram: {s:?}");
        };
        assert!(
            buckets
                .windows(2)
                .all(|w| w[0].less_than < w[1].less_than && w[0].count <= w[1].count),
            "{metric}{{{}}}: buckets not cumulative: {buckets:?}",
            s.labels
        );
        let last = buckets.last().expect("buckets");
        assert!(last.less_than.is_infinite(), "{buckets:?}");
        let labels = s.labels.to_string();
        assert_eq!(
            Some(&last.count),
            counts.get(&labels),
            "{metric}{{{labels}}}: +Inf bucket against {requests}"
        );
        checked += 1;
    }
    checked
}

fn total(v: &BTreeMap<String, f64>) -> f64 {
    v.values().sum()
}

#[test]
fn servers_and_a_mount_serve_what_they_count() {
    let mut cluster = Cluster::builder().servers(2).metrics().start();
    let mount_addr = shoal_net::ports::free_loopback_addr().expect("a free port");
    let mnt = cluster.mount_with(&["--metrics", &mount_addr.to_string()]);
    let servers: Vec<SocketAddr> = cluster
        .config()
        .servers
        .iter()
        .map(|s| s.metrics_addr.expect("a metrics address"))
        .collect();
    let scrape_servers = || -> Vec<Sample> { servers.iter().flat_map(|a| scrape(*a)).collect() };

    let before = scrape_servers();
    let mount_before = scrape(mount_addr);

    // Known work: through the mount, and `stats` requests from a client.
    let dir = mnt.join("d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..10 {
        std::fs::write(dir.join(format!("f{i}")), vec![b'x'; 5000]).unwrap();
    }
    for i in 0..10 {
        assert_eq!(
            std::fs::read(dir.join(format!("f{i}"))).unwrap().len(),
            5000
        );
    }
    let client = cluster.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for _ in 0..3 {
        rt.block_on(client.server_stats(1)).unwrap();
    }

    let after = scrape_servers();
    let requests = |samples: &[Sample]| values(samples, "shoal_requests_total");
    let (was, now) = (requests(&before), requests(&after));
    for (labels, n) in &was {
        assert!(now[labels] >= *n, "{labels}: {n} then {}", now[labels]);
    }
    assert!(total(&now) > total(&was), "{was:?} then {now:?}");
    let stats_of_1 = "op=\"stats\",server=\"1\"";
    assert_eq!(
        now.get(stats_of_1).copied().unwrap_or(0.0) - was.get(stats_of_1).copied().unwrap_or(0.0),
        3.0,
        "{now:?}"
    );
    for server in ["0", "1"] {
        let up = values(&after, "shoal_uptime_seconds");
        assert!(up[&format!("server=\"{server}\"")] > 0.0, "{up:?}");
    }
    assert!(
        check_histograms(
            &after,
            "shoal_request_duration_seconds",
            "shoal_requests_total"
        ) >= 3
    );
    for metric in [
        "shoal_kv_syncs_total",
        "shoal_leases_held",
        "shoal_delegations_held",
        "shoal_kept_changes",
        "shoal_lease_recalls_total",
    ] {
        assert_eq!(values(&after, metric).len(), 2, "{metric} of each server");
    }

    let mount_scrape = scrape_with_help(mount_addr);
    let server_scrape = scrape_with_help(servers[0]);
    let named = dashboard_metrics();
    assert!(named.len() >= 10, "{named:?}");
    for name in named {
        assert!(
            server_scrape.docs.contains_key(&name) || mount_scrape.docs.contains_key(&name),
            "the dashboard queries {name}, which nothing serves"
        );
    }
    let mount_after = mount_scrape.samples;
    let requests = |samples: &[Sample]| values(samples, "shoal_mount_requests_total");
    let of = |v: &BTreeMap<String, f64>, op: &str| {
        let key = format!("mount=\"{}\",op=\"{op}\"", mnt.display());
        v.get(&key).copied().unwrap_or(0.0)
    };
    let (was, now) = (requests(&mount_before), requests(&mount_after));
    assert_eq!(of(&now, "mkdir") - of(&was, "mkdir"), 1.0, "{now:?}");
    assert_eq!(of(&now, "create") - of(&was, "create"), 10.0, "{now:?}");
    assert!(of(&now, "read") - of(&was, "read") >= 10.0, "{now:?}");
    assert!(
        check_histograms(
            &mount_after,
            "shoal_mount_request_duration_seconds",
            "shoal_mount_requests_total"
        ) >= 3
    );
    let written = values(&mount_after, "shoal_mount_written_bytes_total");
    assert_eq!(total(&written), 50_000.0, "{written:?}");
}

#[test]
fn a_metrics_address_taken_stops_the_server_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics = taken.local_addr().unwrap();
    let addr = shoal_net::ports::free_loopback_addr().expect("a free port");
    let config = dir.path().join("cluster.toml");
    std::fs::write(
        &config,
        format!(
            "[[server]]\nid = 0\naddr = \"{addr}\"\ndata = \"{}\"\nmetrics_addr = \"{metrics}\"\n",
            dir.path().join("server-0").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(shoal_tests::shoal_bin())
        .args(["server", "--id", "0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "server 0: cannot serve metrics on {metrics} (its metrics_addr)"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `shoal up --metrics`: each server gets a metrics address, kept in the
/// cluster file, so a later `up` without the flag serves there again.
#[test]
fn shoal_up_gives_each_server_a_metrics_address_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cluster");
    let shoal = |args: &[&str]| {
        let out = std::process::Command::new(shoal_tests::shoal_bin())
            .args(args)
            .arg("--data")
            .arg(&data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let addresses = || -> Vec<SocketAddr> {
        let config = shoal_proto::cluster::ClusterConfig::load(&data.join("cluster.toml")).unwrap();
        config
            .servers
            .iter()
            .filter_map(|s| s.metrics_addr)
            .collect()
    };
    let served = |addrs: &[SocketAddr]| {
        for (id, addr) in addrs.iter().enumerate() {
            let up = values(&scrape(*addr), "shoal_uptime_seconds");
            assert_eq!(up.keys().collect::<Vec<_>>(), [&format!("server=\"{id}\"")]);
        }
    };

    let (ok, text) = shoal(&["up", "--servers", "2", "--metrics", "--detach"]);
    let first = addresses();
    let started = std::panic::catch_unwind(|| {
        assert!(ok, "{text}");
        assert_eq!(first.len(), 2, "{text}");
        assert_ne!(first[0], first[1]);
        assert!(
            text.contains(&format!("server 1 at {}", first[1])),
            "{text}"
        );
        served(&first);
    });
    let (ok, down) = shoal(&["down"]);
    assert!(ok, "{down}");
    if let Err(e) = started {
        std::panic::resume_unwind(e);
    }

    let (ok, text) = shoal(&["up", "--detach"]);
    let again = std::panic::catch_unwind(|| {
        assert!(ok, "{text}");
        assert_eq!(addresses(), first);
        served(&first);
    });
    let (ok, down) = shoal(&["down"]);
    assert!(ok, "{down}");
    if let Err(e) = again {
        std::panic::resume_unwind(e);
    }
}
