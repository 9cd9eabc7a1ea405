// CrashGuardObjC: the seeds' Objective-C runtime guards (swizzled class clusters, a
// forwarding stub for unrecognized selectors, a KVO proxy, notification observers removed
// at dealloc, a weak-target timer proxy, zombies, NSNull forwarding, KVC), for code nobody
// rewrote. Plain C API, so that Swift (the CrashGuard SDK) and C test shims can use it.
//
// Built as an ordinary SwiftPM Objective-C target on Apple platforms. On Linux a plain
// `swift build` compiles the sources to nothing (this header only declares types); the
// test script (scripts/objc-test) builds them against GNUstep with the runtime's flags
// and defines CRASHGUARD_OBJC_GNUSTEP.
#ifndef CRASHGUARD_OBJC_H
#define CRASHGUARD_OBJC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The guard families, one bit each; every guard is opt-in.
enum {
    CRASHGUARD_OBJC_CONTAINER = 1u << 0,     ///< NSArray, NSDictionary, NSSet, NSOrderedSet, NSData clusters; NSCache
    CRASHGUARD_OBJC_STRING = 1u << 1,        ///< NSString, NSMutableString, NSAttributedString clusters
    CRASHGUARD_OBJC_SELECTOR = 1u << 2,      ///< unrecognized selector sent to an app class -> stub answering 0 / nil
    CRASHGUARD_OBJC_KVO = 1u << 3,           ///< KVO proxy with {keyPath: observers} bookkeeping
    CRASHGUARD_OBJC_NOTIFICATION = 1u << 4,  ///< observers removed from the centers at dealloc
    CRASHGUARD_OBJC_TIMER = 1u << 5,         ///< repeating timers target a weak proxy
    CRASHGUARD_OBJC_ZOMBIE = 1u << 6,        ///< freed instances of listed classes become zombies
    CRASHGUARD_OBJC_NULL = 1u << 7,          ///< NSNull forwards to "" / 0 / [] / {}
    CRASHGUARD_OBJC_KVC = 1u << 8,           ///< undefined keys, nil keys, nil for a scalar -> nil / ignored
    CRASHGUARD_OBJC_ALL = 0x1FFu,
};

/// One catch. Every pointer is valid only for the duration of the callback.
typedef struct crashguard_objc_report {
    /// The contract's kind: "container", "string", "unrecognizedSelector", "kvo",
    /// "notification", "timer", "wildPointer", "null", "kvc".
    const char *kind;
    /// The runtime's own message for the error the guard prevented (UTF-8).
    const char *reason;
    /// Frames at the catch, innermost first.
    const char *const *stack;
    size_t stack_count;
    /// Where the app made the call (the rate-limit site): its first frame outside the
    /// guards, Foundation and the Objective-C runtime, as "image`symbol+0x1f" or
    /// "image+0x4a2f"; the guarded method when the stack has no such frame.
    const char *site;
    /// What the guard did instead, e.g. "returned nil".
    const char *action;
    /// The guarded operation, e.g. "-[GSInlineArray objectAtIndex:]".
    const char *function;
    /// The return address of the site's frame (0: none found).
    uintptr_t site_address;
    /// Return addresses at the catch, innermost first (the stack's raw form, for
    /// symbolication against the image list).
    const uintptr_t *addresses;
    size_t address_count;
} crashguard_objc_report;

typedef void (*crashguard_objc_report_fn)(const crashguard_objc_report *report);

/// Installs the guards in `categories` (swizzling happens once per family, at its first
/// install; later calls only switch families on) and sets the callback (NULL: record
/// nothing, the guards still do the safe thing). Returns the families now installed.
/// Thread-safe; call it early, before other threads message the guarded classes.
uint32_t crashguard_objc_install(uint32_t categories, crashguard_objc_report_fn callback);

/// Switches installed families on or off without unswizzling: a family that is off calls
/// the original implementation (and so raises where the runtime raises).
void crashguard_objc_set_enabled(uint32_t categories);
uint32_t crashguard_objc_enabled(void);

/// Debug mode: after recording, raise the exception the runtime would have raised
/// (NSRangeException / NSInvalidArgumentException with the same reason), so a developer
/// sees the bug at once. Off by default.
void crashguard_objc_set_raise_after_recording(int raise);

/// The unrecognized-selector guard takes over only for the app's classes: a class whose
/// name starts with one of `class_prefixes`, or that was loaded from one of `images`
/// (paths or file names, as the loader names them; none: the main executable), or a
/// subclass of one. The system's classes keep raising. Without a call: the main
/// executable's classes. Each call replaces the scope.
void crashguard_objc_selector_scope(const char *const *class_prefixes, size_t prefix_count, const char *const *images,
                                    size_t image_count);
/// 1 when the unrecognized-selector guard would take over for the class `class_name`.
int crashguard_objc_selector_guards_class(const char *class_name);

/// The zombie guard protects only the classes listed here and their subclasses (the
/// seed's white list: system
/// classes are not worth the memory). `quarantine_bytes` bounds the memory held by zombies
/// (0: the default, 2 MiB like Baymax); the oldest are freed first.
void crashguard_objc_zombie_protect_class(const char *class_name);
void crashguard_objc_zombie_set_quarantine_bytes(size_t bytes);
/// Frees every quarantined zombie now (tests, memory warnings).
void crashguard_objc_zombie_drain(void);

#ifdef __cplusplus
}
#endif

// The uncaught-exception handler (CGExceptionHandler.m).
#include "CrashGuardObjCExceptions.h"

#endif
