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
/// SIGILL, SIGTRAP, SIGABRT and SIGFPE on an alternate signal stack, plus the reserved
/// signal (``ccrash_dump_signal``) other threads answer with their registers. `report_id`
/// (a UUID string) is written into the record, so the report made from it has that id
/// however often it is sent. Calling it again only swaps the record file and id. Returns 0
/// or an errno value.
int ccrash_install(const char *record_path, const char *report_id);

/// The real-time signal the handler sends to every other thread to capture its stack
/// (`SIGRTMIN + 7` on Linux), or 0 where threads are not captured.
int ccrash_dump_signal(void);

/// Publishes the scope (user, tags, context, breadcrumbs) the handler writes into a crash
/// record, as `key\tvalue\n` lines (at most 80 KiB are kept). Copied into preallocated memory.
void ccrash_set_scope(const char *bytes, size_t length);

/// Re-reads the executable ranges of the loaded images (call after loading a library).
void ccrash_refresh_images(void);

/// A number that changes whenever an image is loaded or unloaded (glibc's `dlpi_adds` +
/// `dlpi_subs`; on Apple platforms a count kept by dyld callbacks): a cached image list is
/// current while this is unchanged. Cheap: one `dl_iterate_phdr` step.
uint64_t ccrash_image_generation(void);

/// Return addresses of the calling thread's stack, innermost first, into `frames` (at most
/// `max`): `backtrace()` into the caller's fixed buffer. Not async-signal-safe. Returns the count.
int ccrash_backtrace(uintptr_t *frames, int max);

/// Notes an uncaught exception for the crash record the handler is about to write (the
/// process is about to abort): `kind` is `objc` or `cxx`, `name` the exception's name or
/// C++ type, `reason` its reason or `what()`, `frames` the throw site's return addresses.
/// Copied into preallocated memory; the record written at the signal that follows carries
/// it, and the next start makes an `exception` report of it. The last one noted wins (on
/// Apple platforms the C++ hook sees an Objective-C exception first, then hands it to
/// `_objc_terminate`, whose uncaught-exception handler notes it with its name and reason).
void ccrash_note_exception(const char *kind, const char *name, const char *reason, const uintptr_t *frames,
                           size_t count);

/// Forgets a noted exception (a handler that let the process live on).
void ccrash_clear_exception(void);

/// Installs the C++ terminate hook (`std::set_terminate`): an uncaught C++ exception is
/// noted with its type, `what()` and the throw site's stack, then the previous terminate
/// handler runs (the default one aborts). Idempotent.
void ccrash_install_terminate_handler(void);

/// Demangles an Itanium C++ symbol (`_ZN…`) into `buffer` (cut to fit, NUL-terminated).
/// Returns 0 when `mangled` is not one.
size_t ccrash_demangle_cxx(const char *mangled, char *buffer, size_t size);

/// Whether a `si_code` says the signal was sent (kill, raise, abort, sigqueue) rather than
/// raised by a fault: `si_code <= 0` on Linux; Darwin's `SI_USER` and `SI_QUEUE` are positive.
int ccrash_code_is_sent(int code);

/// The record's descriptor (tests: it names the record file across restarts), or -1.
int ccrash_record_fd(void);

/// Tests only: the handler reads the Swift runtime's fatal message through `slot` (a
/// pointer to a `const char *`) instead of the runtime's buffer.
void ccrash_test_fatal_message_slot(const void *slot);

/// Tests only: `hook` runs in the handler between its first copy of the scope and the check
/// that the copy is whole (a test changes the scope there, as another thread could).
void ccrash_test_scope_hook(void (*hook)(void));

/// Tests only: throws `std::runtime_error(what)` from C++, uncaught by any C++ handler.
void crashguard_test_throw_runtime_error(const char *what);

/// Tests only: 1 makes the handler fault while it walks the crashing thread's stack.
void ccrash_test_fault_in_handler(int enabled);

/// Restores the handlers that were installed before ``ccrash_install`` and closes the file.
void ccrash_uninstall(void);

/// 1 while the handlers are installed.
int ccrash_is_installed(void);

/// Gives the calling thread an alternate signal stack (if it has none big enough), so a
/// stack overflow on it can still be recorded, and records its stack bounds for the
/// handler's frame walk. Returns 0 or an errno value.
int ccrash_prepare_thread(void);

/// Names the calling thread for the OS (cut to 15 bytes on Linux): the name crash records
/// show for it. Returns 0 or an errno value.
int ccrash_set_thread_name(const char *name);

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
/// fsync, atomic rename, fsync of the directory (skipped when `directory` is NULL: the
/// caller fsyncs it once for a group of files). Returns 0 or an errno value.
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

/// The GNU build id of the ELF file at `path` into `buffer`; returns its length (0 when it
/// has none or the file is not ELF; Linux only).
size_t ccrash_elf_build_id(const char *path, uint8_t *buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif
