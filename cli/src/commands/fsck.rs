//! `shoal fsck [--repair]`: reports (and reclaims) what crashes left behind.

use std::time::Duration;

use shoal_proto::error::{Result, ShoalError};

use crate::target::{connect, locate, runtime, ConfigArg};

pub fn run(
    cfg: &ConfigArg,
    path: Option<&str>,
    repair: bool,
    grace_secs: u64,
    json: bool,
) -> Result<()> {
    let (config, _) = locate(cfg, path.unwrap_or("/"))?;
    runtime()?.block_on(async {
        let client = connect(&config).await?;
        let r = client.fsck(repair, Duration::from_secs(grace_secs)).await?;
        if json {
            let v = serde_json::json!({
                "objects": r.objects,
                "entries": r.entries,
                "no_metafile_files": r.no_metafile_files,
                "orphans": r.orphans.iter().map(|(h, k)| serde_json::json!({
                    "handle": format!("{h:#x}"), "kind": format!("{k:?}").to_lowercase(),
                })).collect::<Vec<_>>(),
                "dangling_entries": r.dangling.iter().map(|(d, n, h)| serde_json::json!({
                    "dir": format!("{d:#x}"), "name": n, "handle": format!("{h:#x}"),
                })).collect::<Vec<_>>(),
                "leftover_entries": r.leftover_entries.iter().map(|(d, n, h)| serde_json::json!({
                    "dir": format!("{d:#x}"), "name": n, "handle": format!("{h:#x}"),
                })).collect::<Vec<_>>(),
                "stale_parents": r.stale_parents.iter().map(|(h, d)| serde_json::json!({
                    "handle": format!("{h:#x}"), "named_from": format!("{d:#x}"),
                })).collect::<Vec<_>>(),
                "wrong_link_counts": r.wrong_counts.iter().map(|(h, found, recorded)| serde_json::json!({
                    "handle": format!("{h:#x}"), "found": found, "recorded": recorded,
                })).collect::<Vec<_>>(),
                "stale_removal_marks": r.stale_marks.iter().map(|h| format!("{h:#x}")).collect::<Vec<_>>(),
                "orphan_files": r.orphan_files.iter().map(|(s, h)| serde_json::json!({
                    "server": s, "handle": format!("{h:#x}"),
                })).collect::<Vec<_>>(),
                "problems": r.problems(),
                "repaired": r.repaired,
            });
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        } else {
            println!(
                "checked {} objects and {} directory entries ({} files without a metafile)",
                r.objects, r.entries, r.no_metafile_files
            );
            for (h, k) in &r.orphans {
                println!("orphan {k:?} {h:#x}");
            }
            for (d, n, h) in &r.dangling {
                println!("dangling entry {n:?} in {d:#x} names missing {h:#x}");
            }
            for (d, n, h) in &r.leftover_entries {
                println!("entry {n:?} in {d:#x} is left over from a move of {h:#x}");
            }
            for (h, d) in &r.stale_parents {
                println!("{h:#x} is named from {d:#x} only, not from the directory it records");
            }
            for (h, found, recorded) in &r.wrong_counts {
                println!("{h:#x} has {found} names but records {recorded}");
            }
            for h in &r.stale_marks {
                println!("directory {h:#x} still marked for removal");
            }
            for (s, h) in &r.orphan_files {
                println!("orphan local file of {h:#x} on server {s}");
            }
            let verb = if r.repaired { "reclaimed" } else { "found" };
            println!("{} problems {verb}", r.problems());
        }
        if r.problems() > 0 && !r.repaired {
            return Err(ShoalError::invalid(format!(
                "{} problems found; run shoal fsck --repair to reclaim them",
                r.problems()
            )));
        }
        Ok(())
    })
}
