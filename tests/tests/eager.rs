//! Eager I/O: a transfer up to `eager_limit` (16 KiB) carries its data in the
//! request or reply, one message per piece; larger transfers, and all of them
//! with `eager` off, first make a rendezvous (two messages per piece).

use bytes::Bytes;
use shoal_proto::handle::ROOT;
use shoal_tests::Cluster;

/// Messages a write and a read of `len` bytes at offset 0 cost (one piece: the
/// strip is 1 MiB), on a cluster with `eager` switched as given.
async fn costs(eager: bool, len: usize) -> (u64, u64) {
    // The direct path: the gathering path would keep a small write; and
    // each write waited for, so its messages are counted within the call.
    let cluster = Cluster::builder()
        .servers(2)
        .baseline()
        .set(&format!("eager={eager}"))
        .set("write_threshold=0")
        .set("write_behind=0")
        .start();
    let client = cluster.uncached_client();
    let h = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    client.distribution(h).await.unwrap();
    let data = Bytes::from(vec![7u8; len]);
    let (written, w) = cluster
        .messages_during(&client, client.write(h, 0, data.clone()))
        .await;
    assert_eq!(written.unwrap(), len);
    let (read, r) = cluster
        .messages_during(&client, client.read(h, 0, len))
        .await;
    assert_eq!(read.unwrap(), data, "bytes read back");
    (w, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_transfers_are_one_message_with_eager_and_two_without() {
    assert_eq!(costs(true, 8192).await, (1, 1));
    assert_eq!(costs(false, 8192).await, (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_above_the_eager_limit_make_a_rendezvous_either_way() {
    assert_eq!(costs(true, 64 << 10).await, (2, 2));
    assert_eq!(costs(false, 64 << 10).await, (2, 2));
}
