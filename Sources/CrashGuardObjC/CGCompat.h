// The subset both Objective-C runtimes share, and the few places they differ.
//
// Apple's runtime (__APPLE__) and GCC's runtime under GNUstep Base (__GNU_LIBOBJC__, the
// build made by scripts/objc-test) differ in ways the guards meet:
// - no ARC and no objc_setAssociatedObject on GCC's runtime: the guards use manual
//   retain/release and side tables (CGSideTable) keyed by object address;
// - the concrete class names of the clusters (__NSArrayI vs GSInlineArray ...): the guards
//   find them at run time (objc_getClassList), never by name;
// - forwarding order: GNUstep asks -methodSignatureForSelector: before
//   -forwardingTargetForSelector:, Apple the other way round;
// - method_setImplementation does not reach subclasses that copied the method on GCC's
//   runtime until their dispatch tables are rebuilt: CGRebuildDispatch adds a method.
#ifndef CRASHGUARD_OBJC_COMPAT_H
#define CRASHGUARD_OBJC_COMPAT_H

#if defined(__OBJC__) && (defined(__APPLE__) || defined(CRASHGUARD_OBJC_GNUSTEP))
#define CRASHGUARD_OBJC_ENABLED 1
#else
#define CRASHGUARD_OBJC_ENABLED 0
#endif

#if CRASHGUARD_OBJC_ENABLED

#import <Foundation/Foundation.h>
#include <objc/runtime.h>
#include <pthread.h>
#include "CrashGuardObjC.h"

#if defined(__GNU_LIBOBJC__) || defined(GNU_RUNTIME)
#define CG_GNU_RUNTIME 1
#else
#define CG_GNU_RUNTIME 0
#endif

// Memory management: GCC's runtime has no ARC (manual retain/release); SwiftPM compiles
// Objective-C targets with ARC on Apple platforms (and offers no per-target switch without
// unsafeFlags). The sources are written for both: ownership goes through these macros, and
// every object that may be deallocating (the -dealloc hooks, zombies) or is held without
// ownership is __unsafe_unretained (CG_UNSAFE), so that ARC never retains it.
#if __has_feature(objc_arc)
#define CG_ARC 1
#define CG_RETAIN(x) (x)
#define CG_RELEASE(x) ((void)0)
#define CG_AUTORELEASE(x) (x)
/// A retained object as a plain pointer (the side tables' values), and back.
#define CG_BRIDGE_RETAINED(x) ((__bridge_retained void *)(x))
#define CG_BRIDGE_TRANSFER(p) ((__bridge_transfer id)(p))
#define CG_BRIDGE(p) ((__bridge id)(p))
#else
#define CG_ARC 0
#define CG_RETAIN(x) [(x) retain]
#define CG_RELEASE(x) [(x) release]
#define CG_AUTORELEASE(x) [(x) autorelease]
#define CG_BRIDGE_RETAINED(x) ((void *)[(x) retain])
#define CG_BRIDGE_TRANSFER(p) [(id)(p) autorelease]
#define CG_BRIDGE(p) ((id)(p))
#endif
#define CG_UNSAFE __unsafe_unretained
/// Selectors ARC forbids in @selector().
#define CG_SEL_DEALLOC sel_registerName("dealloc")
#define CG_SEL_RETAIN sel_registerName("retain")
#define CG_SEL_RELEASE sel_registerName("release")
#define CG_SEL_AUTORELEASE sel_registerName("autorelease")

// ---- The guards' own code ----

// Every function and method of the guards goes into one text section, so that a report
// finds the app's frame by skipping the frames inside it (CGReport): each guard file
// opens CG_GUARD_CODE_BEGIN after its includes and closes CG_GUARD_CODE_END at its end.
#if defined(__APPLE__)
#define CG_GUARD_CODE_BEGIN \
    _Pragma("clang attribute push (__attribute__((section(\"__TEXT,__cg_guards,regular,pure_instructions\"))), apply_to = any(function, objc_method))")
#else
#define CG_GUARD_CODE_BEGIN \
    _Pragma("clang attribute push (__attribute__((section(\"crashguard_objc_text\"))), apply_to = any(function, objc_method))")
#endif
#define CG_GUARD_CODE_END _Pragma("clang attribute pop")

// ---- Reporting (CGCore.m) ----

/// Whether `family` is installed and switched on.
BOOL CGEnabled(uint32_t family);
/// Records a catch: builds the stack, finds the app's frame (the report's site), calls the
/// callback; in debug mode then raises `exceptionName` (nil: no raise) with `reason`.
/// `function` is the guarded method, e.g. "-[GSInlineArray objectAtIndex:]".
void CGReport(uint32_t family, const char *kind, NSString *function, NSString *action, NSString *reason,
              NSString *exceptionName);
/// The first frame of `addresses` (innermost first) outside the guards' code, Foundation
/// and the Objective-C runtime: the app's call site. 0 when there is none.
uintptr_t CGAppFrame(const uintptr_t *addresses, size_t count);
/// Whether `address` lies in the guards' own code (CG_GUARD_CODE_BEGIN ... END).
BOOL CGIsGuardCode(uintptr_t address);
/// "0x1234": the object's address as the runtimes print it (never messages it).
NSString *CGAddress(CG_UNSAFE id object);
/// The class name the runtime would print for `object` (its real class, not -class).
NSString *CGClassName(CG_UNSAFE id object);

// ---- Swizzling (CGCore.m) ----

/// Every registered class that is `base` or inherits from it and defines `sel` itself.
/// The caller frees the array. Meta classes: pass `meta` YES for class methods.
CG_UNSAFE Class *CGClassesDefining(Class base, SEL sel, BOOL meta, unsigned *count);
/// Replaces `cls`'s own implementation of `sel` with `imp` and returns the original (NULL
/// when `cls` does not define `sel` itself: nothing is changed, never the superclass's).
IMP CGSwizzleOwn(Class cls, SEL sel, IMP imp);
/// Original implementation stored for the nearest class of `object` (walking up from its
/// real class) that was swizzled for `sel`.
IMP CGOriginal(CG_UNSAFE id object, SEL sel);
/// Swizzles `sel` in every class from `base` down that defines it, remembering originals.
/// Returns how many classes were changed.
unsigned CGSwizzleCluster(Class base, SEL sel, IMP imp, BOOL meta);
/// One guarded instance method of a class cluster: `sel` of `base` and of every class below
/// it that defines it, replaced by `imp` (which calls CGOriginal).
typedef struct {
    CG_UNSAFE Class base;
    SEL sel;
    IMP imp;
} CGClusterMethod;
/// CGSwizzleCluster for each of the `count` entries of a family's table.
void CGSwizzleClusterMethods(const CGClusterMethod *methods, size_t count);
/// Whether `range` lies within `length` units (overflow-safe).
static inline BOOL CGRangeFits(NSRange range, NSUInteger length) {
    return range.location <= length && range.length <= length - range.location;
}

/// The part of `range` within `length` units.
static inline NSRange CGClampRange(NSRange range, NSUInteger length) {
    NSUInteger location = MIN(range.location, length);
    return NSMakeRange(location, MIN(range.length, length - location));
}

// -init... consumes its receiver and returns a retained object: said explicitly, so that
// ARC (Apple platforms) balances the calls through the guards' C functions like the methods.
#define CG_CONSUMED __attribute__((ns_consumed))
#define CG_RETURNS_RETAINED __attribute__((ns_returns_retained))

/// Makes a change to `cls`'s methods visible to it and its subclasses.
void CGRebuildDispatch(Class cls);

// ---- Side tables (instead of associated objects) ----

/// A map from object address to a retained Objective-C value, under a mutex (a small
/// open-addressing table in C: no Foundation map API differs between the platforms).
typedef struct CGSideTable CGSideTable;
CGSideTable *CGSideTableCreate(void);
/// The value for `key` (retained + autoreleased), nil if none.
id CGSideTableGet(CGSideTable *table, CG_UNSAFE id key);
/// Stores `value` (retained) for `key`; nil removes.
void CGSideTableSet(CGSideTable *table, CG_UNSAFE id key, id value);
/// Removes and returns (retained + autoreleased) the value for `key`.
id CGSideTableTake(CGSideTable *table, CG_UNSAFE id key);
/// Every value (autoreleased array).
NSArray *CGSideTableValues(CGSideTable *table);

/// The shared stub object: it gains a method for `sel` answering 0 / nil (CGSelectorGuard.m).
id CGStubFor(SEL sel);
/// A type encoding for `sel`: the runtime's own when known, else all objects.
const char *CGTypesFor(SEL sel, char *buffer, size_t size);
/// Frees `object` for real: NSObject's original -dealloc (CGCore.m).
void CGRealDealloc(CG_UNSAFE id object);

// ---- Families' install functions ----
void CGInstallContainerGuards(void);
void CGInstallStringGuards(void);
void CGInstallSelectorGuard(void);
void CGInstallKVOGuard(void);
void CGInstallNotificationGuard(void);
void CGInstallTimerGuard(void);
void CGInstallZombieGuard(void);
void CGInstallNullGuard(void);
void CGInstallKVCGuard(void);

/// Hooks run from the swizzled -dealloc of NSObject (CGCore.m), in this order.
void CGKVODeallocHook(CG_UNSAFE id object);
void CGNotificationDeallocHook(CG_UNSAFE id object);
/// YES when the zombie guard kept `object` (then the original dealloc must not run).
BOOL CGZombieDeallocHook(CG_UNSAFE id object);
/// Installs the shared NSObject -dealloc hook once.
void CGInstallDeallocHook(void);
/// Clears the timer proxies whose target is `object` (CGTimerGuard.m).
void CGTimerDeallocHook(CG_UNSAFE id object);

#endif  // CRASHGUARD_OBJC_ENABLED
#endif
