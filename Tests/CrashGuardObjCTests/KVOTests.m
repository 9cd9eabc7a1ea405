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
