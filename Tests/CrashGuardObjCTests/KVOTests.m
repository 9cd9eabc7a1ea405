// KVO, the failure modes of seed 004. Unguarded, Apple's runtime raises for an unmatched
// remove, a released observed object (before macOS 10.13 / iOS 11) and an unhandled change;
// GNUstep tolerates the first two silently and raises for the third. Guarded, each is
// caught and recorded, and observation keeps working.
#import "CGTest.h"

@interface CGTPerson : NSObject {
    NSString *name;
    NSInteger age;
}
- (void)setName:(NSString *)value;
- (NSString *)name;
- (void)setAge:(NSInteger)value;
- (NSInteger)age;
@end

@implementation CGTPerson
- (void)setName:(NSString *)value {
    [name release];
    name = [value copy];
}
- (NSString *)name { return name; }
- (void)setAge:(NSInteger)value { age = value; }
- (NSInteger)age { return age; }
- (void)dealloc {
    [name release];
    [super dealloc];
}
@end

@interface CGTWatcher : NSObject {
@public
    NSInteger changes;
    NSString *last;
    BOOL raises;
}
@end

@implementation CGTWatcher
- (void)observeValueForKeyPath:(NSString *)keyPath ofObject:(id)object change:(NSDictionary *)change context:(void *)context {
    (void)keyPath;
    (void)object;
    (void)context;
    changes++;
    [last release];
    last = [[change objectForKey:NSKeyValueChangeNewKey] retain];
    if (raises) [NSException raise:@"WatcherError" format:@"cannot show %@", last];
}
- (void)dealloc {
    [last release];
    [super dealloc];
}
@end

/// Observes without implementing -observeValueForKeyPath:... (seed 004's "unhandled callback").
@interface CGTLazyWatcher : NSObject
@end
@implementation CGTLazyWatcher
@end

CG_SCENARIO(kvoRemoveUnregistered) {
    [[CGTPerson new] removeObserver:[CGTWatcher new] forKeyPath:@"name"];
}
CG_SCENARIO(kvoUnhandledChange) {
    CGTPerson *person = [CGTPerson new];
    [person addObserver:[CGTLazyWatcher new] forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person setName:@"Ann"];
}
CG_SCENARIO(kvoObservedReleased) {
    CGTPerson *person = [CGTPerson new];
    [person addObserver:[CGTWatcher new] forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person release];
}

CG_TEST(kvoUnguarded) {
    if (CG_APPLE) {
        CG_EXPECT_UNCAUGHT(kvoRemoveUnregistered, @"NSRangeException", @"because it is not registered as an observer");
        CG_EXPECT_UNCAUGHT(kvoUnhandledChange, @"NSInternalInconsistencyException", @"message was received but not handled");
        CG_EXPECT_CLEAN(kvoObservedReleased);  // since macOS 10.13 / iOS 11 the registrations are dropped silently
    } else {
        CG_EXPECT_CLEAN(kvoRemoveUnregistered);  // GNUstep ignores it
        CG_EXPECT_UNCAUGHT(kvoUnhandledChange, @"NSInvalidArgumentException", @"-observeValueForKeyPath:ofObject:change:context: cannot be sent to CGTLazyWatcher");
        CG_EXPECT_CLEAN(kvoObservedReleased);
    }
}

CG_TEST(kvoObservationStillWorks) {
    CGTPerson *person = [[CGTPerson new] autorelease];
    CGTWatcher *one = [[CGTWatcher new] autorelease], *two = [[CGTWatcher new] autorelease];
    [person addObserver:one forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person addObserver:two forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person setName:@"Ann"];
    CG_CHECK(one->changes == 1 && two->changes == 1, @"%ld %ld", (long)one->changes, (long)two->changes);
    CG_EQUAL_OBJECTS(one->last, @"Ann");
    [person removeObserver:one forKeyPath:@"name"];
    [person setName:@"Bob"];
    CG_CHECK(one->changes == 1 && two->changes == 2);
    [person removeObserver:two forKeyPath:@"name"];
    [person setName:@"Cy"];
    CG_CHECK(two->changes == 2);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(kvoUnmatchedAndDoubleRemovesAreIgnored) {
    CGTPerson *person = [[CGTPerson new] autorelease];
    CGTWatcher *watcher = [[CGTWatcher new] autorelease];
    NSString *reason = [NSString stringWithFormat:@"Cannot remove an observer %@ for the key path \"name\" from %@ because it is not registered as an observer.",
                                                  CGDescribe(watcher), CGDescribe(person)];
    [person removeObserver:watcher forKeyPath:@"name"];
    CG_EXPECT_REPORT(@"kvo", reason);
    [person addObserver:watcher forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person removeObserver:watcher forKeyPath:@"name"];
    CG_EXPECT_NO_REPORT();
    [person removeObserver:watcher forKeyPath:@"name"];
    CG_EXPECT_REPORT(@"kvo", reason);
}

CG_TEST(kvoDoubleAddObservesOnce) {
    CGTPerson *person = [[CGTPerson new] autorelease];
    CGTWatcher *watcher = [[CGTWatcher new] autorelease];
    [person addObserver:watcher forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person addObserver:watcher forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    CG_EXPECT_REPORT(@"kvo", ([NSString stringWithFormat:@"Repeated additions of the observer %@ for the key path \"name\" to %@",
                                                         CGDescribe(watcher), CGDescribe(person)]));
    [person setName:@"Ann"];
    CG_CHECK(watcher->changes == 1, @"%ld", (long)watcher->changes);
    [person removeObserver:watcher forKeyPath:@"name"];
    CG_EXPECT_NO_REPORT();
}

CG_TEST(kvoObservedObjectReleasedDropsRegistrations) {
    CGTPerson *person = [CGTPerson new];
    CGTWatcher *watcher = [[CGTWatcher new] autorelease];
    [person addObserver:watcher forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person addObserver:watcher forKeyPath:@"age" options:NSKeyValueObservingOptionNew context:NULL];
    NSString *reason = [NSString stringWithFormat:
        @"An instance %p of class %s was deallocated while key value observers were still registered with it. Key paths: age, name",
        (void *)person, "CGTPerson"];
    [person release];
    CG_EXPECT_REPORT(@"kvo", reason);
    // A new object (possibly at the same address) starts clean.
    CGTPerson *next = [[CGTPerson new] autorelease];
    [next setName:@"x"];
    CG_CHECK(watcher->changes == 0);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(kvoUnhandledChangeAndRaisingObserver) {
    CGTPerson *person = [[CGTPerson new] autorelease];
    CGTLazyWatcher *lazy = [[CGTLazyWatcher new] autorelease];
    [person addObserver:lazy forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person setName:@"Ann"];
    CG_EXPECT_REPORT(@"kvo", ([NSString stringWithFormat:
        @"%@: An -observeValueForKeyPath:ofObject:change:context: message was received but not handled.\nKey path: name\nObserved object: %@",
        CGDescribe(lazy), CGDescribe(person)]));
    [person removeObserver:lazy forKeyPath:@"name"];

    CGTWatcher *raising = [[CGTWatcher new] autorelease];
    raising->raises = YES;
    [person addObserver:raising forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person setName:@"Bob"];
    CG_EXPECT_REPORT(@"kvo", ([NSString stringWithFormat:@"KVO exception in observer %@ for the key path \"name\" of %@: WatcherError: cannot show Bob",
                                                         CGDescribe(raising), CGDescribe(person)]));
    [person removeObserver:raising forKeyPath:@"name"];
    CG_EXPECT_NO_REPORT();
}

CG_TEST(kvoEmptyKeyPathIsRefused) {
    CGTPerson *person = [[CGTPerson new] autorelease];
    CGTWatcher *watcher = [[CGTWatcher new] autorelease];
    [person addObserver:watcher forKeyPath:@"" options:NSKeyValueObservingOptionNew context:NULL];
    CG_EXPECT_REPORT(@"kvo", ([NSString stringWithFormat:@"Cannot add an observer %@ for an empty key path to %@", CGDescribe(watcher), CGDescribe(person)]));
}

CG_TEST(kvoReleasedObserverIsDroppedSilently) {
    CGTPerson *person = [[CGTPerson new] autorelease];
    CGTWatcher *gone = [CGTWatcher new];
    CGTWatcher *stays = [[CGTWatcher new] autorelease];
    [person addObserver:gone forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [person addObserver:stays forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    [gone release];
    [person setName:@"Ann"];  // would message freed memory without the guard
    CG_CHECK(stays->changes == 1);
    [person removeObserver:stays forKeyPath:@"name"];
    CG_EXPECT_NO_REPORT();
}

/// Keeps every change it is told, in order.
@interface CGTChangeLog : NSObject {
@public
    NSMutableArray *changes;
}
@end

@implementation CGTChangeLog
- (id)init {
    if ((self = [super init])) changes = [NSMutableArray new];
    return self;
}
- (void)observeValueForKeyPath:(NSString *)keyPath ofObject:(id)object change:(NSDictionary *)change context:(void *)context {
    (void)keyPath;
    (void)object;
    (void)context;
    [changes addObject:[[change copy] autorelease]];  // GNUstep reuses one mutable dictionary
}
- (void)dealloc {
    [changes release];
    [super dealloc];
}
@end

// Each observer is registered with its own options: a later observer asking for .initial,
// .old and .prior gets them although the first one asked only for .new.
CG_TEST(kvoEachObserverKeepsItsOptions) {
    CGTPerson *person = [[CGTPerson new] autorelease];
    [person setName:@"Ann"];
    CGTChangeLog *plain = [[CGTChangeLog new] autorelease], *full = [[CGTChangeLog new] autorelease];
    [person addObserver:plain forKeyPath:@"name" options:NSKeyValueObservingOptionNew context:NULL];
    CG_CHECK([plain->changes count] == 0);
    NSKeyValueObservingOptions all = NSKeyValueObservingOptionNew | NSKeyValueObservingOptionOld |
                                     NSKeyValueObservingOptionInitial | NSKeyValueObservingOptionPrior;
    [person addObserver:full forKeyPath:@"name" options:all context:NULL];
    // .initial: told at once, with the current value.
    CG_CHECK([full->changes count] == 1, @"%@", full->changes);
    CG_EQUAL_OBJECTS([[full->changes lastObject] objectForKey:NSKeyValueChangeNewKey], @"Ann");
    [person setName:@"Bob"];
    // .prior: a notification before the change, then the change with .old and .new.
    CG_CHECK([full->changes count] == 3, @"%@", full->changes);
    if ([full->changes count] == 3) {
        NSDictionary *prior = [full->changes objectAtIndex:1], *change = [full->changes objectAtIndex:2];
        CG_EQUAL_OBJECTS([prior objectForKey:NSKeyValueChangeNotificationIsPriorKey], [NSNumber numberWithBool:YES]);
        CG_EQUAL_OBJECTS([change objectForKey:NSKeyValueChangeOldKey], @"Ann");
        CG_EQUAL_OBJECTS([change objectForKey:NSKeyValueChangeNewKey], @"Bob");
    }
    // The first observer still gets only the change itself: no initial, no prior one.
    CG_CHECK([plain->changes count] == 1, @"%@", plain->changes);
    CG_EQUAL_OBJECTS([[plain->changes lastObject] objectForKey:NSKeyValueChangeNewKey], @"Bob");
    [person removeObserver:plain forKeyPath:@"name"];
    [person removeObserver:full forKeyPath:@"name"];
    [person setName:@"Cy"];
    CG_CHECK([full->changes count] == 3 && [plain->changes count] == 1);
    CG_EXPECT_NO_REPORT();
}
