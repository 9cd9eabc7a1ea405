// NSNull: JSON's null arrives as NSNull where the code expects a string, number, array or
// dictionary, and any message to it is an unrecognized selector. The guard forwards the
// message to the first of "", @0, @[], @{} that answers it (the seed's list), and records
//   -[NSNull length]: unrecognized selector sent to instance 0x...
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

CG_GUARD_CODE_BEGIN

static NSArray *stand_ins;
static IMP originalTarget;
#if CG_GNU_RUNTIME
static IMP originalSignature;
#endif

static id standInFor(SEL sel) {
    for (NSUInteger i = 0; i < [stand_ins count]; i++) {
        id candidate = [stand_ins objectAtIndex:i];
        if ([candidate respondsToSelector:sel]) return candidate;
    }
    return nil;
}

/// NSNull's superclass's implementation, looked up at the call: when NSNull had no method
/// of its own, the guard added one, and "the original" is what NSObject answers now (the
/// selector guard may have swizzled it since).
static IMP superImplementation(SEL sel) {
    return class_getMethodImplementation(class_getSuperclass([NSNull class]), sel);
}

static id callOriginalTarget(id self, SEL _cmd, SEL sel) {
    if (originalTarget != NULL) return ((id (*)(id, SEL, SEL))originalTarget)(self, _cmd, sel);
    return ((id (*)(id, SEL, SEL))superImplementation(_cmd))(self, _cmd, sel);
}

static id cgNullForwardingTarget(id self, SEL _cmd, SEL sel) {
    if (CGEnabled(CRASHGUARD_OBJC_NULL)) {
        id standIn = standInFor(sel);
        if (standIn != nil) {
            NSString *site = [NSString stringWithFormat:@"-[NSNull %s]", sel_getName(sel)];
            NSString *reason = [NSString stringWithFormat:@"%@: unrecognized selector sent to instance %@", site, CGAddress(self)];
            NSString *action = [NSString stringWithFormat:@"forwarded to %@", CGClassName(standIn)];
            CGReport(CRASHGUARD_OBJC_NULL, "null", site, action, reason, NSInvalidArgumentException);
            return standIn;
        }
    }
    return callOriginalTarget(self, _cmd, sel);
}

#if CG_GNU_RUNTIME
static id callOriginalSignature(id self, SEL _cmd, SEL sel) {
    if (originalSignature != NULL) return ((id (*)(id, SEL, SEL))originalSignature)(self, _cmd, sel);
    return ((id (*)(id, SEL, SEL))superImplementation(_cmd))(self, _cmd, sel);
}

// GNUstep asks for the signature first (CGCompat.h): answer the stand-in's.
static id cgNullSignature(id self, SEL _cmd, SEL sel) {
    id found = callOriginalSignature(self, _cmd, sel);
    if (found != nil || !CGEnabled(CRASHGUARD_OBJC_NULL)) return found;
    id standIn = standInFor(sel);
    return standIn != nil ? [standIn methodSignatureForSelector:sel] : nil;
}
#endif

/// Overrides `sel` in NSNull: swizzles NSNull's own method when it has one, else adds one
/// (class_replaceMethod is not used: on GCC's runtime it can reach NSObject's method).
static IMP overrideInNull(SEL sel, IMP imp, const char *types) {
    Class null = [NSNull class];
    IMP original = CGSwizzleOwn(null, sel, imp);
    if (original == NULL) {
        class_addMethod(null, sel, imp, types);
        CGRebuildDispatch(null);
    }
    return original;
}

void CGInstallNullGuard(void) {
    stand_ins = [[NSArray alloc] initWithObjects:@"", [NSNumber numberWithInt:0], [NSArray array], [NSDictionary dictionary], nil];
    [[NSNull null] description];
    originalTarget = overrideInNull(@selector(forwardingTargetForSelector:), (IMP)cgNullForwardingTarget, "@@::");
#if CG_GNU_RUNTIME
    originalSignature = overrideInNull(@selector(methodSignatureForSelector:), (IMP)cgNullSignature, "@@::");
#endif
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
