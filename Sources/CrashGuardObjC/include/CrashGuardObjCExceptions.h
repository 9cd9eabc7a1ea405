// The uncaught Objective-C exception handler: an uncaught NSException is handed to a sink
// (the SDK passes `ccrash_note_exception`, which copies it into the crash record's
// preallocated memory) with its name, reason and `callStackReturnAddresses`, then to the
// handler that was installed before (whose abort raises the signal the crash handler
// records). Plain C, like CrashGuardObjC.h.
#ifndef CRASHGUARD_OBJC_EXCEPTIONS_H
#define CRASHGUARD_OBJC_EXCEPTIONS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Receives an uncaught exception: `kind` is "objc", `name` and `reason` UTF-8 (valid for
/// the call only), `frames` the throw site's return addresses, innermost first.
typedef void (*crashguard_objc_exception_sink)(const char *kind, const char *name, const char *reason,
                                               const uintptr_t *frames, size_t count);

/// Installs the uncaught-exception handler (`NSSetUncaughtExceptionHandler`), keeping the
/// one installed before to call after `sink` (with none, it logs the exception as Apple's
/// runtime does); then it aborts, so the crash handler records the exception with the
/// SIGABRT (GNUstep alone would `exit(1)`). Calling it again only replaces the sink.
/// Returns 1 when the handler is installed (0 where the Objective-C target is compiled to
/// nothing).
int crashguard_objc_install_exception_handler(crashguard_objc_exception_sink sink);

#ifdef __cplusplus
}
#endif

#endif
