//! The interposed C functions, by what they act on. Each asks the state
//! whether its descriptor or path is Shoal's; if not, it calls the next
//! definition (libc's) with the same arguments.

/// Exports one body under each of several C names: glibc gives a call a
/// 64-bit twin (`stat64`, `preadv64`), the system call's own name
/// (`newfstatat`), and binaries built before glibc 2.33 call the `__xstat`
/// family, whose first argument is the struct version (the same on every
/// 64-bit target). On the 64-bit targets the library builds for, `off_t` and
/// `off64_t`, `struct stat` and `struct stat64` are the same.
///
/// Each body runs under [`crate::unwind::guarded`]; `else VALUE` names what
/// it returns if it panics when that is not [`crate::unwind::Failed`]'s
/// answer for its type.
macro_rules! exported {
    ($([$($name:ident),+] $params:tt -> $ret:ty => $body:expr $(, else $failed:expr)?;)+) => {
        $(exported_names!([$($name),+] $params $ret => $body; { $($failed)? });)+
    };
}

/// One line of [`exported`].
macro_rules! exported_names {
    ([$($name:ident),+] $params:tt $ret:ty => $body:expr; $failed:tt) => {
        $(exported_as!($name $params $ret => $body; $failed);)+
    };
}

/// One of [`exported`]'s names.
macro_rules! exported_as {
    ($name:ident $params:tt $ret:ty => $body:expr; {}) => {
        exported_as!($name $params $ret => $body; { <$ret as $crate::unwind::Failed>::failed() });
    };
    ($name:ident ($($arg:ident: $ty:ty),*) $ret:ty => $body:expr; { $failed:expr }) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $crate::unwind::guarded(
                || $failed,
                // SAFETY: the caller keeps the call's contract (valid
                // pointers and lengths, NUL-terminated paths).
                #[allow(unused_unsafe)]
                || unsafe { $body },
            )
        }
    };
}

mod aio;
mod copy;
mod dirs;
mod files;
mod ioctl;
mod locks;
mod meta;
mod not_files;
mod printf;
mod process;
mod stdio;
mod temp;

/// The stdio and directory streams' locks, held across a fork (`fork.rs`).
pub fn hold_for_fork() -> [Box<dyn std::any::Any>; 2] {
    [stdio::hold_for_fork(), dirs::hold_for_fork()]
}
