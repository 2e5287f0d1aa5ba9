//! `shoal up --hosts FILE --launcher CMD` and `shoal down`: a cluster for
//! one job on its own hosts. On three server hosts and two client hosts
//! (network namespaces, `shoal_tests::hosts`), `up` runs on client host c0
//! as a job script on its first node would, starts a server on each host
//! of the hosts file through `scripts/hosts ssh NAME` (a launcher as ssh
//! is: the host, then words for its shell) and mounts on client host c1;
//! each server serves /metrics on its host (`--metrics`); a file written
//! through c1's mount is read from c0; `down` unmounts and stops exactly
//! what `up` started, and `up` again on the same directory brings back the
//! same file system. Bad input fails naming the thing: a
//! hosts file line that does not parse, a launcher that fails (its exit
//! status and what it wrote to stderr).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use shoal_client::mounts;
use shoal_tests::hosts::Hosts;
use shoal_tests::{pattern, shoal_bin};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Processes whose command line names `data` (the cluster's directory):
/// `up`'s servers, mounts and launchers, and nothing else.
fn processes_of(data: &Path) -> Vec<String> {
    let marker = data.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains(&marker) {
            found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

#[test]
fn up_on_hosts_through_a_launcher_mounts_on_a_client_host_and_down_stops_it_all() {
    let hosts = Hosts::up(3, 2);
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("job");
    let hosts_file = work.path().join("hosts");
    // An address with its own port, one with --port's, a comment.
    std::fs::write(
        &hosts_file,
        format!(
            "# the job's server hosts\ns0 {}\ns1 {}:7171\ns2 {}\n",
            Hosts::server_addr(0),
            Hosts::server_addr(1),
            Hosts::server_addr(2)
        ),
    )
    .unwrap();
    let mnt = work.path().join("mnt");
    let up = |extra: &[&str]| {
        hosts
            .command("c0", shoal_bin())
            .arg("up")
            .arg("--data")
            .arg(&data)
            .arg("--hosts")
            .arg(&hosts_file)
            .args(["--launcher", &hosts.launcher(), "--server-data"])
            .arg(work.path().join("local-disk"))
            .args(extra)
            .arg("--detach")
            .output()
            .unwrap()
    };
    let mnt_arg = mnt.to_string_lossy().into_owned();
    let first = up(&["--mount-on", "c1", "--mount", &mnt_arg, "--metrics"]);
    let report = text(&first);
    assert!(first.status.success(), "shoal up: {report}");
    assert!(report.contains("Shoal is up: 3 servers"), "{report}");
    assert!(mounts::is_mounted(&mnt), "not mounted on c1: {report}");

    let cluster = std::fs::read_to_string(data.join("cluster.toml")).unwrap();
    for addr in ["10.77.0.10:7070", "10.77.0.11:7171", "10.77.0.12:7070"] {
        assert!(cluster.contains(addr), "{addr} not in\n{cluster}");
    }
    // --metrics: each server's at its own address, its port + 2400.
    let metrics = hosts.on("c0", || {
        let mut s = std::net::TcpStream::connect("10.77.0.11:9571").expect("server 1's metrics");
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    });
    assert!(
        metrics.contains("shoal_requests_total"),
        "server 1's /metrics from c0: {metrics}"
    );
    let state = std::fs::read_to_string(data.join("state.json")).unwrap();
    assert!(state.contains("\"ssh\""), "the launcher recorded: {state}");
    assert!(state.contains("\"c1\""), "c1's mount recorded: {state}");

    // Written on c1, read from c0 (its own client, through the network).
    std::fs::create_dir(mnt.join("results")).unwrap();
    std::fs::write(mnt.join("results/part-0"), pattern(3, 200_000)).unwrap();
    let cat = || {
        hosts
            .command("c0", shoal_bin())
            .args(["cat", "--config"])
            .arg(data.join("cluster.toml"))
            .arg("/results/part-0")
            .output()
            .unwrap()
    };
    let read = cat();
    assert!(read.status.success(), "shoal cat on c0: {}", text(&read));
    assert!(read.stdout == pattern(3, 200_000), "c0 read what c1 wrote");

    // A bystander whose command line names shoal and the cluster file, as
    // `up`'s processes do, but which `up` did not start: down leaves it.
    let mut bystander = Command::new("python3")
        .args(["-c", "import time; time.sleep(600)", "shoal"])
        .arg(data.join("cluster.toml"))
        .spawn()
        .unwrap();
    let bystander_pid = bystander.id().to_string();
    let stopped = down(&data);
    assert!(stopped.status.success(), "shoal down: {}", text(&stopped));
    assert!(!mounts::is_mounted(&mnt), "still mounted after down");
    let mut left = processes_of(&data);
    left.retain(|p| !p.starts_with(&format!("{bystander_pid}:")));
    assert!(left.is_empty(), "left running after down: {left:#?}");
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "down stopped a process it did not start"
    );
    bystander.kill().unwrap();
    bystander.wait().unwrap();

    // Up again on the same directory and hosts: the same file system.
    let again = up(&[]);
    assert!(again.status.success(), "shoal up again: {}", text(&again));
    let read = cat();
    let stopped_again = down(&data);
    assert!(
        read.stdout == pattern(3, 200_000),
        "after up again: {}",
        text(&read)
    );
    assert!(
        stopped_again.status.success(),
        "shoal down: {}",
        text(&stopped_again)
    );
}

/// `shoal down --data DATA`, run here.
fn down(data: &Path) -> Output {
    Command::new(shoal_bin())
        .arg("down")
        .arg("--data")
        .arg(data)
        .output()
        .unwrap()
}

/// `shoal up --hosts` with `hosts_file`'s text and `launcher`, expected
/// to fail: its output.
fn failed_up(work: &Path, hosts_file: &str, launcher: &str) -> String {
    let file = work.join("hosts");
    std::fs::write(&file, hosts_file).unwrap();
    let out = Command::new(shoal_bin())
        .arg("up")
        .arg("--data")
        .arg(work.join("job"))
        .arg("--hosts")
        .arg(&file)
        .args(["--launcher", launcher, "--detach"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "shoal up succeeded: {}", text(&out));
    text(&out)
}

#[test]
fn a_hosts_file_line_that_does_not_parse_is_named() {
    let work = tempfile::tempdir().unwrap();
    let out = failed_up(work.path(), "n0 127.0.0.1\nn1 127.0.0.x\n", "true");
    assert!(out.contains("line 2") && out.contains("127.0.0.x"), "{out}");
    assert!(out.contains("hosts"), "{out}");
}

#[test]
fn a_failing_launcher_is_named_with_its_exit_status_and_stderr() {
    let work = tempfile::tempdir().unwrap();
    let launcher = work.path().join("no-such-cluster-launcher");
    std::fs::write(
        &launcher,
        "#!/bin/sh\necho \"cannot reach $1\" >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = failed_up(work.path(), "n0 127.0.0.1:1\n", &launcher.to_string_lossy());
    assert!(out.contains("on n0"), "names the host: {out}");
    assert!(out.contains("exit status: 3"), "its status: {out}");
    assert!(out.contains("cannot reach n0"), "its stderr: {out}");
    assert!(
        processes_of(&work.path().join("job")).is_empty(),
        "a failed up leaves nothing running"
    );
}
