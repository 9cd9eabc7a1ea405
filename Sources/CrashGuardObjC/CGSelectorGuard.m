// Unrecognized selectors: a message no class in the receiver's chain answers is forwarded
// to a stub object whose class gains a method for that selector (class_addMethod) answering
// 0 / nil, and the catch is recorded with the runtime's own text:
//   -[Foo bar]: unrecognized selector sent to instance 0x...
// Classes that forward on their own (they override -forwardInvocation: or
// -forwardingTargetForSelector:) are left alone, and so are the system's classes: only a
// class of the app is guarded, one whose name has one of the app's prefixes or that lives
// in one of the app's images (by default the main executable), or a subclass of one.
// A system class answering an unknown selector is a bug in the caller that the system
// itself may rely on seeing (respondsToSelector: checks, proxies), as AvoidCrash and the
// seeds decided.
//
// Forwarding order differs (CGCompat.h): Apple asks -forwardingTargetForSelector: first,
// GNUstep asks -methodSignatureForSelector: first and raises when it gets nil; there the
// guard also answers a signature for a selector it will take over.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  // dladdr on glibc
#endif
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#if defined(__APPLE__)
#include <mach-o/dyld.h>
#else
#include <sys/auxv.h>
#endif

CG_GUARD_CODE_BEGIN

static Class stubClass;
static id stubInstance;
static pthread_mutex_t stubLock = PTHREAD_MUTEX_INITIALIZER;
static IMP originalInstanceTarget, originalClassTarget;
static IMP nsObjectForwardInvocation, nsObjectClassForwardInvocation;
#if CG_GNU_RUNTIME
static IMP originalInstanceSignature, originalClassSignature;
#endif

static id cgStubAnswerZero(id self, SEL _cmd, ...) {
    (void)self;
    (void)_cmd;
    return nil;
}

static double cgStubAnswerZeroDouble(id self, SEL _cmd, ...) {
    (void)self;
    (void)_cmd;
    return 0;
}

/// A type encoding for `sel`: the runtime's own when it knows one (GCC's typed selectors),
/// else every argument and the result an object.
const char *CGTypesFor(SEL sel, char *buffer, size_t size) {
#if CG_GNU_RUNTIME
    const char *known = sel_getTypeEncoding(sel);
    if (known != NULL) return known;
#endif
    const char *name = sel_getName(sel);
    size_t n = 0;
    buffer[n++] = '@';
    buffer[n++] = '@';
    buffer[n++] = ':';
    for (const char *p = name; *p && n + 2 < size; p++) {
        if (*p == ':') buffer[n++] = '@';
    }
    buffer[n] = 0;
    return buffer;
}

static BOOL returnsFloating(const char *types) {
    while (*types == 'r' || *types == 'n' || *types == 'N' || *types == 'o' || *types == 'O' || *types == 'R' || *types == 'V') types++;
    return *types == 'f' || *types == 'd';
}

static pthread_once_t stubOnce = PTHREAD_ONCE_INIT;

static void makeStub(void) {
    stubClass = objc_allocateClassPair([NSObject class], "CrashGuardSelectorStub", 0);
    objc_registerClassPair(stubClass);
    stubInstance = [stubClass new];
}

id CGStubFor(SEL sel) {
    pthread_once(&stubOnce, makeStub);
    pthread_mutex_lock(&stubLock);
    if (!class_respondsToSelector(stubClass, sel)) {
        char buffer[128];
        const char *types = CGTypesFor(sel, buffer, sizeof buffer);
        class_addMethod(stubClass, sel, returnsFloating(types) ? (IMP)cgStubAnswerZeroDouble : (IMP)cgStubAnswerZero, types);
    }
    pthread_mutex_unlock(&stubLock);
    return stubInstance;
}

/// Whether the receiver's class does its own forwarding (then the guard stays out).
static BOOL forwardsItself(id receiver, BOOL meta) {
    Class cls = object_getClass(receiver);
    IMP invocation = class_getMethodImplementation(cls, @selector(forwardInvocation:));
    return invocation != (meta ? nsObjectClassForwardInvocation : nsObjectForwardInvocation);
}

// ---- Which classes are the app's ----

/// The configured scope, replaced whole (the old one is leaked: a reader may hold it;
/// configuration happens once or twice). NULL: the main image only.
typedef struct {
    char **prefixes;  // NULL-terminated
    char **images;    // NULL-terminated paths or file names; none: the main image
} CGSelectorScope;

static CGSelectorScope *scope;  // atomic

static char **copyStrings(const char *const *strings, size_t count) {
    char **copy = calloc(count + 1, sizeof(char *));
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (strings[i] != NULL && strings[i][0] != 0) copy[n++] = strdup(strings[i]);
    }
    return copy;
}

void crashguard_objc_selector_scope(const char *const *class_prefixes, size_t prefix_count, const char *const *images,
                                    size_t image_count) {
    CGSelectorScope *next = calloc(1, sizeof(CGSelectorScope));
    next->prefixes = copyStrings(class_prefixes, prefix_count);
    next->images = copyStrings(images, image_count);
    __atomic_store_n(&scope, next, __ATOMIC_RELEASE);
}

static uintptr_t mainImageBase(void) {
    static uintptr_t base;  // atomic; found once
    uintptr_t found = __atomic_load_n(&base, __ATOMIC_ACQUIRE);
    if (found != 0) return found;
    Dl_info info;
#if defined(__APPLE__)
    const void *inside = _dyld_get_image_header(0);  // dladdr's dli_fbase is the Mach-O header
#else
    const void *inside = (const void *)getauxval(AT_PHDR);  // the executable's program headers
#endif
    if (inside != NULL && dladdr(inside, &info) != 0) found = (uintptr_t)info.dli_fbase;
    __atomic_store_n(&base, found, __ATOMIC_RELEASE);
    return found;
}

static BOOL hasPrefix(const char *name, char *const *prefixes) {
    for (size_t i = 0; prefixes[i] != NULL; i++) {
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return YES;
    }
    return NO;
}

/// Whether `cls` was loaded from one of `images` (the main image when there are none).
/// Classes made at run time (KVO's subclasses) live on the heap: no image.
static BOOL inImages(Class cls, char *const *images) {
    Dl_info info;
    if (dladdr((__bridge const void *)cls, &info) == 0 || info.dli_fname == NULL) return NO;
    if (images[0] == NULL) return (uintptr_t)info.dli_fbase == mainImageBase();
    const char *file = strrchr(info.dli_fname, '/');
    file = file != NULL ? file + 1 : info.dli_fname;
    for (size_t i = 0; images[i] != NULL; i++) {
        if (strcmp(images[i], info.dli_fname) == 0 || strcmp(images[i], file) == 0) return YES;
    }
    return NO;
}

/// Whether `cls` (a class, not a meta class) or a superclass is the app's.
static BOOL isAppClass(Class cls) {
    static char *none[] = {NULL};
    CGSelectorScope *current = __atomic_load_n(&scope, __ATOMIC_ACQUIRE);
    char *const *prefixes = current != NULL ? current->prefixes : none;
    char *const *images = current != NULL ? current->images : none;
    for (Class c = cls; c != Nil; c = class_getSuperclass(c)) {
        if (hasPrefix(class_getName(c), prefixes) || inImages(c, images)) return YES;
    }
    return NO;
}

int crashguard_objc_selector_guards_class(const char *class_name) {
    Class cls = class_name != NULL ? objc_getClass(class_name) : Nil;
    return cls != Nil && isAppClass(cls) ? 1 : 0;
}

/// Whether the guard takes `sel` over for `receiver`.
static BOOL takesOver(id receiver, SEL sel, BOOL meta) {
    if (!CGEnabled(CRASHGUARD_OBJC_SELECTOR)) return NO;
    if (class_respondsToSelector(object_getClass(receiver), sel)) return NO;
    if (forwardsItself(receiver, meta)) return NO;
    return isAppClass(meta ? (Class)receiver : object_getClass(receiver));
}

static void reportSelector(id receiver, SEL sel, BOOL meta) {
    NSString *className = meta ? [NSString stringWithUTF8String:class_getName((Class)receiver)] : CGClassName(receiver);
    NSString *site = [NSString stringWithFormat:@"%c[%@ %s]", meta ? '+' : '-', className, sel_getName(sel)];
    NSString *reason = [NSString stringWithFormat:@"%@: unrecognized selector sent to %@ %@", site,
                                                  meta ? @"class" : @"instance", CGAddress(receiver)];
    CGReport(CRASHGUARD_OBJC_SELECTOR, "unrecognizedSelector", site, @"forwarded to a stub answering 0", reason,
             NSInvalidArgumentException);
}

static id forwardingTarget(id self, SEL _cmd, SEL sel, BOOL meta) {
    IMP original = meta ? originalClassTarget : originalInstanceTarget;
    id target = ((id (*)(id, SEL, SEL))original)(self, _cmd, sel);
    if (target != nil || !takesOver(self, sel, meta)) return target;
    reportSelector(self, sel, meta);
    return CGStubFor(sel);
}

static id cgInstanceForwardingTarget(id self, SEL _cmd, SEL sel) { return forwardingTarget(self, _cmd, sel, NO); }
static id cgClassForwardingTarget(id self, SEL _cmd, SEL sel) { return forwardingTarget(self, _cmd, sel, YES); }

#if CG_GNU_RUNTIME
static NSMethodSignature *signature(id self, SEL _cmd, SEL sel, BOOL meta) {
    IMP original = meta ? originalClassSignature : originalInstanceSignature;
    NSMethodSignature *found = ((id (*)(id, SEL, SEL))original)(self, _cmd, sel);
    if (found != nil || !takesOver(self, sel, meta)) return found;
    char buffer[128];
    return [NSMethodSignature signatureWithObjCTypes:CGTypesFor(sel, buffer, sizeof buffer)];
}

static id cgInstanceSignature(id self, SEL _cmd, SEL sel) { return signature(self, _cmd, sel, NO); }
static id cgClassSignature(id self, SEL _cmd, SEL sel) { return signature(self, _cmd, sel, YES); }
#endif

void CGInstallSelectorGuard(void) {
    Class root = [NSObject class];
    Class rootMeta = object_getClass((id)root);
    pthread_once(&stubOnce, makeStub);
    nsObjectForwardInvocation = class_getMethodImplementation(root, @selector(forwardInvocation:));
    nsObjectClassForwardInvocation = class_getMethodImplementation(rootMeta, @selector(forwardInvocation:));
    originalInstanceTarget = CGSwizzleOwn(root, @selector(forwardingTargetForSelector:), (IMP)cgInstanceForwardingTarget);
    originalClassTarget = CGSwizzleOwn(rootMeta, @selector(forwardingTargetForSelector:), (IMP)cgClassForwardingTarget);
#if CG_GNU_RUNTIME
    originalInstanceSignature = CGSwizzleOwn(root, @selector(methodSignatureForSelector:), (IMP)cgInstanceSignature);
    originalClassSignature = CGSwizzleOwn(rootMeta, @selector(methodSignatureForSelector:), (IMP)cgClassSignature);
#endif
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
