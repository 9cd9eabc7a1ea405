// Notifications, timers and zombies: the guards that outlive an object's -dealloc.
#import "CGTest.h"
#include <signal.h>

@interface CGTScreen : NSObject {
@public
    NSInteger pings;
}
- (void)ping:(NSNotification *)note;
- (void)tick:(NSTimer *)timer;
@end

static NSInteger deallocated;

@implementation CGTScreen
- (void)ping:(NSNotification *)note {
    (void)note;
    pings++;
}
- (void)tick:(NSTimer *)timer {
    (void)timer;
    pings++;
}
- (void)dealloc {
    deallocated++;
    [super dealloc];
}
@end

@interface CGTController : NSObject {
    char padding[200];
}
- (NSInteger)refresh;
@end
@implementation CGTController
- (NSInteger)refresh { return 42; }
@end

/// A subclass of a protected class, never listed itself.
@interface CGTDetailController : CGTController
@end
@implementation CGTDetailController
@end

// ---- Notification ----

CG_SCENARIO(notificationAfterObserverFreed) {
    CGTScreen *screen = [CGTScreen new];
    [[NSNotificationCenter defaultCenter] addObserver:screen selector:@selector(ping:) name:@"CGTPing" object:nil];
    [screen release];
    [[NSNotificationCenter defaultCenter] postNotificationName:@"CGTPing" object:nil];
}

CG_TEST(notificationUnguarded) {
    // GNUstep (and iOS before 9) keeps the freed observer: the post messages freed memory.
    // Current Apple platforms forget it themselves.
    if (CG_APPLE) {
        CG_EXPECT_CLEAN(notificationAfterObserverFreed);
    } else {
        CG_EXPECT_SIGNAL(notificationAfterObserverFreed, SIGSEGV);
    }
}

CG_TEST(notificationObserversAreRemovedAtDealloc) {
    NSNotificationCenter *center = [NSNotificationCenter defaultCenter];
    NSNotificationCenter *other = [[NSNotificationCenter new] autorelease];
    CGTScreen *stays = [[CGTScreen new] autorelease];
    CGTScreen *gone = [CGTScreen new];
    [center addObserver:stays selector:@selector(ping:) name:@"CGTPing" object:nil];
    [center addObserver:gone selector:@selector(ping:) name:@"CGTPing" object:nil];
    [other addObserver:gone selector:@selector(ping:) name:@"CGTPing" object:nil];
    [center postNotificationName:@"CGTPing" object:nil];
    CG_CHECK(gone->pings == 1 && stays->pings == 1);
    NSInteger before = deallocated;
    [gone release];
    CG_CHECK(deallocated == before + 1);
    [center postNotificationName:@"CGTPing" object:nil];  // would message freed memory
    [other postNotificationName:@"CGTPing" object:nil];
    CG_CHECK(stays->pings == 2);
    [center removeObserver:stays];
    CG_EXPECT_NO_REPORT();
}

// ---- Timer ----

static void runLoopFor(NSTimeInterval seconds) {
    [[NSRunLoop currentRunLoop] runUntilDate:[NSDate dateWithTimeIntervalSinceNow:seconds]];
}

CG_TEST(timerUnguardedRetainsItsTarget) {
    crashguard_objc_set_enabled(CRASHGUARD_OBJC_ALL & ~CRASHGUARD_OBJC_TIMER);
    CGTScreen *screen = [CGTScreen new];
    NSTimer *timer = [NSTimer scheduledTimerWithTimeInterval:0.01 target:screen selector:@selector(tick:) userInfo:nil repeats:YES];
    NSInteger before = deallocated;
    [screen release];  // the owner lets go, but forgot -invalidate
    runLoopFor(0.05);
    CG_CHECK(deallocated == before, @"the timer should keep its target alive (leak)");
    CG_CHECK(screen->pings > 0);
    [timer invalidate];
    CG_CHECK(deallocated == before + 1);
}

CG_TEST(timerTargetIsHeldWeakly) {
    CGTScreen *screen = [CGTScreen new];
    NSTimer *timer = [NSTimer scheduledTimerWithTimeInterval:0.01 target:screen selector:@selector(tick:) userInfo:nil repeats:YES];
    runLoopFor(0.05);
    CG_CHECK(screen->pings > 0, @"fires through the proxy");
    CG_EXPECT_NO_REPORT();
    NSInteger before = deallocated;
    [timer retain];
    [screen release];
    CG_CHECK(deallocated == before + 1, @"the target is freed although the timer runs");
    runLoopFor(0.05);
    CG_CHECK(![timer isValid], @"the first fire after the target is gone invalidates the timer");
    CG_EXPECT_REPORT(@"timer", ([NSString stringWithFormat:@"Timer <%s %p> firing -[CGTScreen tick:] was not invalidated before its target was deallocated",
                                                          class_getName(object_getClass(timer)), (void *)timer]));
    [timer release];
    // Non-repeating timers are left alone.
    CGTScreen *once = [[CGTScreen new] autorelease];
    [NSTimer scheduledTimerWithTimeInterval:0.01 target:once selector:@selector(tick:) userInfo:nil repeats:NO];
    runLoopFor(0.05);
    CG_CHECK(once->pings == 1);
    CG_EXPECT_NO_REPORT();
}

// ---- Zombie ----

CG_SCENARIO(messageToFreedObject) {
    CGTController *controller = [CGTController new];
    [controller release];
    [controller refresh];
}

CG_TEST(zombieUnguarded) {
    // GNUstep poisons a freed object's class pointer: the message faults at once. On Apple
    // platforms the outcome depends on what reused the memory (no exit expectation there).
    if (!CG_APPLE) CG_EXPECT_SIGNAL(messageToFreedObject, SIGSEGV);
}

CG_TEST(zombieAnswersZeroAndRecords) {
    crashguard_objc_zombie_protect_class("CGTController");
    CGTController *controller = [CGTController new];
    CG_CHECK([controller refresh] == 42);
    [controller release];
    CG_CHECK([controller refresh] == 0);
    CG_EXPECT_REPORT(@"wildPointer", ([NSString stringWithFormat:@"*** -[CGTController refresh]: message sent to deallocated instance %p", (void *)controller]));
    [controller release];  // an over-release is caught as well
    CG_EXPECT_REPORT(@"wildPointer", ([NSString stringWithFormat:@"*** -[CGTController release]: message sent to deallocated instance %p", (void *)controller]));
    crashguard_objc_zombie_drain();
    // Classes not listed are freed as usual.
    NSInteger before = deallocated;
    [[CGTScreen new] release];
    CG_CHECK(deallocated == before + 1);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(zombieProtectsSubclassesOfListedClasses) {
    crashguard_objc_zombie_protect_class("CGTController");
    CGTDetailController *detail = [CGTDetailController new];
    [detail release];
    CG_CHECK(strcmp(class_getName(object_getClass(detail)), "CrashGuardZombie") == 0);
    CG_CHECK([detail refresh] == 0);
    // The reason names the instance's own class, not the listed one.
    CG_EXPECT_REPORT(@"wildPointer", ([NSString stringWithFormat:@"*** -[CGTDetailController refresh]: message sent to deallocated instance %p", (void *)detail]));
    crashguard_objc_zombie_drain();
    // Classes outside the listed hierarchy are freed as usual.
    NSInteger before = deallocated;
    [[CGTScreen new] release];
    CG_CHECK(deallocated == before + 1);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(zombieQuarantineIsBounded) {
    crashguard_objc_zombie_protect_class("CGTController");
    size_t size = class_getInstanceSize([CGTController class]);
    crashguard_objc_zombie_set_quarantine_bytes(size * 4);
    CGTController *controllers[6];
    for (int i = 0; i < 6; i++) controllers[i] = [CGTController new];
    for (int i = 0; i < 6; i++) [controllers[i] release];
    // The four newest are still zombies; the two oldest were freed for real.
    for (int i = 2; i < 6; i++) CG_CHECK(strcmp(class_getName(object_getClass(controllers[i])), "CrashGuardZombie") == 0, @"%d", i);
    [controllers[5] refresh];
    CG_EXPECT_REPORT(@"wildPointer", ([NSString stringWithFormat:@"*** -[CGTController refresh]: message sent to deallocated instance %p", (void *)controllers[5]]));
    crashguard_objc_zombie_drain();
    crashguard_objc_zombie_set_quarantine_bytes(0);
}
