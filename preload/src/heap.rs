//! The library's own heap: every allocation of the library (and of libshoal
//! and the client inside it) comes from mimalloc, not from the program's
//! malloc.
//!
//! The library runs inside programs whose heaps it does not control, and
//! does its work on their threads. Sharing glibc's malloc with the program,
//! its small allocations paid for the state the heap was left in: after a
//! loop of 8 KiB writes and reads over 8,000 open files, a listing that
//! decodes one name per entry spent 32% of its time in `_int_malloc` (perf,
//! one process), against 2% for the same listing before the loop. With a
//! heap of its own, 12 alternating rounds of 4-process smallfile per form
//! (2026-11-25, `bench/results/changes.md`) listed 1.04x-1.20x
//! faster, and every phase but the open+close form's read and unlink
//! (0.98x, 0.96x) was faster.
//!
//! Built from mimalloc's v2 line (v3 made each process start 0.3 ms later;
//! v2 costs 0.1 ms), and without transparent huge pages (`no_thp`): with
//! them, memory mimalloc had purged came back a zeroed 2 MiB page per fault,
//! and a listing after writes ran at a third of its speed. `no_thp` only
//! stops mimalloc asking for huge pages; the process's own setting is left
//! alone.
//!
//! Nothing allocated here is handed to the program to free: what the
//! program frees (`getcwd(NULL, 0)`'s buffer) is taken from libc's malloc
//! explicitly. The library exports no `malloc`: the program's own calls are
//! untouched.

#[global_allocator]
static HEAP: mimalloc::MiMalloc = mimalloc::MiMalloc;
