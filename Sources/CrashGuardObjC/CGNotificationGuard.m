// Notifications: an observer added with -addObserver:selector:name:object: and released
// without -removeObserver: leaves a dangling pointer in the center (GNUstep and iOS before
// 9 hold observers unretained: the next post messages freed memory). The guard remembers
// which centers each observer was added to and removes it from them in its -dealloc (the
// seed's mechanism), so a later post skips it. That is the guard working as designed, and
// it is not recorded (on current Apple platforms the center forgets such observers itself).
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

CG_GUARD_CODE_BEGIN

static CGSideTable *centersByObserver;  // observer address -> NSMutableArray of centers (retained)
static long observersTracked;           // atomic: fast path of -dealloc
static IMP originalAdd;

static void cgAddObserver(id self, SEL _cmd, id observer, SEL selector, NSString *name, id object) {
    if (CGEnabled(CRASHGUARD_OBJC_NOTIFICATION) && observer != nil) {
        NSMutableArray *centers = CGSideTableGet(centersByObserver, observer);
        if (centers == nil) {
            centers = [NSMutableArray arrayWithObject:self];
            CGSideTableSet(centersByObserver, observer, centers);
            __atomic_fetch_add(&observersTracked, 1, __ATOMIC_RELEASE);
        } else {
            @synchronized(centers) {
                if ([centers indexOfObjectIdenticalTo:self] == NSNotFound) [centers addObject:self];
            }
        }
    }
    ((void (*)(id, SEL, id, SEL, id, id))originalAdd)(self, _cmd, observer, selector, name, object);
}

void CGNotificationDeallocHook(CG_UNSAFE id object) {
    if (centersByObserver == NULL || __atomic_load_n(&observersTracked, __ATOMIC_ACQUIRE) == 0) return;
    NSMutableArray *centers = CGSideTableTake(centersByObserver, object);
    if (centers == nil) return;
    __atomic_fetch_sub(&observersTracked, 1, __ATOMIC_RELEASE);
    NSArray *snapshot;
    @synchronized(centers) {
        snapshot = CG_AUTORELEASE([centers copy]);
    }
    for (NSUInteger i = 0; i < [snapshot count]; i++) [[snapshot objectAtIndex:i] removeObserver:object];
}

void CGInstallNotificationGuard(void) {
    centersByObserver = CGSideTableCreate();
    [NSNotificationCenter defaultCenter];
    originalAdd = CGSwizzleOwn([NSNotificationCenter class], @selector(addObserver:selector:name:object:), (IMP)cgAddObserver);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
