//! The library's own heap: every allocation of the library (and of libshoal
//! and the client inside it) comes from mimalloc, not from the program's
//! malloc.
//!
//! The library runs inside programs whose heaps it does not control, and
//! does its work on their threads. Sharing glibc's malloc with the program,
//! its small allocations paid for the state the heap was left in: after a
//! loop of 8 KiB writes and reads over 8,000 open files, a listing that decodes one
//! name per entry spent 32% of its time in `_int_malloc` (perf, one process),
//! against 2% for the same listing before the loop. With a heap of its own,
//! three A/Bs of 12 alternating rounds of 4-process smallfile (2026-11-25,
//! `bench/results/preload-heap-ab.md`) listed faster every time
//! (readdir+stat 1.21x, 1.05x, 1.09x; readdir+stat-2 1.26x, 1.11x, 1.37x);
//! the write and read phases moved both ways within their noise. A whole
//! `stat FILE` process took the same time (3.46 ms against 3.47).
//! mimalloc's v2 line: v3 made each process start 0.3 ms slower, v2 0.1 ms.
//!
//! Nothing allocated here is handed to the program to free: what the
//! program frees (`getcwd(NULL, 0)`'s buffer) is taken from libc's malloc
//! explicitly. The library exports no `malloc`: the program's own calls are
//! untouched.

#[global_allocator]
static HEAP: mimalloc::MiMalloc = mimalloc::MiMalloc;
