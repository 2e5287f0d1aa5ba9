//! Formatted output to a descriptor: dprintf and vdprintf (and their
//! _FORTIFY_SOURCE `_chk` twins), and backtrace_symbols_fd. glibc's write
//! with its internal calls; on a Shoal descriptor the text is formatted
//! into memory and written with this library's write. The variadic forms
//! are in C (src/c/varargs.c), over the va_list ones here.
//!
//! A `va_list` is passed as a pointer on x86-64 (an array type) and on
//! AArch64 Linux (a structure of more than 16 bytes, passed by reference),
//! so it is taken and handed on as one.

use libc::{c_char, c_int, c_void, size_t, FILE};

use super::files;
use crate::errno::{errno, set_errno};
use crate::real;
use crate::state;

extern "C" {
    fn open_memstream(buf: *mut *mut c_char, len: *mut size_t) -> *mut FILE;
    fn vfprintf(f: *mut FILE, fmt: *const c_char, ap: *mut c_void) -> c_int;
    fn __vfprintf_chk(f: *mut FILE, flag: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int;
    fn backtrace_symbols(buffer: *const *mut c_void, size: c_int) -> *mut *mut c_char;
}

/// Writes all of `bytes` to descriptor `fd` with this library's write.
fn write_all(fd: c_int, mut bytes: &[u8]) -> c_int {
    while !bytes.is_empty() {
        // SAFETY: our bytes.
        let w = unsafe { files::write(fd, bytes.as_ptr() as *const c_void, bytes.len()) };
        if w <= 0 {
            return -1;
        }
        bytes = &bytes[w as usize..];
    }
    0
}

/// Formats with `format` (vfprintf or its checking twin) into memory, then
/// writes the text to Shoal descriptor `fd`; the count written, or -1.
fn print_to(fd: c_int, format: impl FnOnce(*mut FILE) -> c_int) -> c_int {
    let mut buf: *mut c_char = std::ptr::null_mut();
    let mut len: size_t = 0;
    // SAFETY: our two out-parameters.
    let f = unsafe { open_memstream(&mut buf, &mut len) };
    if f.is_null() {
        return -1;
    }
    let n = format(f);
    // SAFETY: the stream just opened; it sets buf and len.
    unsafe { libc::fclose(f) };
    let r = match n {
        // SAFETY: len bytes at buf, malloc'd by the stream.
        n if n >= 0 => match write_all(fd, unsafe {
            std::slice::from_raw_parts(buf as *const u8, len)
        }) {
            0 => n,
            _ => -1,
        },
        _ => -1,
    };
    let e = errno();
    // SAFETY: the stream's buffer.
    unsafe { libc::free(buf as *mut c_void) };
    set_errno(e);
    r
}

exported! {
    [vdprintf] (fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int => match state::is_ours(fd) {
        true => print_to(fd, |f| vfprintf(f, fmt, ap)),
        false => real::vdprintf(fd, fmt, ap),
    };
    [__vdprintf_chk] (fd: c_int, flag: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int => match state::is_ours(fd) {
        true => print_to(fd, |f| __vfprintf_chk(f, flag, fmt, ap)),
        false => real::__vdprintf_chk(fd, flag, fmt, ap),
    };
}

/// backtrace_symbols_fd(3): the symbols of `size` frames, one a line.
unsafe fn backtrace_to(buffer: *const *mut c_void, size: c_int, fd: c_int) {
    if !state::is_ours(fd) {
        // SAFETY: the call's contract.
        return unsafe { real::backtrace_symbols_fd(buffer, size, fd) };
    }
    // SAFETY: the caller's frames; glibc mallocs the strings in one block.
    let names = unsafe { backtrace_symbols(buffer, size) };
    if names.is_null() {
        return;
    }
    for i in 0..size.max(0) as usize {
        // SAFETY: `size` NUL-terminated strings.
        let name = unsafe { std::ffi::CStr::from_ptr(*names.add(i)) }.to_bytes();
        if write_all(fd, &[name, b"\n"].concat()) < 0 {
            break;
        }
    }
    // SAFETY: the block backtrace_symbols returned.
    unsafe { libc::free(names as *mut c_void) };
}

exported! {
    [backtrace_symbols_fd] (buffer: *const *mut c_void, size: c_int, fd: c_int) -> () => backtrace_to(buffer, size, fd);
}

extern "C" {
    fn shoal_preload_dprintf();
    fn shoal_preload_dprintf_chk();
}

/// Exports a variadic C function under `$name`: a naked jump, so the C
/// function gets the caller's registers and stack as they were.
macro_rules! variadic_in_c {
    ($($name:ident => $c:ident;)+) => {
        $(
            #[unsafe(naked)]
            #[no_mangle]
            pub extern "C" fn $name() {
                #[cfg(target_arch = "x86_64")]
                core::arch::naked_asm!("jmp {f}", f = sym $c);
                #[cfg(target_arch = "aarch64")]
                core::arch::naked_asm!("b {f}", f = sym $c);
            }
        )+
    };
}

variadic_in_c! {
    dprintf => shoal_preload_dprintf;
    __dprintf_chk => shoal_preload_dprintf_chk;
}
