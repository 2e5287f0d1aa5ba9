//! Directory hints [Kuhn 2008], docs/design.md section 4: `strip_size`, `num_dfiles`,
//! `dist` and `no_metafile`, set per directory through the client, the
//! `shoal hint` command and the extended attributes `user.shoal.<hint>` on
//! the mount; copied to new subdirectories; bad values refused with an error
//! naming the hint and what it accepts; and what they do to new files, as
//! `shoal stat --layout` shows it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use bytes::Bytes;
use shoal_client::Client;
use shoal_proto::handle::ROOT;
use shoal_proto::hints::{self, Hint};
use shoal_proto::{Errno, Handle};
use shoal_tests::{pattern, shoal_bin, Cluster};

const KIB: usize = 1024;

fn run(c: &mut Command) -> Output {
    let mut timed = Command::new("timeout");
    timed.arg("120").arg(c.get_program()).args(c.get_args());
    timed.output().expect("spawn")
}

/// `shoal ARGS --config CLUSTER`, asserted to succeed; its stdout.
fn shoal(cluster: &Cluster, args: &[&str]) -> String {
    let out = run(Command::new(shoal_bin())
        .args(args)
        .arg("--config")
        .arg(cluster.config_path()));
    assert!(
        out.status.success(),
        "shoal {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `shoal ARGS --config CLUSTER`, asserted to fail; its stderr.
fn shoal_fails(cluster: &Cluster, args: &[&str]) -> String {
    let out = run(Command::new(shoal_bin())
        .args(args)
        .arg("--config")
        .arg(cluster.config_path()));
    assert!(!out.status.success(), "shoal {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The servers holding `h`'s datafiles and its strip size, per `shoal stat
/// --layout --json`.
fn layout(cluster: &Cluster, path: &str) -> (BTreeSet<u64>, u64, bool) {
    let text = shoal(cluster, &["stat", "--layout", "--json", path]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let l = &v["layout"];
    let servers = l["datafiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["server"].as_u64().unwrap())
        .collect();
    (
        servers,
        l["strip_size"].as_u64().unwrap(),
        l["no_metafile"].as_bool().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_are_set_read_and_cleared_and_bad_values_are_named() {
    let cluster = Cluster::builder().servers(4).baseline().start();
    let client = cluster.client();
    let d = client.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    assert_eq!(client.hints(d).await.unwrap(), Default::default());
    client.set_hint(d, Hint::StripSize, "128K").await.unwrap();
    client.set_hint(d, Hint::NumDfiles, "2").await.unwrap();
    client
        .set_hint(d, Hint::Dist, "simple_stripe:strip_size=8192")
        .await
        .unwrap();
    client.set_hint(d, Hint::NoMetafile, "true").await.unwrap();
    let other = cluster.client();
    let got = hints::list(&other.hints(d).await.unwrap());
    assert_eq!(
        got,
        vec![
            (Hint::StripSize, "131072".into()),
            (Hint::NumDfiles, "2".into()),
            (Hint::Dist, "simple_stripe:strip_size=8192".into()),
            (Hint::NoMetafile, "1".into()),
        ]
    );

    for (hint, value, accepted) in [
        (Hint::StripSize, "1000", "4096 to 1073741824"),
        (Hint::NumDfiles, "5", "1 to 4"),
        (Hint::Dist, "round_robin", "simple_stripe"),
        (Hint::NoMetafile, "yes please", "1, 0, true or false"),
    ] {
        let e = client.set_hint(d, hint, value).await.unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL);
        assert!(
            e.message.contains(hint.name()) && e.message.contains(accepted),
            "{e}"
        );
    }
    let e = client
        .setxattr(d, "user.shoal.stripe", b"1", false, false)
        .await
        .unwrap_err();
    assert!(e.message.contains("strip_size, num_dfiles"), "{e}");
    let f = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    let e = client.set_hint(f, Hint::NoMetafile, "1").await.unwrap_err();
    assert!(e.message.contains("directories"), "{e}");

    client.unset_hint(d, Hint::Dist).await.unwrap();
    client.unset_hint(d, Hint::NoMetafile).await.unwrap();
    let e = client.unset_hint(d, Hint::Dist).await.unwrap_err();
    assert_eq!(e.errno, Errno::ENODATA);
    assert_eq!(
        hints::list(&other.hints(d).await.unwrap()),
        vec![
            (Hint::StripSize, "131072".into()),
            (Hint::NumDfiles, "2".into())
        ],
        "the refused values changed nothing"
    );
    // Hints are xattrs, listed beside the ordinary ones.
    client
        .setxattr(d, "user.note", b"x", false, false)
        .await
        .unwrap();
    assert_eq!(
        client.listxattr(d).await.unwrap(),
        vec![
            "user.shoal.strip_size",
            "user.shoal.num_dfiles",
            "user.note"
        ]
    );
    assert_eq!(
        client.getxattr(d, "user.shoal.num_dfiles").await.unwrap(),
        b"2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_subdirectories_copy_their_parents_hints_when_made() {
    let cluster = Cluster::builder().servers(3).start();
    let client = cluster.client();
    let top = client.mkdir(ROOT, "top", 0o755).await.unwrap().handle;
    client.set_hint(top, Hint::NoMetafile, "1").await.unwrap();
    client.set_hint(top, Hint::StripSize, "64K").await.unwrap();
    let a = client.mkdir(top, "a", 0o755).await.unwrap().handle;
    let b = client.mkdir(a, "b", 0o755).await.unwrap().handle;
    let fresh = cluster.client();
    let top_hints = fresh.hints(top).await.unwrap();
    assert_eq!(fresh.hints(a).await.unwrap(), top_hints);
    assert_eq!(fresh.hints(b).await.unwrap(), top_hints, "and further down");
    // Copied at mkdir: later changes stay where they are made.
    client.unset_hint(top, Hint::NoMetafile).await.unwrap();
    assert!(fresh.hints(a).await.unwrap().no_metafile);
    let c = client.mkdir(top, "c", 0o755).await.unwrap().handle;
    assert!(!fresh.hints(c).await.unwrap().no_metafile);
}

/// Writes `len` bytes to a new file `name` in `dir` and reads them back.
async fn write_file(client: &Client, dir: Handle, name: &str, len: usize) {
    let h = client.create(dir, name, 0o644).await.unwrap().handle;
    let data = pattern(len as u64, len);
    client.write(h, 0, Bytes::from(data.clone())).await.unwrap();
    assert_eq!(client.read(h, 0, len).await.unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn striping_hints_change_the_layout_stat_shows() {
    for baseline in [true, false] {
        let cluster = Cluster::builder().servers(4).baseline_if(baseline).start();
        let client = cluster.client();
        for (dir, hint) in [
            ("one", "num_dfiles=1"),
            ("small", "strip_size=64K"),
            ("dist", "dist=simple_stripe:strip_size=32K"),
        ] {
            client.mkdir(ROOT, dir, 0o755).await.unwrap();
            shoal(&cluster, &["hint", "set", &format!("/{dir}"), hint]);
        }
        let d = |n: &str| {
            let c = client.clone();
            let n = n.to_string();
            async move { c.lookup(ROOT, &n).await.unwrap().0 }
        };
        write_file(&client, ROOT, "plain", 3 << 20).await;
        write_file(&client, d("one").await, "big", 3 << 20).await;
        write_file(&client, d("small").await, "f", 300 * KIB).await;
        write_file(&client, d("dist").await, "f", 300 * KIB).await;

        let (servers, strip, single) = layout(&cluster, "/plain");
        assert_eq!((servers.len(), strip, single), (4, 1 << 20, false));
        let (servers, _, single) = layout(&cluster, "/one/big");
        assert_eq!(servers.len(), 1, "num_dfiles=1: 3 MiB on one server");
        assert!(!single, "a striped file of width 1, with its metafile");
        let (servers, strip, _) = layout(&cluster, "/small/f");
        assert_eq!((servers.len(), strip), (4, 64 << 10), "baseline {baseline}");
        let (_, strip, _) = layout(&cluster, "/dist/f");
        assert_eq!(strip, 32 << 10);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hint_command_sets_gets_and_unsets() {
    let cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    client.mkdir(ROOT, "d", 0o755).await.unwrap();
    shoal(
        &cluster,
        &["hint", "set", "/d", "no_metafile=1", "strip_size=1M"],
    );
    assert_eq!(
        shoal(&cluster, &["hint", "get", "/d"]),
        "strip_size=1048576\nno_metafile=1\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(&shoal(&cluster, &["hint", "get", "--json", "/d"])).unwrap();
    assert_eq!(json["no_metafile"], "1");
    // A bad value anywhere in the list sets nothing.
    let err = shoal_fails(
        &cluster,
        &["hint", "set", "/d", "num_dfiles=1", "num_dfiles=3"],
    );
    assert!(
        err.contains("num_dfiles") && err.contains("1 to 2"),
        "{err}"
    );
    assert!(!shoal(&cluster, &["hint", "get", "/d"]).contains("num_dfiles"));
    let err = shoal_fails(&cluster, &["hint", "set", "/d", "width=2"]);
    assert!(err.contains("unknown hint"), "{err}");
    shoal(&cluster, &["touch", "/d/f"]);
    let err = shoal_fails(&cluster, &["hint", "get", "/d/f"]);
    assert!(err.contains("directories"), "{err}");
    let (_, _, single) = layout(&cluster, "/d/f");
    assert!(single);
    shoal(&cluster, &["hint", "unset", "/d", "no_metafile"]);
    assert_eq!(
        shoal(&cluster, &["hint", "get", "/d"]),
        "strip_size=1048576\n"
    );
    let fsck = shoal(&cluster, &["fsck", "--grace", "0"]);
    assert!(fsck.contains("(1 files without a metafile)"), "{fsck}");
}

/// A bash script run in `dir` under `set -euo pipefail`; its stdout.
fn sh(dir: &Path, script: &str) -> String {
    let out = run(Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\ncd {}\n{script}", dir.display())));
    assert!(
        out.status.success(),
        "{script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_are_extended_attributes_on_the_mount() {
    let mut cluster = Cluster::builder().servers(3).start();
    let mnt = cluster.mount();
    sh(
        &mnt,
        "mkdir d
         setfattr -n user.shoal.no_metafile -v 1 d
         setfattr -n user.shoal.strip_size -v 64K d
         mkdir d/sub
         echo hello > d/sub/f
         chmod 600 d/sub/f
         touch -d '2001-02-03 04:05:06 UTC' d/sub/f",
    );
    let dump = sh(&mnt, "getfattr -d d/sub");
    assert!(
        dump.contains("user.shoal.no_metafile=\"1\"")
            && dump.contains("user.shoal.strip_size=\"65536\""),
        "{dump}"
    );
    assert_eq!(
        sh(&mnt, "getfattr --only-values -n user.shoal.strip_size d"),
        "65536"
    );
    let refused = run(Command::new("setfattr")
        .args(["-n", "user.shoal.num_dfiles", "-v", "4"])
        .arg(mnt.join("d")));
    assert!(!refused.status.success(), "num_dfiles=4 on 3 servers");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Invalid argument"));

    let (servers, _, single) = layout(&cluster, "/d/sub/f");
    assert!(single && servers.len() == 1);
    let listing = sh(&mnt, "LC_ALL=C TZ=UTC ls -l d/sub");
    assert!(
        listing.contains("-rw------- 1 root root 6 Feb  3  2001 f"),
        "{listing}"
    );
    // Moved out through the mount it stays a readable no_metafile file.
    sh(
        &mnt,
        "mv d/sub/f moved && setfattr -x user.shoal.no_metafile d",
    );
    assert_eq!(sh(&mnt, "cat moved"), "hello\n");
    assert!(layout(&cluster, "/moved").2);
    sh(&mnt, "echo again > d/g");
    assert!(
        !layout(&cluster, "/d/g").2,
        "hint removed: a metafile again"
    );
    assert!(!sh(&mnt, "getfattr -d d").contains("no_metafile"));
    sh(&mnt, "rm moved d/g && rm -r d");
}
