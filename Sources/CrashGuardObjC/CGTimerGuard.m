// Timers: a repeating NSTimer retains its target until invalidated, so a target that
// forgets -invalidate is never freed and keeps being fired. The guard gives the timer a
// proxy as its target (+scheduledTimerWithTimeInterval:target:selector:userInfo:repeats:
// and +timerWithTimeInterval:... with repeats YES); the proxy holds the real target
// unretained and is cleared in the target's -dealloc. The first fire after that
// invalidates the timer and records
//   Timer <NSTimer 0x...> firing -[Ticker tick:] was not invalidated before its target was deallocated
// Non-repeating timers fire once and release their target: left alone.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

CG_GUARD_CODE_BEGIN

@interface CGTimerProxy : NSObject {
@public
    CG_UNSAFE id target;  // unretained; cleared by CGTimerDeallocHook
    SEL selector;
    NSString *targetClass;
}
@end

static CGSideTable *proxiesByTarget;  // target address -> NSMutableArray of CGTimerProxy
static pthread_mutex_t timerLock = PTHREAD_MUTEX_INITIALIZER;
static long proxiesLive;              // atomic: fast path of -dealloc
static IMP originalScheduled, originalTimerWith;

@implementation CGTimerProxy

- (void)dealloc {
    pthread_mutex_lock(&timerLock);
    CG_UNSAFE id current = target;
    target = nil;
    pthread_mutex_unlock(&timerLock);
    NSMutableArray *list = current != nil ? CGSideTableGet(proxiesByTarget, current) : nil;
    if (list != nil) {
        @synchronized(list) {
            for (NSUInteger i = 0; i < [list count]; i++) {
                if ([[list objectAtIndex:i] nonretainedObjectValue] == self) {
                    [list removeObjectAtIndex:i];
                    break;
                }
            }
        }
    }
    __atomic_fetch_sub(&proxiesLive, 1, __ATOMIC_RELEASE);
#if !CG_ARC
    [targetClass release];
    [super dealloc];
#endif
}

- (void)crashGuardFire:(NSTimer *)timer {
    pthread_mutex_lock(&timerLock);
    id strong = CG_RETAIN(target);
    pthread_mutex_unlock(&timerLock);
    if (strong != nil) {
        ((void (*)(id, SEL, id))class_getMethodImplementation(object_getClass(strong), selector))(strong, selector, timer);
        CG_RELEASE(strong);
        return;
    }
    NSString *site = [NSString stringWithFormat:@"-[%@ %s]", targetClass, sel_getName(selector)];
    NSString *reason = [NSString stringWithFormat:@"Timer <%@ %@> firing %@ was not invalidated before its target was deallocated",
                                                  CGClassName(timer), CGAddress(timer), site];
    [timer invalidate];
    CGReport(CRASHGUARD_OBJC_TIMER, "timer", site, @"invalidated the timer", reason, nil);
}

@end

static CGTimerProxy *proxyFor(id target, SEL selector) {
    CGTimerProxy *proxy = CG_AUTORELEASE([[CGTimerProxy alloc] init]);
    proxy->target = target;
    proxy->selector = selector;
    proxy->targetClass = CG_RETAIN(CGClassName(target));
    __atomic_fetch_add(&proxiesLive, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&timerLock);
    NSMutableArray *list = CGSideTableGet(proxiesByTarget, target);
    if (list == nil) {
        list = [NSMutableArray array];
        CGSideTableSet(proxiesByTarget, target, list);
    }
    pthread_mutex_unlock(&timerLock);
    @synchronized(list) {
        [list addObject:[NSValue valueWithNonretainedObject:proxy]];
    }
    return proxy;
}

void CGTimerDeallocHook(CG_UNSAFE id object) {
    if (proxiesByTarget == NULL || __atomic_load_n(&proxiesLive, __ATOMIC_ACQUIRE) == 0) return;
    pthread_mutex_lock(&timerLock);
    NSMutableArray *list = CGSideTableTake(proxiesByTarget, object);
    if (list != nil) {
        @synchronized(list) {
            for (NSUInteger i = 0; i < [list count]; i++) {
                CGTimerProxy *proxy = [[list objectAtIndex:i] nonretainedObjectValue];
                if (proxy->target == object) proxy->target = nil;
            }
        }
    }
    pthread_mutex_unlock(&timerLock);
}

static BOOL guards(id target, SEL selector, BOOL repeats) {
    return repeats && target != nil && CGEnabled(CRASHGUARD_OBJC_TIMER) && ![target isKindOfClass:[CGTimerProxy class]] &&
           class_respondsToSelector(object_getClass(target), selector);
}

static id cgScheduled(id self, SEL _cmd, NSTimeInterval interval, id target, SEL selector, id userInfo, BOOL repeats) {
    if (guards(target, selector, repeats)) {
        target = proxyFor(target, selector);
        selector = @selector(crashGuardFire:);
    }
    return ((id (*)(id, SEL, NSTimeInterval, id, SEL, id, BOOL))originalScheduled)(self, _cmd, interval, target, selector, userInfo, repeats);
}

static id cgTimerWith(id self, SEL _cmd, NSTimeInterval interval, id target, SEL selector, id userInfo, BOOL repeats) {
    if (guards(target, selector, repeats)) {
        target = proxyFor(target, selector);
        selector = @selector(crashGuardFire:);
    }
    return ((id (*)(id, SEL, NSTimeInterval, id, SEL, id, BOOL))originalTimerWith)(self, _cmd, interval, target, selector, userInfo, repeats);
}

void CGInstallTimerGuard(void) {
    proxiesByTarget = CGSideTableCreate();
    Class meta = object_getClass((id)[NSTimer class]);
    originalScheduled = CGSwizzleOwn(meta, @selector(scheduledTimerWithTimeInterval:target:selector:userInfo:repeats:), (IMP)cgScheduled);
    originalTimerWith = CGSwizzleOwn(meta, @selector(timerWithTimeInterval:target:selector:userInfo:repeats:), (IMP)cgTimerWith);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
