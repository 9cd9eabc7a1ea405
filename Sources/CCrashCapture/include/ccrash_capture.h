// Async-signal-safe crash capture for the CrashGuard SDK, plus the few libc/dyld calls the
// Swift side needs (image map, dladdr, demangling, durable file writes) kept in C so the
// SDK module imports nothing beyond Foundation on every platform.
#ifndef CCRASH_CAPTURE_H
#define CCRASH_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Most frames written into a crash record.
#define CCRASH_MAX_FRAMES 128

/// Opens `record_path` now (created, truncated) and installs handlers for SIGSEGV, SIGBUS,
/// SIGILL, SIGTRAP, SIGABRT and SIGFPE on an alternate signal stack. Calling it again only
/// swaps the record file. Returns 0 or an errno value.
int ccrash_install(const char *record_path);

/// Restores the handlers that were installed before ``ccrash_install`` and closes the file.
void ccrash_uninstall(void);

/// 1 while the handlers are installed.
int ccrash_is_installed(void);

/// Gives the calling thread an alternate signal stack (if it has none big enough), so a
/// stack overflow on it can still be recorded. Returns 0 or an errno value.
int ccrash_prepare_thread(void);

/// 1 when the Swift runtime exports `swift_getFatalErrorMessageBuffer`.
int ccrash_has_fatal_message_buffer(void);

/// Called once per loaded image: path, lowest mapped address, mapped size, build id bytes.
typedef void (*ccrash_image_visitor)(void *context, const char *path, uintptr_t base, uintptr_t size,
                                     const uint8_t *build_id, size_t build_id_length);

/// Visits every image loaded in this process (not async-signal-safe).
void ccrash_each_image(void *context, ccrash_image_visitor visitor);

/// dladdr: the nearest dynamic symbol at or below `address` and the image that holds it.
/// Returns 1 when an image was found; `symbol` may still be NULL.
int ccrash_dladdr(uintptr_t address, const char **symbol, uintptr_t *symbol_address, const char **image,
                  uintptr_t *image_base);

/// Demangles a Swift symbol with the runtime's `swift_demangle` into `buffer` (cut to fit,
/// NUL-terminated). Returns 0 when the name is not a Swift symbol or there is no demangler.
size_t ccrash_demangle(const char *mangled, char *buffer, size_t size);

/// Writes `length` bytes to `path` crash-safely: a temporary file in the same directory,
/// fsync, atomic rename, fsync of the directory. Returns 0 or an errno value.
int ccrash_write_file_atomically(const char *directory, const char *temporary_path, const char *path,
                                 const void *bytes, size_t length);

/// The hardware model from `uname` (`iPhone14,2` on iOS, `x86_64` on Linux) into `buffer`.
void ccrash_machine(char *buffer, size_t size);

/// The signal's name (`SIGSEGV`), or NULL.
const char *ccrash_signal_name(int signal);

/// The name of a `si_code` for that signal (`SEGV_MAPERR`, `SI_TKILL`), or NULL.
const char *ccrash_code_name(int signal, int code);

/// This platform's number for one of the captured signals, by name without `SIG`
/// (`SEGV`, `BUS`, `ILL`, `TRAP`, `ABRT`, `FPE`); 0 when unknown.
int ccrash_signal_number(const char *name);

/// Looks `offset` (bytes from the image's lowest loaded segment) up in the ELF symbol table
/// of the file at `path` (`.symtab`, else `.dynsym`): the function containing it, so frames
/// of executables that export no symbols still get names. Writes the name into `name` and
/// the offset into the function into `symbol_offset`. Returns 1 when found (Linux only).
int ccrash_elf_symbol(const char *path, uint64_t offset, char *name, size_t size, uint64_t *symbol_offset);

#ifdef __cplusplus
}
#endif

#endif
