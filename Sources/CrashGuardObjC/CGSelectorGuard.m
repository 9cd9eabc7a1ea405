// Unrecognized selectors: a message no class in the receiver's chain answers is forwarded
// to a stub object whose class gains a method for that selector (class_addMethod) answering
// 0 / nil, and the catch is recorded with the runtime's own text:
//   -[Foo bar]: unrecognized selector sent to instance 0x...
// Classes that forward on their own (they override -forwardInvocation: or
// -forwardingTargetForSelector:) are left alone.
//
// Forwarding order differs (CGCompat.h): Apple asks -forwardingTargetForSelector: first,
// GNUstep asks -methodSignatureForSelector: first and raises when it gets nil; there the
// guard also answers a signature for a selector it will take over.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

#include <string.h>

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

/// Whether the guard takes `sel` over for `receiver`.
static BOOL takesOver(id receiver, SEL sel, BOOL meta) {
    if (!CGEnabled(CRASHGUARD_OBJC_SELECTOR)) return NO;
    if (class_respondsToSelector(object_getClass(receiver), sel)) return NO;
    return !forwardsItself(receiver, meta);
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

#endif  // CRASHGUARD_OBJC_ENABLED
