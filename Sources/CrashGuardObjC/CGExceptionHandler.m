// The uncaught NSException handler (see CrashGuardObjCExceptions.h). It runs on the thread
// that threw, before the process aborts: the exception's name and reason are copied into
// fixed buffers and its return addresses into a fixed array (the frames of the throw, which
// `callStackReturnAddresses` keeps; `backtrace()` of this thread when the runtime kept none:
// the stack is still the throw site's, nothing is unwound before an uncaught handler runs),
// handed to the sink, then to the handler installed before, and the process aborts.
#include "CGCompat.h"
#include "CrashGuardObjCExceptions.h"

#if CRASHGUARD_OBJC_ENABLED

#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CG_EXCEPTION_FRAMES 128

static crashguard_objc_exception_sink g_sink = NULL;  // atomic (__atomic builtins: GCC's stdatomic.h is not clang's)
static NSUncaughtExceptionHandler *g_previous = NULL;
static int g_installed = 0;  // atomic
static char g_name[256];
static char g_reason[4096];
static uintptr_t g_frames[CG_EXCEPTION_FRAMES];

static void CGExceptionCopy(char *out, size_t size, NSString *text) {
    const char *bytes = text == nil ? NULL : [text UTF8String];
    size_t n = bytes == NULL ? 0 : strlen(bytes);
    if (n >= size) n = size - 1;
    if (n > 0) memcpy(out, bytes, n);
    out[n] = 0;
}

static void CGExceptionUncaught(NSException *exception) {
    crashguard_objc_exception_sink sink = __atomic_load_n(&g_sink, __ATOMIC_ACQUIRE);
    // An exception raised in here reaches this handler again: it goes straight on.
    static __thread int entered = 0;
    if (entered == 3) abort();  // the previous handler raised
    if (!entered) {
        entered = 1;
        CGExceptionCopy(g_name, sizeof(g_name), [exception name]);
        CGExceptionCopy(g_reason, sizeof(g_reason), [exception reason]);
    }
    if (sink != NULL && entered == 1) {
        entered = 2;
        size_t count = 0;
        NSArray *addresses = [exception callStackReturnAddresses];
        for (id address in addresses) {
            if (count == CG_EXCEPTION_FRAMES) break;
            // NSNumber on Apple platforms; GNUstep keeps NSValue pointers.
            if ([address isKindOfClass:[NSNumber class]])
                g_frames[count++] = (uintptr_t)[(NSNumber *)address unsignedLongLongValue];
            else if ([address isKindOfClass:[NSValue class]])
                g_frames[count++] = (uintptr_t)[(NSValue *)address pointerValue];
        }
        if (count == 0) {
            void *raw[CG_EXCEPTION_FRAMES + 1];
            int n = backtrace(raw, CG_EXCEPTION_FRAMES + 1);
            for (int i = 1; i < n; i++) g_frames[count++] = (uintptr_t)raw[i];  // raw[0]: this function
        }
        sink("objc", g_name, g_reason, g_frames, count);
    }
    if (g_previous != NULL && g_previous != CGExceptionUncaught) {
        entered = 3;
        g_previous(exception);
    } else {
        fprintf(stderr, "*** Terminating app due to uncaught exception '%s', reason: '%s'\n", g_name, g_reason);
    }
    // The process ends by SIGABRT, which the crash handler records (with the exception
    // noted above), as Apple's runtime does after this handler; GNUstep would otherwise
    // exit(1), leaving no signal to record.
    abort();
}

int crashguard_objc_install_exception_handler(crashguard_objc_exception_sink sink) {
    __atomic_store_n(&g_sink, sink, __ATOMIC_RELEASE);
    int expected = 0;
    if (__atomic_compare_exchange_n(&g_installed, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        NSUncaughtExceptionHandler *current = NSGetUncaughtExceptionHandler();
        if (current != CGExceptionUncaught) g_previous = current;
        NSSetUncaughtExceptionHandler(CGExceptionUncaught);
    }
    return 1;
}

#else

int crashguard_objc_install_exception_handler(crashguard_objc_exception_sink sink) {
    (void)sink;
    return 0;
}

#endif
