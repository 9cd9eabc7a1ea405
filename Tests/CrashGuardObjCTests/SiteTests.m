// A report's site is the app's call, found on the stack past the guards' own frames,
// Foundation and the Objective-C runtime: two calls of one guarded method from two
// places are two sites (two rate limits in the SDK), one place called twice is one site.
#import "CGTest.h"

@interface CGTSiteStudent : NSObject
@end
@implementation CGTSiteStudent
@end

static NSArray *pair(void) { return [NSArray arrayWithObjects:@"a", @"b", nil]; }

/// The value of `key` in each report, resetting them.
static NSArray *takeReports(NSString *key) {
    NSArray *reports = CGReports();
    CGResetReports();
    NSMutableArray *values = [NSMutableArray array];
    for (NSUInteger i = 0; i < [reports count]; i++) [values addObject:[[reports objectAtIndex:i] objectForKey:key]];
    return values;
}

/// Whether `address` lies in the `size` bytes after `function`'s start: the call was made
/// from that function.
static BOOL within(id address, void (*function)(void), uintptr_t size) {
    uintptr_t value = (uintptr_t)[address unsignedLongValue];
    return value > (uintptr_t)function && value < (uintptr_t)function + size;
}

CG_TEST(reportSiteIsTheAppsCallNotTheGuardedMethod) {
    NSArray *array = pair();
    [array objectAtIndex:5];  // first call site
    [array objectAtIndex:6];  // second call site
    for (int i = 0; i < 2; i++) [array objectAtIndex:7];  // one call site, twice
    NSArray *reports = CGReports();
    NSArray *sites = takeReports(@"site");
    CG_CHECK([sites count] == 4, @"%@", reports);
    if ([sites count] != 4) return;
    CG_CHECK(![[sites objectAtIndex:0] isEqual:[sites objectAtIndex:1]], @"%@", sites);
    CG_EQUAL_OBJECTS([sites objectAtIndex:2], [sites objectAtIndex:3]);
    CG_CHECK(![[sites objectAtIndex:1] isEqual:[sites objectAtIndex:2]], @"%@", sites);
    for (NSUInteger i = 0; i < 4; i++) {
        NSDictionary *report = [reports objectAtIndex:i];
        // Every report names the same guarded method as its function ...
        CG_EQUAL_OBJECTS([report objectForKey:@"function"], @"-[GSInlineArray objectAtIndex:]");
        // ... and its site is this test's own code, in this executable.
        CG_CHECK(within([report objectForKey:@"siteAddress"], reportSiteIsTheAppsCallNotTheGuardedMethod, 4096), @"%@", report);
        CG_CHECK([[report objectForKey:@"site"] hasPrefix:@"crashguard-objc-tests"], @"%@", report);
        CG_CHECK([[report objectForKey:@"addresses"] unsignedLongValue] > 2, @"%@", report);
    }
}

// Through Foundation and the runtime: -performSelector: (GNUstep Base) reaches the
// forwarding machinery (libobjc, GNUstep Base) and the selector guard; the site is still
// the caller here.
CG_TEST(reportSiteSkipsFoundationAndTheRuntime) {
    CGTSiteStudent *student = [[CGTSiteStudent new] autorelease];
    [student performSelector:@selector(enroll)];
    NSArray *reports = CGReports();
    CGResetReports();
    CG_CHECK([reports count] == 1, @"%@", reports);
    if ([reports count] != 1) return;
    NSDictionary *report = [reports objectAtIndex:0];
    CG_EQUAL_OBJECTS([report objectForKey:@"function"], @"-[CGTSiteStudent enroll]");
    CG_CHECK(within([report objectForKey:@"siteAddress"], reportSiteSkipsFoundationAndTheRuntime, 4096), @"%@", report);
}
