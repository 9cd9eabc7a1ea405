// KVC (seed 002): NSObject's key-value coding raises for a key the class does not have
// (-valueForUndefinedKey:, -setValue:forUndefinedKey:, both NSUndefinedKeyException), for
// nil given to a scalar property (-setNilValueForKey:, NSInvalidArgumentException) and for
// a nil key or key path. The guard answers nil / ignores the write and records Foundation's
// text:
//   [<Person 0x...> valueForUndefinedKey:]: this class is not key value coding-compliant for the key nickname.
// Only NSObject's own implementations are replaced: a class that overrides
// -valueForUndefinedKey: (to answer defaults) or -valueForKey: (collections) keeps its own.
// A key path through a nil step answers nil without raising on both runtimes (a message to
// nil); through an undefined step, the step is caught like a key.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

CG_GUARD_CODE_BEGIN

static IMP originalValueForKey, originalSetValueForKey, originalValueForKeyPath, originalSetValueForKeyPath;
static IMP originalValueForUndefinedKey, originalSetValueForUndefinedKey, originalSetNilValueForKey;

/// "<Person 0x...>", with the class the app knows (KVO's subclass hidden).
static NSString *describe(id object) {
    return [NSString stringWithFormat:@"<%s %@>", class_getName([object class]), CGAddress(object)];
}

static void reportKVC(id self, SEL cmd, NSString *action, NSString *exception, NSString *reason) {
    NSString *function = [NSString stringWithFormat:@"-[%s %s]", class_getName([self class]), sel_getName(cmd)];
    CGReport(CRASHGUARD_OBJC_KVC, "kvc", function, action, reason, exception);
}

/// A nil key: YES when refused (recorded; the caller answers nil / returns).
static BOOL refusedNilKey(id self, SEL cmd, NSString *key, BOOL reads) {
    if (key != nil) return NO;
    reportKVC(self, cmd, reads ? @"returned nil" : @"ignored", NSInvalidArgumentException,
              [NSString stringWithFormat:@"-[%s %s]: attempt to %@ a value for a nil key", class_getName([self class]), sel_getName(cmd),
                                         reads ? @"retrieve" : @"set"]);
    return YES;
}

static id cgValueForKey(id self, SEL _cmd, NSString *key) {
    if (CGEnabled(CRASHGUARD_OBJC_KVC) && refusedNilKey(self, _cmd, key, YES)) return nil;
    return ((id (*)(id, SEL, id))originalValueForKey)(self, _cmd, key);
}

static id cgValueForKeyPath(id self, SEL _cmd, NSString *keyPath) {
    if (CGEnabled(CRASHGUARD_OBJC_KVC) && refusedNilKey(self, _cmd, keyPath, YES)) return nil;
    return ((id (*)(id, SEL, id))originalValueForKeyPath)(self, _cmd, keyPath);
}

static void cgSetValueForKey(id self, SEL _cmd, id value, NSString *key) {
    if (CGEnabled(CRASHGUARD_OBJC_KVC) && refusedNilKey(self, _cmd, key, NO)) return;
    ((void (*)(id, SEL, id, id))originalSetValueForKey)(self, _cmd, value, key);
}

static void cgSetValueForKeyPath(id self, SEL _cmd, id value, NSString *keyPath) {
    if (CGEnabled(CRASHGUARD_OBJC_KVC) && refusedNilKey(self, _cmd, keyPath, NO)) return;
    ((void (*)(id, SEL, id, id))originalSetValueForKeyPath)(self, _cmd, value, keyPath);
}

static id cgValueForUndefinedKey(id self, SEL _cmd, NSString *key) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVC)) return ((id (*)(id, SEL, id))originalValueForUndefinedKey)(self, _cmd, key);
    reportKVC(self, _cmd, @"returned nil", NSUndefinedKeyException,
              [NSString stringWithFormat:@"[%@ valueForUndefinedKey:]: this class is not key value coding-compliant for the key %@.",
                                         describe(self), key]);
    return nil;
}

static void cgSetValueForUndefinedKey(id self, SEL _cmd, id value, NSString *key) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVC)) {
        ((void (*)(id, SEL, id, id))originalSetValueForUndefinedKey)(self, _cmd, value, key);
        return;
    }
    reportKVC(self, _cmd, @"ignored", NSUndefinedKeyException,
              [NSString stringWithFormat:@"[%@ setValue:forUndefinedKey:]: this class is not key value coding-compliant for the key %@.",
                                         describe(self), key]);
}

static void cgSetNilValueForKey(id self, SEL _cmd, NSString *key) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVC)) {
        ((void (*)(id, SEL, id))originalSetNilValueForKey)(self, _cmd, key);
        return;
    }
    reportKVC(self, _cmd, @"ignored", NSInvalidArgumentException,
              [NSString stringWithFormat:@"[%@ setNilValueForKey]: could not set nil as the value for the key %@.", describe(self), key]);
}

void CGInstallKVCGuard(void) {
    Class root = [NSObject class];
    originalValueForKey = CGSwizzleOwn(root, @selector(valueForKey:), (IMP)cgValueForKey);
    originalSetValueForKey = CGSwizzleOwn(root, @selector(setValue:forKey:), (IMP)cgSetValueForKey);
    originalValueForKeyPath = CGSwizzleOwn(root, @selector(valueForKeyPath:), (IMP)cgValueForKeyPath);
    originalSetValueForKeyPath = CGSwizzleOwn(root, @selector(setValue:forKeyPath:), (IMP)cgSetValueForKeyPath);
    originalValueForUndefinedKey = CGSwizzleOwn(root, @selector(valueForUndefinedKey:), (IMP)cgValueForUndefinedKey);
    originalSetValueForUndefinedKey = CGSwizzleOwn(root, @selector(setValue:forUndefinedKey:), (IMP)cgSetValueForUndefinedKey);
    originalSetNilValueForKey = CGSwizzleOwn(root, @selector(setNilValueForKey:), (IMP)cgSetNilValueForKey);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
