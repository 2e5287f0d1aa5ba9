//! `crash_worker MNT ID SECS SEED [shared]`: one worker of the crash suite
//! (`shoal_tests::crash_work`) working through the mount at MNT for SECS
//! seconds, in a process of its own as a program would; prints its model
//! as one line of JSON on stdout. A hang (one operation past
//! `crash_work::OP_TIMEOUT`) is said on stderr, with exit status 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use shoal_tests::crash_work::{worker, Dirs, Layout};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (layout, args) = match args.split_last() {
        Some((last, rest)) if last == "shared" => (Layout::Shared, rest),
        _ => (Layout::Own, &args[..]),
    };
    let [mnt, id, secs, seed] = args else {
        eprintln!("usage: crash_worker MNT ID SECS SEED [shared]");
        return ExitCode::from(2);
    };
    let number = |what: &str, text: &str| -> u64 {
        text.parse()
            .unwrap_or_else(|_| panic!("crash_worker: {what} {text:?} is not a number"))
    };
    let (id, secs, seed) = (number("ID", id), number("SECS", secs), number("SEED", seed));
    let until = Instant::now() + Duration::from_secs(secs);
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    match runtime.block_on(worker(
        Dirs::mount(&PathBuf::from(mnt), id, layout),
        id,
        until,
        seed,
    )) {
        Ok(model) => {
            println!(
                "{}",
                serde_json::to_string(&model).expect("a model is JSON")
            );
            ExitCode::SUCCESS
        }
        Err(hang) => {
            eprintln!("crash_worker {id}: {hang}");
            ExitCode::FAILURE
        }
    }
}
