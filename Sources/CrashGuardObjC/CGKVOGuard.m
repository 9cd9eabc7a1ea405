// KVO: the seed's proxy. The first observer of a key path on an object registers a proxy
// (CGKVOProxy) with the real KVO machinery; the proxy keeps {keyPath: observers} and
// dispatches each change to the observers, so that every failure mode of seed 004 is
// caught before KVO sees it:
//   - remove an observer never added / remove twice: ignored and recorded
//   - add the same observer twice: observed once, recorded
//   - observed object released with observers: registrations dropped, recorded
//   - observer without an -observeValueForKeyPath:... of its own: change dropped, recorded
//   - observer's callback raises: caught, recorded
//   - empty key path: refused, recorded
// Observers are held unretained and dropped from every proxy in their -dealloc (the
// shared dealloc hook), which is what a weak table does on Apple's runtime.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

@interface CGKVOEntry : NSObject {
@public
    CG_UNSAFE id observer;  // unretained: dropped in its -dealloc
    void *context;
}
@end

@implementation CGKVOEntry
@end

@interface CGKVOProxy : NSObject {
@public
    CG_UNSAFE id observed;            // unretained: the proxy lives in a side table keyed by it
    NSMutableDictionary *byKeyPath;   // keyPath -> NSMutableArray of CGKVOEntry
}
@end

static CGSideTable *proxies;          // observed address -> CGKVOProxy
static pthread_mutex_t kvoLock = PTHREAD_MUTEX_INITIALIZER;  // guards every proxy's byKeyPath
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

@implementation CGKVOProxy

#if !CG_ARC
- (void)dealloc {
    [byKeyPath release];
    [super dealloc];
}
#endif

- (void)observeValueForKeyPath:(NSString *)keyPath ofObject:(id)object change:(NSDictionary *)change context:(void *)context {
    (void)context;
    // A snapshot, so that observers may add and remove while being told.
    pthread_mutex_lock(&kvoLock);
    NSArray *entries = CG_AUTORELEASE([[byKeyPath objectForKey:keyPath] copy]);
    // Retained while being told (by this array): an observer released meanwhile stays valid.
    NSMutableArray *observers = [NSMutableArray arrayWithCapacity:[entries count]];
    for (NSUInteger i = 0; i < [entries count]; i++) {
        CGKVOEntry *entry = [entries objectAtIndex:i];
        [observers addObject:entry->observer];
    }
    pthread_mutex_unlock(&kvoLock);
    for (NSUInteger i = 0; i < [entries count]; i++) {
        CGKVOEntry *entry = [entries objectAtIndex:i];
        id observer = [observers objectAtIndex:i];
        IMP handler = class_getMethodImplementation(object_getClass(observer),
                                                    @selector(observeValueForKeyPath:ofObject:change:context:));
        if (handler == nsObjectObserveValue) {
            NSString *reason = [NSString stringWithFormat:
                @"%@: An -observeValueForKeyPath:ofObject:change:context: message was received but not handled.\nKey path: %@\nObserved object: %@",
                describe(observer), keyPath, describe(object)];
            reportKVO(object, @"observeValueForKeyPath:ofObject:change:context:", @"change dropped for that observer",
                      reason, NSInternalInconsistencyException);
        } else {
            @try {
                ((void (*)(id, SEL, id, id, id, void *))handler)(observer, @selector(observeValueForKeyPath:ofObject:change:context:),
                                                                  keyPath, object, change, entry->context);
            } @catch (NSException *exception) {
                NSString *reason = [NSString stringWithFormat:@"KVO exception in observer %@ for the key path \"%@\" of %@: %@: %@",
                                                              describe(observer), keyPath, describe(object), [exception name], [exception reason]];
                reportKVO(object, @"observeValueForKeyPath:ofObject:change:context:", @"caught", reason, nil);
            }
        }
    }
}

@end

static CGKVOEntry *findEntry(NSArray *entries, CG_UNSAFE id observer) {
    for (NSUInteger i = 0; i < [entries count]; i++) {
        CGKVOEntry *entry = [entries objectAtIndex:i];
        if (entry->observer == observer) return entry;
    }
    return nil;
}

static void cgAddObserver(id self, SEL _cmd, id observer, NSString *keyPath, NSKeyValueObservingOptions options, void *context) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVO) || [self isKindOfClass:[CGKVOProxy class]]) {
        ((void (*)(id, SEL, id, id, NSKeyValueObservingOptions, void *))originalAdd)(self, _cmd, observer, keyPath, options, context);
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
    BOOL registerProxy = NO, repeated = NO;
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
        registerProxy = YES;
    }
    if (findEntry(entries, observer) != nil) {
        repeated = YES;
    } else {
        CGKVOEntry *entry = CG_AUTORELEASE([[CGKVOEntry alloc] init]);
        entry->observer = observer;
        entry->context = context;
        [entries addObject:entry];
        __atomic_fetch_add(&registrations, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&kvoLock);
    if (repeated) {
        NSString *reason = [NSString stringWithFormat:@"Repeated additions of the observer %@ for the key path \"%@\" to %@",
                                                      describe(observer), keyPath, describe(self)];
        reportKVO(self, @"addObserver:forKeyPath:options:context:", @"ignored: observed once", reason, nil);
        return;
    }
    if (registerProxy) {
        ((void (*)(id, SEL, id, id, NSKeyValueObservingOptions, void *))originalAdd)(self, _cmd, proxy, keyPath, options, NULL);
    }
}

/// Removes `observer` for `keyPath`; unregisters the proxy from KVO when it was the last.
static void removeObserver(id self, SEL _cmd, id observer, NSString *keyPath) {
    CGKVOProxy *proxy = CGSideTableGet(proxies, self);
    BOOL found = NO, last = NO;
    pthread_mutex_lock(&kvoLock);
    NSMutableArray *entries = (proxy != nil && keyPath != nil) ? [proxy->byKeyPath objectForKey:keyPath] : nil;
    CGKVOEntry *entry = findEntry(entries, observer);
    if (entry != nil) {
        found = YES;
        [entries removeObjectIdenticalTo:entry];
        __atomic_fetch_sub(&registrations, 1, __ATOMIC_RELEASE);
        if ([entries count] == 0) {
            last = YES;
            [proxy->byKeyPath removeObjectForKey:keyPath];
        }
    }
    pthread_mutex_unlock(&kvoLock);
    if (!found) {
        NSString *reason = [NSString stringWithFormat:
            @"Cannot remove an observer %@ for the key path \"%@\" from %@ because it is not registered as an observer.",
            observer ? describe(observer) : @"nil", keyPath, describe(self)];
        reportKVO(self, NSStringFromSelector(_cmd), @"ignored", reason, NSRangeException);
        return;
    }
    if (last) {
        ((void (*)(id, SEL, id, id))originalRemove)(self, @selector(removeObserver:forKeyPath:), proxy, keyPath);
    }
}

static void cgRemoveObserver(id self, SEL _cmd, id observer, NSString *keyPath) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVO) || [observer isKindOfClass:[CGKVOProxy class]]) {
        ((void (*)(id, SEL, id, id))originalRemove)(self, _cmd, observer, keyPath);
        return;
    }
    removeObserver(self, _cmd, observer, keyPath);
}

static void cgRemoveObserverContext(id self, SEL _cmd, id observer, NSString *keyPath, void *context) {
    if (!CGEnabled(CRASHGUARD_OBJC_KVO) || [observer isKindOfClass:[CGKVOProxy class]]) {
        ((void (*)(id, SEL, id, id, void *))originalRemoveContext)(self, _cmd, observer, keyPath, context);
        return;
    }
    removeObserver(self, _cmd, observer, keyPath);
}

void CGKVODeallocHook(CG_UNSAFE id object) {
    // Fast path, taken by almost every -dealloc: no proxy exists anywhere.
    if (proxies == NULL || __atomic_load_n(&liveProxies, __ATOMIC_ACQUIRE) == 0) return;
    if (object_getClass(object) == [CGKVOProxy class]) return;
    @autoreleasepool {
    // 1. `object` is observed: drop its registrations (KVO would raise or leak them).
    CGKVOProxy *proxy = CGSideTableTake(proxies, object);
    NSMutableArray *keyPaths = [NSMutableArray array];
    if (proxy != nil) {
        __atomic_fetch_sub(&liveProxies, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&kvoLock);
        NSArray *paths = [[proxy->byKeyPath allKeys] sortedArrayUsingSelector:@selector(compare:)];
        for (NSUInteger i = 0; i < [paths count]; i++) {
            NSString *path = [paths objectAtIndex:i];
            NSUInteger count = [[proxy->byKeyPath objectForKey:path] count];
            __atomic_fetch_sub(&registrations, (long)count, __ATOMIC_RELEASE);
            [keyPaths addObject:path];
        }
        [proxy->byKeyPath removeAllObjects];
        pthread_mutex_unlock(&kvoLock);
        for (NSUInteger i = 0; i < [keyPaths count]; i++) {
            ((void (*)(id, SEL, id, id))originalRemove)(object, @selector(removeObserver:forKeyPath:), proxy, [keyPaths objectAtIndex:i]);
        }
        if ([keyPaths count] > 0) {
            NSString *reason = [NSString stringWithFormat:
                @"An instance %@ of class %@ was deallocated while key value observers were still registered with it. Key paths: %@",
                CGAddress(object), visibleClass(object), [keyPaths componentsJoinedByString:@", "]];
            reportKVO(object, @"dealloc", @"registrations dropped", reason, NSInternalInconsistencyException);
        }
    }
    // 2. `object` observes something: drop it everywhere (a weak table's job).
    // Entries are found by scanning the proxies: registrations are few.
    NSMutableArray *emptied = [NSMutableArray array];  // pairs of (proxy, keyPath) to unregister
    pthread_mutex_lock(&kvoLock);
    NSArray *all = __atomic_load_n(&registrations, __ATOMIC_ACQUIRE) > 0 ? CGSideTableValues(proxies) : nil;
    for (NSUInteger p = 0; p < [all count]; p++) {
        CGKVOProxy *candidate = [all objectAtIndex:p];
        NSArray *paths = [candidate->byKeyPath allKeys];
        for (NSUInteger k = 0; k < [paths count]; k++) {
            NSMutableArray *entries = [candidate->byKeyPath objectForKey:[paths objectAtIndex:k]];
            CGKVOEntry *entry = findEntry(entries, object);
            if (entry == nil) continue;
            [entries removeObjectIdenticalTo:entry];
            __atomic_fetch_sub(&registrations, 1, __ATOMIC_RELEASE);
            if ([entries count] == 0) {
                [candidate->byKeyPath removeObjectForKey:[paths objectAtIndex:k]];
                [emptied addObject:candidate];
                [emptied addObject:[paths objectAtIndex:k]];
            }
        }
    }
    pthread_mutex_unlock(&kvoLock);
    for (NSUInteger i = 0; i + 1 < [emptied count]; i += 2) {
        CGKVOProxy *candidate = [emptied objectAtIndex:i];
        ((void (*)(id, SEL, id, id))originalRemove)(candidate->observed, @selector(removeObserver:forKeyPath:), candidate,
                                                    [emptied objectAtIndex:i + 1]);
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

#endif  // CRASHGUARD_OBJC_ENABLED
