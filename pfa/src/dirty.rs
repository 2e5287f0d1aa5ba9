//! Which pages of a mapped buffer were written since the last store, found
//! by page protection as in [Kato 2011]: after a store the stored pages are
//! made read-only; the first write to one raises SIGSEGV, whose handler
//! records the page in the buffer's bitmap and makes it writable again, so
//! each page costs one fault per store interval however often it is written.
//!
//! Why page protection rather than soft-dirty bits or userfaultfd
//! write-protection (numbers from `examples/dirty_detect.rs`, in the crate
//! README): soft-dirty bits are cleared for the whole process at once
//! (`/proc/self/clear_refs`), so two buffers (or a checkpointing tool in the
//! same process) cannot keep their own intervals, and the kernel may lack
//! them; userfaultfd write-protection needs a fault-handling thread or a
//! kernel with asynchronous write-protect and `PAGEMAP_SCAN` (6.7+), and is
//! often forbidden to unprivileged users. Page protection works everywhere,
//! per buffer, and costs a fault per first write to a page.
//!
//! The handler is installed once per process and chains to the handler that
//! was there before for any address outside a tracked buffer, so a real
//! segmentation fault still ends the process as it should.

use std::io;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// Tracked buffers at the most in one process.
const SLOTS: usize = 4096;

struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    bits: AtomicPtr<AtomicU64>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    bits: AtomicPtr::new(std::ptr::null_mut()),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
static TABLE_LOCK: Mutex<()> = Mutex::new(());
static PAGE: AtomicUsize = AtomicUsize::new(0);
static INSTALL: Once = Once::new();
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

pub fn page_size() -> usize {
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    PAGE.store(p, Ordering::Relaxed);
    p
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for slot in TABLE.iter() {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= start + slot.len.load(Ordering::Acquire) {
            continue;
        }
        let bits = slot.bits.load(Ordering::Acquire);
        if bits.is_null() {
            continue;
        }
        let n = (addr - start) / page;
        // SAFETY: the bitmap outlives the slot (cleared before it is freed)
        // and has a bit for every page of the buffer.
        unsafe { (*bits.add(n / 64)).fetch_or(1 << (n % 64), Ordering::AcqRel) };
        let at = (start + n * page) as *mut libc::c_void;
        // SAFETY: the page lies in a mapping this crate owns; mprotect is
        // async-signal-safe.
        if unsafe { libc::mprotect(at, page, libc::PROT_READ | libc::PROT_WRITE) } == 0 {
            return;
        }
        break;
    }
    // Not ours: hand it to whoever was there before.
    // SAFETY: PREVIOUS was written before this handler was installed.
    let prev = unsafe { (*std::ptr::addr_of!(PREVIOUS)).assume_init_ref() };
    if prev.sa_flags & libc::SA_SIGINFO != 0 && prev.sa_sigaction > libc::SIG_IGN {
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            // SAFETY: an SA_SIGINFO handler has this signature.
            unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig, info, ctx);
    } else if prev.sa_sigaction > libc::SIG_IGN {
        // SAFETY: a plain handler takes the signal number.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig);
    } else {
        // Default action: restore it and return; the faulting instruction
        // runs again and the process gets the SIGSEGV it would have got.
        // SAFETY: resetting a disposition is async-signal-safe.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

fn install() -> io::Result<()> {
    let mut err = None;
    INSTALL.call_once(|| {
        page_size();
        // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO
        // signature; PREVIOUS is written before any fault can reach it.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            let prev = (*std::ptr::addr_of_mut!(PREVIOUS)).as_mut_ptr();
            if libc::sigaction(libc::SIGSEGV, &sa, prev) != 0 {
                err = Some(io::Error::last_os_error());
            }
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The dirty-page tracking of one mapped buffer.
pub struct Tracker {
    slot: usize,
    start: usize,
    pages: usize,
    bits: Box<[AtomicU64]>,
}

impl Tracker {
    /// Starts tracking `pages` pages from `start` (page-aligned, owned by the
    /// caller, left mapped until this tracker is dropped) and write-protects
    /// them.
    pub fn new(start: *mut u8, pages: usize) -> io::Result<Tracker> {
        install()?;
        let bits: Box<[AtomicU64]> = (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        let _guard = TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let slot = TABLE
            .iter()
            .position(|s| s.start.load(Ordering::Acquire) == 0)
            .ok_or_else(|| io::Error::other(format!("more than {SLOTS} tracked PFA buffers")))?;
        let s = &TABLE[slot];
        s.bits
            .store(bits.as_ptr() as *mut AtomicU64, Ordering::Release);
        s.len.store(pages * page_size(), Ordering::Release);
        s.start.store(start as usize, Ordering::Release);
        let t = Tracker {
            slot,
            start: start as usize,
            pages,
            bits,
        };
        t.protect(0, pages)?;
        Ok(t)
    }

    /// Write-protects `count` pages from page `first`.
    pub fn protect(&self, first: usize, count: usize) -> io::Result<()> {
        assert!(first + count <= self.pages);
        let p = page_size();
        // SAFETY: the range lies inside the caller's mapping.
        let rc = unsafe {
            libc::mprotect(
                (self.start + first * p) as *mut libc::c_void,
                count * p,
                libc::PROT_READ,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn is_dirty(&self, page: usize) -> bool {
        self.bits[page / 64].load(Ordering::Acquire) & (1 << (page % 64)) != 0
    }

    /// Marks `count` pages from `first` written and writable, for data that
    /// will be put there by a system call (`read(2)` into a protected page
    /// fails with EFAULT instead of faulting).
    pub fn touch(&self, first: usize, count: usize) -> io::Result<()> {
        assert!(first + count <= self.pages);
        let p = page_size();
        for n in first..first + count {
            self.bits[n / 64].fetch_or(1 << (n % 64), Ordering::AcqRel);
        }
        // SAFETY: the range lies inside the caller's mapping.
        let rc = unsafe {
            libc::mprotect(
                (self.start + first * p) as *mut libc::c_void,
                count * p,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Protects `count` pages from `first` again and forgets that they were
    /// written: they have just been stored.
    pub fn clean(&self, first: usize, count: usize) -> io::Result<()> {
        self.protect(first, count)?;
        for n in first..first + count {
            self.bits[n / 64].fetch_and(!(1 << (n % 64)), Ordering::AcqRel);
        }
        Ok(())
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let _guard = TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let s = &TABLE[self.slot];
        s.start.store(0, Ordering::Release);
        s.len.store(0, Ordering::Release);
        s.bits.store(std::ptr::null_mut(), Ordering::Release);
        // Leave the pages writable for whoever unmaps them.
        // SAFETY: the range is the caller's mapping, still mapped.
        unsafe {
            libc::mprotect(
                self.start as *mut libc::c_void,
                self.pages * page_size(),
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
    }
}
