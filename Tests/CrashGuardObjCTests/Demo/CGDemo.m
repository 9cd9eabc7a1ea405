// A C entry that trips guards the way app code would, for the Swift end-to-end test
// (Tests/CrashServerTests/ObjCGuardsEndToEndTests.swift), which loads this library,
// installs the guards with the SDK's callback and checks the reports reach the server.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

@interface CGDemoStudent : NSObject
@end
@implementation CGDemoStudent
@end

/// Trips `reads` out-of-bounds reads (indices 3, 4, ...) on a three-element array and
/// `selectors` unrecognized selectors on fresh objects; returns how many answered the
/// guards' defaults (nil / 0).
int crashguard_objc_demo_trip(int reads, int selectors) {
    NSAutoreleasePool *pool = [[NSAutoreleasePool alloc] init];
    int defaults = 0;
    NSArray *array = [NSArray arrayWithObjects:@"a", @"b", @"c", nil];
    for (int i = 0; i < reads; i++) {
        if ([array objectAtIndex:(NSUInteger)(3 + i)] == nil) defaults++;
    }
    for (int i = 0; i < selectors; i++) {
        id student = [[CGDemoStudent new] autorelease];
        if ([student performSelector:@selector(enroll)] == nil) defaults++;
    }
    [pool release];
    return defaults;
}

/// Reads index 7 of a three-element array without the guards: an uncaught NSRangeException
/// (for the exception-capture test, in a child process). Returns only if something caught it.
__attribute__((noinline)) int crashguard_objc_demo_uncaught_range(void) {
    NSAutoreleasePool *pool = [[NSAutoreleasePool alloc] init];
    NSArray *array = [NSArray arrayWithObjects:@"a", @"b", @"c", nil];
    id element = [array objectAtIndex:7];
    int found = element != nil;
    [pool release];
    return found;
}

#endif
