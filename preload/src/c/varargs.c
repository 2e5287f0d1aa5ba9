/* The variadic entry points, which stable Rust cannot define: each takes
 * its arguments into a va_list and calls the library's va_list twin
 * (posix/printf.rs), found through the dynamic linker like any caller's.
 * Their exported names are Rust's (posix/printf.rs jumps here): rustc
 * exports a cdylib's Rust items only. */
#include <stdarg.h>

int vdprintf(int fd, const char *fmt, va_list ap);
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);

__attribute__((visibility("hidden"))) int shoal_preload_dprintf(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vdprintf(fd, fmt, ap);
    va_end(ap);
    return r;
}

__attribute__((visibility("hidden"))) int shoal_preload_dprintf_chk(int fd, int flag,
                                                                    const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = __vdprintf_chk(fd, flag, fmt, ap);
    va_end(ap);
    return r;
}
