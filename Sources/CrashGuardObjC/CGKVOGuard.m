// KVO: the seed's proxy. Every registration goes through a proxy entry (CGKVOEntry): the
// entry is what the real KVO machinery observes, with the observer's own options, and it
// forwards each change to its one observer; {keyPath: entries} per observed object lives in
// a side table (CGKVOProxy), so that every failure mode of seed 004 is caught before KVO
// sees it:
//   - remove an observer never added / remove twice: ignored and recorded
//   - add the same observer twice: observed once, recorded
//   - observed object released with observers: registrations dropped, recorded
//   - observer without an -observeValueForKeyPath:... of its own: change dropped, recorded
//   - observer's callback raises: caught, recorded
//   - empty key path: refused, recorded
// One KVO registration per (observer, key path) keeps each observer's options: a later
// observer asking for .old, .initial or .prior gets them, as it would without the guard.
// Observers are held unretained and dropped from every proxy in their -dealloc (the
// shared dealloc hook), which is what a weak table does on Apple's runtime.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

CG_GUARD_CODE_BEGIN

/// One registration: KVO's observer, forwarding to the app's.
@interface CGKVOEntry : NSObject {
@public
    CG_UNSAFE id observer;  // unretained: cleared (nil) in its -dealloc, under kvoLock
    void *context;
}
@end

@interface CGKVOProxy : NSObject {
@public
    CG_UNSAFE id observed;            // unretained: the proxy lives in a side table keyed by it
    NSMutableDictionary *byKeyPath;   // keyPath -> NSMutableArray of CGKVOEntry
}
@end

static CGSideTable *proxies;          // observed address -> CGKVOProxy
static pthread_mutex_t kvoLock = PTHREAD_MUTEX_INITIALIZER;  // guards every proxy's byKeyPath and entry->observer
static long registrations;            // atomic: observers registered anywhere
static long liveProxies;              // atomic: proxies in the side table (fast path of -dealloc)
static IMP originalAdd, originalRemove, originalRemoveContext;
static IMP nsObjectObserveValue;

/// The class the app knows (-class): KVO hides its own subclass behind it
/// (NSKVONotifying_Person on Apple platforms, GSKVOPerson on GNUstep).
static NSString *visibleClass(CG_UNSAFE id object) { return [NSString stringWithUTF8String:class_getName([object class])]; }
static NSString *describe(CG_UNSAFE id object) { return [NSString stringWithFormat:@"<%@ %@>", visibleClass(object), CGAddress(object)]; }

static void reportKVO(CG_UNSAFE id observed, NSString *selector, NSString *action, NSString *reason, NSString *exception) {
    NSString *site = [NSString stringWithFormat:@"-[%@ %@]", visibleClass(observed), selector];
    CGReport(CRASHGUARD_OBJC_KVO, "kvo", site, action, reason, exception);
}

@implementation CGKVOEntry

- (void)observeValueForKeyPath:(NSString *)keyPath ofObject:(id)object change:(NSDictionary *)change context:(void *)unused {
    (void)unused;
    // Retained while being told: an observer released meanwhile on another thread stays valid.
    pthread_mutex_lock(&kvoLock);
    id target = CG_RETAIN(observer);
    pthread_mutex_unlock(&kvoLock);
    if (target == nil) return;  // removed or freed since KVO looked the entry up
    IMP handler = class_getMethodImplementation(object_getClass(target), @selector(observeValueForKeyPath:ofObject:change:context:));
    if (handler == nsObjectObserveValue) {
        NSString *reason = [NSString stringWithFormat:
            @"%@: An -observeValueForKeyPath:ofObject:change:context: message was received but not handled.\nKey path: %@\nObserved object: %@",
            describe(target), keyPath, describe(object)];
        reportKVO(object, @"observeValueForKeyPath:ofObject:change:context:", @"change dropped for that observer", reason,
                  NSInternalInconsistencyException);
    } else {
        @try {
            ((void (*)(id, SEL, id, id, id, void *))handler)(target, @selector(observeValueForKeyPath:ofObject:change:context:), keyPath,
                                                              object, change, context);
        } @catch (NSException *exception) {
            NSString *reason = [NSString stringWithFormat:@"KVO exception in observer %@ for the key path \"%@\" of %@: %@: %@",
                                                          describe(target), keyPath, describe(object), [exception name], [exception reason]];
            reportKVO(object, @"observeValueForKeyPath:ofObject:change:context:", @"caught", reason, nil);
        }
    }
    CG_RELEASE(target);
}

@end

@implementation CGKVOProxy

#if !CG_ARC
- (void)dealloc {
    [byKeyPath release];
    [super dealloc];
}
#endif

@end

static CGKVOEntry *findEntry(NSArray *entries, CG_UNSAFE id observer) {
    for (NSUInteger i = 0; i < [entries count]; i++) {
        CGKVOEntry *entry = [entries objectAtIndex:i];
        if (entry->observer == observer) return entry;
    }
    return nil;
}

typedef void (*CGAddIMP)(id, SEL, id, id, NSKeyValueObservingOptions, void *);
typedef void (*CGRemoveIMP)(id, SEL, id, id);

/// Takes `entry` out of KVO for `keyPath` of `observed` (the entry was unlinked already).
static void unregisterEntry(CG_UNSAFE id observed, CGKVOEntry *entry, NSString *keyPath) {
    ((CGRemoveIMP)originalRemove)(observed, @selector(removeObserver:forKeyPath:), entry, keyPath);
}

static BOOL isGuardObject(id object) { return [object isKindOfClass:[CGKVOEntry class]]; }

static void cgAddObserver(id self, SEL _cmd, id observer, NSString *keyPath, NSKeyValueObservingOptions options, void *context) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVO) || isGuardObject(observer)) {
        ((CGAddIMP)originalAdd)(self, _cmd, observer, keyPath, options, context);
        return;
    }
    if (observer == nil || keyPath == nil || [keyPath length] == 0) {
        NSString *reason = [NSString stringWithFormat:@"Cannot add an observer %@ for an empty key path to %@",
                                                      observer ? describe(observer) : @"nil", describe(self)];
        if (keyPath != nil && [keyPath length] > 0) {
            reason = [NSString stringWithFormat:@"Cannot add a nil observer for the key path \"%@\" to %@", keyPath, describe(self)];
        }
        reportKVO(self, @"addObserver:forKeyPath:options:context:", @"refused", reason, NSInvalidArgumentException);
        return;
    }
    CGKVOEntry *added = nil;
    CGKVOProxy *proxy = CGSideTableGet(proxies, self);
    pthread_mutex_lock(&kvoLock);
    if (proxy == nil) {
        proxy = CG_AUTORELEASE([[CGKVOProxy alloc] init]);
        proxy->observed = self;
        proxy->byKeyPath = [[NSMutableDictionary alloc] init];
        CGSideTableSet(proxies, self, proxy);
        __atomic_fetch_add(&liveProxies, 1, __ATOMIC_RELEASE);
    }
    NSMutableArray *entries = [proxy->byKeyPath objectForKey:keyPath];
    if (entries == nil) {
        entries = [NSMutableArray array];
        [proxy->byKeyPath setObject:entries forKey:keyPath];
    }
    if (findEntry(entries, observer) == nil) {
        added = CG_AUTORELEASE([[CGKVOEntry alloc] init]);
        added->observer = observer;
        added->context = context;
        [entries addObject:added];
        __atomic_fetch_add(&registrations, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&kvoLock);
    if (added == nil) {
        NSString *reason = [NSString stringWithFormat:@"Repeated additions of the observer %@ for the key path \"%@\" to %@",
                                                      describe(observer), keyPath, describe(self)];
        reportKVO(self, @"addObserver:forKeyPath:options:context:", @"ignored: observed once", reason, nil);
        return;
    }
    // Outside the lock: with .initial KVO tells the entry at once.
    ((CGAddIMP)originalAdd)(self, _cmd, added, keyPath, options, NULL);
}

/// Removes `observer` for `keyPath` and takes its entry out of KVO.
static void removeObserver(id self, SEL _cmd, id observer, NSString *keyPath) {
    CGKVOProxy *proxy = CGSideTableGet(proxies, self);
    CGKVOEntry *entry = nil;
    pthread_mutex_lock(&kvoLock);
    NSMutableArray *entries = (proxy != nil && keyPath != nil) ? [proxy->byKeyPath objectForKey:keyPath] : nil;
    entry = findEntry(entries, observer);
    if (entry != nil) {
        (void)CG_AUTORELEASE(CG_RETAIN(entry));  // alive until KVO has let it go
        entry->observer = nil;
        [entries removeObjectIdenticalTo:entry];
        __atomic_fetch_sub(&registrations, 1, __ATOMIC_RELEASE);
        if ([entries count] == 0) [proxy->byKeyPath removeObjectForKey:keyPath];
    }
    pthread_mutex_unlock(&kvoLock);
    if (entry == nil) {
        NSString *reason = [NSString stringWithFormat:
            @"Cannot remove an observer %@ for the key path \"%@\" from %@ because it is not registered as an observer.",
            observer ? describe(observer) : @"nil", keyPath, describe(self)];
        reportKVO(self, NSStringFromSelector(_cmd), @"ignored", reason, NSRangeException);
        return;
    }
    unregisterEntry(self, entry, keyPath);
}

static void cgRemoveObserver(id self, SEL _cmd, id observer, NSString *keyPath) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVO) || isGuardObject(observer)) {
        ((CGRemoveIMP)originalRemove)(self, _cmd, observer, keyPath);
        return;
    }
    removeObserver(self, _cmd, observer, keyPath);
}

static void cgRemoveObserverContext(id self, SEL _cmd, id observer, NSString *keyPath, void *context) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVO) || isGuardObject(observer)) {
        ((void (*)(id, SEL, id, id, void *))originalRemoveContext)(self, _cmd, observer, keyPath, context);
        return;
    }
    removeObserver(self, _cmd, observer, keyPath);
}

void CGKVODeallocHook(CG_UNSAFE id object) {
    // Fast path, taken by almost every -dealloc: no proxy exists anywhere.
    if (proxies == NULL || __atomic_load_n(&liveProxies, __ATOMIC_ACQUIRE) == 0) return;
    Class cls = object_getClass(object);
    if (cls == [CGKVOProxy class] || cls == [CGKVOEntry class]) return;
    @autoreleasepool {
    // 1. `object` is observed: drop its registrations (KVO would raise or leak them).
    CGKVOProxy *proxy = CGSideTableTake(proxies, object);
    NSMutableArray *dropped = [NSMutableArray array];  // pairs of (entry, keyPath) to unregister
    NSMutableArray *keyPaths = [NSMutableArray array];
    if (proxy != nil) {
        __atomic_fetch_sub(&liveProxies, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&kvoLock);
        NSArray *paths = [[proxy->byKeyPath allKeys] sortedArrayUsingSelector:@selector(compare:)];
        for (NSUInteger i = 0; i < [paths count]; i++) {
            NSString *path = [paths objectAtIndex:i];
            NSArray *entries = [proxy->byKeyPath objectForKey:path];
            __atomic_fetch_sub(&registrations, (long)[entries count], __ATOMIC_RELEASE);
            for (NSUInteger e = 0; e < [entries count]; e++) {
                CGKVOEntry *entry = [entries objectAtIndex:e];
                entry->observer = nil;
                [dropped addObject:entry];
                [dropped addObject:path];
            }
            [keyPaths addObject:path];
        }
        [proxy->byKeyPath removeAllObjects];
        pthread_mutex_unlock(&kvoLock);
        for (NSUInteger i = 0; i + 1 < [dropped count]; i += 2) unregisterEntry(object, [dropped objectAtIndex:i], [dropped objectAtIndex:i + 1]);
        if ([keyPaths count] > 0) {
            NSString *reason = [NSString stringWithFormat:
                @"An instance %@ of class %@ was deallocated while key value observers were still registered with it. Key paths: %@",
                CGAddress(object), visibleClass(object), [keyPaths componentsJoinedByString:@", "]];
            reportKVO(object, @"dealloc", @"registrations dropped", reason, NSInternalInconsistencyException);
        }
    }
    // 2. `object` observes something: drop it everywhere (a weak table's job).
    // Entries are found by scanning the proxies: registrations are few.
    NSMutableArray *emptied = [NSMutableArray array];  // triples of (proxy, entry, keyPath) to unregister
    pthread_mutex_lock(&kvoLock);
    NSArray *all = __atomic_load_n(&registrations, __ATOMIC_ACQUIRE) > 0 ? CGSideTableValues(proxies) : nil;
    for (NSUInteger p = 0; p < [all count]; p++) {
        CGKVOProxy *candidate = [all objectAtIndex:p];
        NSArray *paths = [candidate->byKeyPath allKeys];
        for (NSUInteger k = 0; k < [paths count]; k++) {
            NSString *path = [paths objectAtIndex:k];
            NSMutableArray *entries = [candidate->byKeyPath objectForKey:path];
            CGKVOEntry *entry = findEntry(entries, object);
            if (entry == nil) continue;
            entry->observer = nil;
            [emptied addObject:candidate];
            [emptied addObject:entry];
            [emptied addObject:path];
            [entries removeObjectIdenticalTo:entry];
            __atomic_fetch_sub(&registrations, 1, __ATOMIC_RELEASE);
            if ([entries count] == 0) [candidate->byKeyPath removeObjectForKey:path];
        }
    }
    pthread_mutex_unlock(&kvoLock);
    for (NSUInteger i = 0; i + 2 < [emptied count]; i += 3) {
        CGKVOProxy *candidate = [emptied objectAtIndex:i];
        unregisterEntry(candidate->observed, [emptied objectAtIndex:i + 1], [emptied objectAtIndex:i + 2]);
    }
    }
}

void CGInstallKVOGuard(void) {
    proxies = CGSideTableCreate();
    Class root = [NSObject class];
    nsObjectObserveValue = class_getMethodImplementation(root, @selector(observeValueForKeyPath:ofObject:change:context:));
    originalAdd = CGSwizzleOwn(root, @selector(addObserver:forKeyPath:options:context:), (IMP)cgAddObserver);
    originalRemove = CGSwizzleOwn(root, @selector(removeObserver:forKeyPath:), (IMP)cgRemoveObserver);
    originalRemoveContext = CGSwizzleOwn(root, @selector(removeObserver:forKeyPath:context:), (IMP)cgRemoveObserverContext);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
