//! What a cluster's settings make of durability, in words: when a change
//! is durable, and what a crash of a server or a client can take, derived
//! from `sync`, `dir_delegations` and their timings, so that `shoal up`,
//! `shoal config durability` and the demo say what the running cluster
//! does (docs/reliability.md has the whole table and its tests).

use crate::cluster::{Settings, SyncMode};

/// Sentences, one per line, on what `settings` promise. With
/// `flush_rate` (durable 4 KiB writes per second the disk was just
/// measured to make), how that rate bounds the metadata changes.
pub fn durability(settings: &Settings, flush_rate: Option<u64>) -> Vec<String> {
    let mut out = Vec::new();
    match settings.sync {
        SyncMode::Full => out.push(
            "Metadata is durable before each reply (sync = \"full\"): every create, \
             rename and unlink waits for its server's metadata log to reach the disk, \
             and survives the crash of any client or server."
                .to_string(),
        ),
        SyncMode::Replay => out.push(format!(
            "Creates, renames and unlinks are answered once their server has applied \
             them, before they are durable (sync = \"replay\", as Lustre): each server \
             makes them durable in groups every {} ms, and the client keeps each one \
             until then and replays it to a server that crashed first.",
            settings.replay_flush_ms
        )),
        SyncMode::None => out.push(format!(
            "Scratch mode (sync = \"none\"): changes are answered once applied and made \
             durable only every {} ms; a server's crash loses what came since.",
            settings.data_flush_ms
        )),
    }
    if settings.delegates_dirs() {
        out.push(format!(
            "In a directory a client made, it answers creates and unlinks itself and \
             sends them within {} ms (dir_delegations): a client that crashes loses \
             those it had not sent; an fsync of the file or directory sends them first.",
            settings.delegated_flush_ms
        ));
    }
    out.push(
        "File data reaches the servers at close and is durable at fsync, as POSIX says."
            .to_string(),
    );
    if let Some(rate) = flush_rate {
        out.push(match settings.sync {
            SyncMode::Full => format!(
                "The disk made {rate} 4 KiB writes durable per second: with every server \
                 on it, durable creates and unlinks cannot go faster than that."
            ),
            _ => format!(
                "The disk made {rate} 4 KiB writes durable per second; creates and \
                 unlinks do not each wait for a flush here, so they can go faster than that."
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(sync: SyncMode, dir_delegations: bool) -> Settings {
        Settings {
            sync,
            dir_delegations,
            ..Settings::default()
        }
    }

    #[test]
    fn the_defaults_answer_before_the_flush_and_say_so() {
        let text = durability(&Settings::default(), Some(13_855)).join("\n");
        assert!(text.contains("sync = \"replay\""), "{text}");
        assert!(text.contains("dir_delegations"), "{text}");
        assert!(text.contains("can go faster than that"), "{text}");
        assert!(!text.contains("durable before each reply"), "{text}");
    }

    #[test]
    fn full_waits_for_the_disk_and_never_delegates() {
        let text = durability(&with(SyncMode::Full, true), Some(1000)).join("\n");
        assert!(text.contains("durable before each reply"), "{text}");
        assert!(text.contains("cannot go faster than that"), "{text}");
        assert!(!text.contains("dir_delegations"), "{text}");
    }

    #[test]
    fn delegations_are_named_only_where_they_are_taken() {
        let replay = durability(&with(SyncMode::Replay, false), None).join("\n");
        assert!(!replay.contains("dir_delegations"), "{replay}");
        let none = durability(&with(SyncMode::None, true), None).join("\n");
        assert!(none.contains("Scratch mode") && none.contains("dir_delegations"));
        assert!(!none.contains("4 KiB"), "no rate, no sentence on it");
    }
}
