//! The interposed C functions, by what they act on. Each asks the state
//! whether its descriptor or path is Shoal's; if not, it calls the next
//! definition (libc's) with the same arguments.

/// Exports one body under each of several C names: glibc gives a call a
/// 64-bit twin (`stat64`, `preadv64`), the system call's own name
/// (`newfstatat`), and binaries built before glibc 2.33 call the `__xstat`
/// family, whose first argument is the struct version (the same on every
/// 64-bit target). On the 64-bit targets the library builds for, `off_t` and
/// `off64_t`, `struct stat` and `struct stat64` are the same.
macro_rules! exported {
    ($([$($name:ident),+] $params:tt -> $ret:ty => $body:expr;)+) => {
        $($(exported_as!($name $params $ret => $body);)+)+
    };
}

/// One of [`exported`]'s names.
macro_rules! exported_as {
    ($name:ident ($($arg:ident: $ty:ty),*) $ret:ty => $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the caller keeps the call's contract (valid pointers
            // and lengths, NUL-terminated paths).
            #[allow(unused_unsafe)]
            unsafe {
                $body
            }
        }
    };
}

mod dirs;
mod files;
mod meta;
mod process;
mod stdio;
mod temp;

/// The stdio and directory streams' locks, held across a fork (`fork.rs`).
pub fn hold_for_fork() -> [Box<dyn std::any::Any>; 2] {
    [stdio::hold_for_fork(), dirs::hold_for_fork()]
}
