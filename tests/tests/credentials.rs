//! User credentials (`shoal_proto::credential`): a connection opened with
//! one acts for its user and no one else. Requests that name another user
//! are refused, every one of them, and counted; what only servers and
//! administrators send is refused too; a credential that expired, or that
//! this cluster's secret did not make, opens no connection, and a
//! connection ends when its credential expires. Then the broker
//! (`shoal agent`) as real users see it: an unprivileged user gets a
//! credential for itself only and cannot read the secret.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use shoal_client::{Client, SetAttr};
use shoal_proto::auth::{client_handshake, Proof, Secret};
use shoal_proto::credential::{CredentialKey, Issued};
use shoal_proto::error::Errno;
use shoal_proto::frame::{read_frame, write_frame, Frame};
use shoal_proto::handle::ROOT;
use shoal_proto::msg::*;
use shoal_proto::{Cred, Op};
use shoal_tests::{entry_names, shoal_bin, Cluster};
use tokio::io::BufReader;
use tokio::net::TcpStream;

const ALICE: Cred = Cred::new(1001, 1001);

fn key_of(cluster: &Cluster) -> CredentialKey {
    CredentialKey::derive(&cluster.config().secret().unwrap().unwrap())
}

fn credential(cluster: &Cluster, who: Cred, lifetime_s: u64) -> Issued {
    key_of(cluster).issue(who, shoal_proto::time::now_s() + lifetime_s)
}

/// A raw connection to server 0, opened with `issued`.
async fn raw(cluster: &Cluster, issued: &Issued) -> TcpStream {
    let addr = cluster.config().servers[0].addr;
    let mut s = TcpStream::connect(addr).await.unwrap();
    client_handshake(&mut s, Proof::Credential(issued), "server 0")
        .await
        .unwrap();
    s
}

/// Sends `frames` on `s` and reads one reply each.
async fn exchange(s: TcpStream, frames: &[Frame]) -> Vec<Frame> {
    let (r, mut w) = s.into_split();
    for f in frames {
        write_frame(&mut w, f).await.unwrap();
    }
    let mut r = BufReader::new(r);
    let mut replies = Vec::new();
    for _ in frames {
        replies.push(read_frame(&mut r).await.unwrap());
    }
    replies
}

fn request<M: Message>(op: Op, id: u64, cred: Cred, body: &M) -> Frame {
    Frame::request(
        op,
        id,
        cred,
        Bytes::from(body.encode_to_vec()),
        Bytes::new(),
    )
}

async fn refusals(cluster: &Cluster, root: &Client) -> u64 {
    let mut n = 0;
    for s in cluster.server_ids() {
        n += root.server_stats(s).await.unwrap().identity_refusals;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_acts_for_its_user_and_no_request_for_another_is_served() {
    let cluster = Cluster::builder().servers(2).start();
    let root = cluster.client();
    let shared = root.mkdir(ROOT, "shared", 0o777).await.unwrap().handle;
    root.create(shared, "roots", 0o600).await.unwrap();
    let before = refusals(&cluster, &root).await;

    // As alice: her own files, with her as owner; the modes as for her.
    let alice = Client::with_credential(cluster.config().clone(), credential(&cluster, ALICE, 600));
    assert_eq!(alice.cred(), ALICE);
    assert_eq!(alice.credential_user(), Some(ALICE));
    let mine = alice.create(shared, "mine", 0o644).await.unwrap();
    assert_eq!((mine.uid, mine.gid), (1001, 1001));
    let e = alice.create(ROOT, "not-hers", 0o644).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e:?}");

    // The same connections, acting for root or for bob: refused, however
    // harmless the request.
    let mut forged = 0;
    for who in [Cred::ROOT, Cred::new(1002, 1002), ALICE.with_groups(&[0])] {
        let as_other = alice.with_cred(who);
        let e = as_other.create(shared, "forged", 0o644).await.unwrap_err();
        assert_eq!(e.errno, Errno::EACCES, "{who:?}: {e:?}");
        let e = as_other
            .mkdir(shared, "forged-dir", 0o755)
            .await
            .unwrap_err();
        assert_eq!(e.errno, Errno::EACCES, "{who:?}: {e:?}");
        let chown = SetAttr {
            uid: Some(0),
            ..Default::default()
        };
        let e = as_other.setattr(mine.handle, &chown).await.unwrap_err();
        assert_eq!(e.errno, Errno::EACCES, "{who:?}: {e:?}");
        forged += 3;
    }

    // Frame by frame, on a raw connection of alice's: every request that
    // acts for someone else is refused with EACCES, whatever it is, and so
    // is a replayed change of someone else's inside her own recover; what
    // only servers and fsck send is refused even as herself.
    let issued = credential(&cluster, ALICE, 600);
    let create = CreateFileRequest {
        dir: shared,
        name: "raw".into(),
        parent: shared,
        stuffed: true,
        ..Default::default()
    };
    let someone_elses = Replayed {
        op: Op::CreateFile as u32,
        id: 9,
        uid: 0,
        gid: 0,
        body: create.encode_to_vec().into(),
        ..Default::default()
    };
    let bob = Cred::new(1002, 1002);
    let frames = vec![
        request(Op::Ping, 1, Cred::ROOT, &Empty {}),
        request(Op::GetAttr, 2, bob, &GetAttrRequest { handle: ROOT }),
        request(Op::CreateFile, 3, Cred::ROOT, &create),
        request(
            Op::Lookup,
            4,
            bob,
            &LookupRequest {
                dir: shared,
                name: "roots".into(),
                ..Default::default()
            },
        ),
        request(
            Op::Recover,
            5,
            ALICE,
            &RecoverRequest {
                boot: 1,
                items: vec![someone_elses],
            },
        ),
        request(Op::Scan, 6, ALICE, &ScanRequest::default()),
        request(
            Op::Remove,
            7,
            ALICE,
            &RemoveRequest {
                handle: mine.handle,
                ..Default::default()
            },
        ),
        request(Op::Ping, 8, ALICE, &Empty {}),
    ];
    let replies = exchange(raw(&cluster, &issued).await, &frames).await;
    let statuses: Vec<i32> = replies.iter().map(|r| r.header.status).collect();
    let (eacces, eperm) = (Errno::EACCES.0, Errno::EPERM.0);
    assert_eq!(
        statuses,
        [eacces, eacces, eacces, eacces, eacces, eperm, eperm, 0],
        "one reply per frame, in order"
    );
    forged += 7;

    // Counted, each one; and none of it happened.
    assert_eq!(refusals(&cluster, &root).await - before, forged);
    let names = entry_names(&root, shared).await;
    assert_eq!(names, ["mine", "roots"], "{names:?}");
    assert_eq!(root.getattr(mine.handle).await.unwrap().uid, 1001);
    let mut users = 0;
    for s in cluster.server_ids() {
        users += root.server_stats(s).await.unwrap().user_connections;
    }
    assert!(users >= 2, "alice's client and the raw connection: {users}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_foreign_credential_opens_nothing_and_a_connection_ends_with_its_credential()
{
    let cluster = Cluster::builder().servers(1).start();
    let root = cluster.client();
    let now = shoal_proto::time::now_s();

    // Replayed after its expiry: refused at the handshake.
    let expired = key_of(&cluster).issue(ALICE, now - 1);
    let late = Client::with_credential(cluster.config().clone(), expired);
    let e = late.getattr(ROOT).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e:?}");
    assert!(
        e.message.contains("refused the user credential"),
        "{}",
        e.message
    );

    // Made with another cluster's secret (a broker of another cluster, or a
    // forger's guess): refused.
    let other = CredentialKey::derive(&Secret::new(b"another cluster").unwrap());
    let foreign = Client::with_credential(cluster.config().clone(), other.issue(ALICE, now + 600));
    assert_eq!(
        foreign.getattr(ROOT).await.unwrap_err().errno,
        Errno::EACCES
    );

    // A live one is served until it expires; the server then ends the
    // connection at its next request, and the expired credential opens no
    // new one.
    let short = key_of(&cluster).issue(ALICE, now + 2);
    let s = raw(&cluster, &short).await;
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    write_frame(&mut w, &request(Op::Ping, 1, ALICE, &Empty {}))
        .await
        .unwrap();
    assert_eq!(read_frame(&mut r).await.unwrap().header.status, 0);
    while shoal_proto::time::now_s() <= now + 2 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    write_frame(&mut w, &request(Op::Ping, 2, ALICE, &Empty {}))
        .await
        .unwrap();
    assert!(read_frame(&mut r).await.is_err(), "the connection ended");
    let addr = cluster.config().servers[0].addr;
    let mut again = TcpStream::connect(addr).await.unwrap();
    let e = client_handshake(&mut again, Proof::Credential(&short), "server 0")
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EACCES);
    // The secret's holders never noticed.
    root.getattr(ROOT).await.unwrap();
}

/// `shoal agent` for the cluster file `config`, until dropped.
struct Agent(Child);

impl Agent {
    fn start(cluster: &Cluster) -> Agent {
        let socket = cluster.config().broker_socket().expect("a broker socket");
        let child = Command::new(shoal_bin())
            .arg("agent")
            .arg(cluster.config_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        shoal_tests::eventually("the agent listens", || socket.exists());
        Agent(child)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// `shoal ARGS` as `uid` (its own gid, no other group).
fn shoal_as(uid: u32, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(shoal_bin())
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprivileged_user_gets_a_credential_for_itself_and_never_the_secret() {
    let cluster = Cluster::builder().servers(2).start();
    // A cluster directory users can read (the cluster file), with the
    // secret in it private, as `shoal up` leaves it.
    std::fs::set_permissions(cluster.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = cluster.config_path().to_str().unwrap().to_string();
    let root = cluster.client();
    let shared = root.mkdir(ROOT, "shared", 0o777).await.unwrap().handle;
    root.create(shared, "roots", 0o600).await.unwrap();
    let agent = Agent::start(&cluster);
    let socket = cluster.config().broker_socket().unwrap();
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o666, "every user may ask");

    // Alice reaches the servers with a credential for herself: her files
    // are hers, root's private one stays root's.
    let out = shoal_as(1001, &["touch", "--config", &config, "/shared/alices"]);
    assert!(out.status.success(), "{out:?}");
    let out = shoal_as(1001, &["cat", "--config", &config, "/shared/roots"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("uid 1001 may not read"),
        "{out:?}"
    );
    let names = entry_names(&root, shared).await;
    assert_eq!(names, ["alices", "roots"]);
    let (h, _) = root.lookup(shared, "alices").await.unwrap();
    assert_eq!(root.getattr(h).await.unwrap().uid, 1001);
    let mut users = 0;
    for s in cluster.server_ids() {
        users += root.server_stats(s).await.unwrap().user_connections;
    }
    assert!(users >= 1, "served through a credential: {users}");

    // She cannot read the secret, nor the broker's memory where its key is.
    let secret = cluster.config().secret_file.clone().unwrap();
    let read = |path: String| {
        Command::new("setpriv")
            .args(["--reuid=1001", "--regid=1001", "--clear-groups", "cat"])
            .arg(path)
            .output()
            .unwrap()
    };
    assert!(!read(secret.display().to_string()).status.success());
    let mem = format!("/proc/{}/mem", agent.0.id());
    assert!(!read(mem).status.success());

    // Without a broker, and without the secret, she is refused (a clear
    // message, not a hang).
    drop(agent);
    let out = shoal_as(1001, &["touch", "--config", &config, "/shared/later"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no credential broker"), "{stderr}");
}

/// A root program under the preload library forks; the child, after a call
/// as root, becomes another user (as `su` or a daemon dropping its
/// privileges does) and carries on: its library builds a session for the
/// user it is now (a credential from the mount's broker), never keeping
/// root's, and the parent stays root.
#[test]
fn a_forked_child_that_changes_user_acts_as_that_user() {
    let cluster = Cluster::builder().servers(2).start();
    std::fs::set_permissions(cluster.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let m = shoal_tests::SharedMount::new(&cluster);
    let dir = m.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::write(dir.join("roots"), "root's\n").unwrap();
    std::fs::set_permissions(dir.join("roots"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = r#"
import os, sys
d = sys.argv[1]
open(os.path.join(d, "parent-before"), "w").write("root\n")
pid = os.fork()
if pid == 0:
    # A call as root first: the child's session is root's until it drops.
    open(os.path.join(d, "child-as-root"), "w").write("root\n")
    os.setgroups([])
    os.setgid(1001)
    os.setuid(1001)
    open(os.path.join(d, "child"), "w").write("alice\n")
    try:
        open(os.path.join(d, "roots")).read()
        sys.exit(3)
    except PermissionError:
        sys.exit(0)
_, status = os.waitpid(pid, 0)
open(os.path.join(d, "parent-after"), "w").write("root\n")
print(open(os.path.join(d, "roots")).read(), end="")
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let stats = tempfile::Builder::new()
        .prefix("shoal-fork-stats-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(stats.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&dir)
        .env(
            "LD_PRELOAD",
            shoal_bin().with_file_name("libshoal_preload.so"),
        )
        .env("SHOAL_STATS", stats.path().join("%p"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "root's\n");
    // Both served by the library: the parent with the secret, the child
    // with alice's credential.
    let tables: Vec<String> = std::fs::read_dir(stats.path())
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert_eq!(tables.len(), 2, "{tables:?}");
    assert!(
        tables
            .iter()
            .any(|t| t.contains("# served with the cluster secret")),
        "{tables:?}"
    );
    assert!(
        tables
            .iter()
            .any(|t| t.contains("# served as uid 1001, by a user credential")),
        "{tables:?}"
    );
    let owner = |n: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir.join(n)).unwrap().uid()
    };
    assert_eq!(owner("parent-before"), 0);
    assert_eq!(owner("child-as-root"), 0);
    assert_eq!(owner("child"), 1001);
    assert_eq!(owner("parent-after"), 0);
}

/// Garbage where a credential should be (an unknown proof kind, a length
/// past the longest credential, a truncated one, random bytes): the
/// connection is refused or closed, never served, and the server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_credential_closes_that_connection_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::builder().servers(1).start();
    let addr = cluster.config().servers[0].addr;
    let good = credential(&cluster, ALICE, 600).credential.encode();
    let mut garbage: Vec<Vec<u8>> = vec![
        vec![9; 40],
        [&[2u8][..], &u16::MAX.to_be_bytes(), &[0; 64]].concat(),
        [
            &[2u8][..],
            &(good.len() as u16).to_be_bytes(),
            &good[..good.len() / 2],
        ]
        .concat(),
    ];
    for n in [0usize, 1, 33, 200, 300] {
        let len = (n as u16).to_be_bytes();
        let noise: Vec<u8> = (0..n + 32).map(|i| (i * 37 + n) as u8).collect();
        garbage.push([&[2u8][..], &len, &noise].concat());
    }
    for bytes in garbage {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut nonce = [0u8; 32];
        s.read_exact(&mut nonce).await.unwrap();
        let _ = s.write_all(&bytes).await;
        let _ = s.shutdown().await;
        // A refusal byte or nothing, then the end: never a frame.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
        assert!(rest.len() <= 1 && rest.iter().all(|&b| b == 0), "{rest:?}");
    }
    cluster.client().getattr(ROOT).await.unwrap();
}

/// A user's process that outlives its credential (here 10 s) goes on
/// unnoticed: the library asks the broker for a new one and replaces its
/// connections before their credential expires, so no request meets an
/// expired one and nothing fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_outliving_its_credential_renews_it_unnoticed() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("credential_ttl_s=10")
        .start();
    std::fs::set_permissions(cluster.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let m = shoal_tests::SharedMount::new(&cluster);
    let dir = m.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let script = r#"
import os, sys, time
d, t0, n = sys.argv[1], time.time(), 0
while time.time() - t0 < 14:
    p = os.path.join(d, "f%d" % n)
    with open(p, "w") as f:
        f.write("x" * 100)
    assert open(p).read() == "x" * 100
    n += 1
    time.sleep(0.1)
print(n)
"#;
    let out = Command::new("setpriv")
        .args([
            "--reuid=1001",
            "--regid=1001",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(&dir)
        .env(
            "LD_PRELOAD",
            shoal_bin().with_file_name("libshoal_preload.so"),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let root = cluster.client();
    let (mut most, mut refused) = (0, 0);
    for s in cluster.server_ids() {
        let st = root.server_stats(s).await.unwrap();
        most = most.max(st.user_connections);
        refused += st.identity_refusals;
    }
    assert_eq!(refused, 0);
    // The server of its directory: a first connection, then at least one
    // more, opened with a renewed credential.
    assert!(most >= 2, "connections opened with a credential: {most}");
    for id in cluster.server_ids() {
        let log = cluster.read_log(&format!("server-{id}"));
        assert!(!log.contains("credential expired"), "{log}");
    }
}
