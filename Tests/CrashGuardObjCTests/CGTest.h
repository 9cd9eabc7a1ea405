// A small test harness for the Objective-C guards, for both runtimes (no XCTest on
// GNUstep): tests register with CG_TEST, checks count failures, and scenarios that must
// crash run in a child process (this executable re-run with --unguarded NAME).
#import <Foundation/Foundation.h>
#include <objc/runtime.h>
#include "CrashGuardObjC.h"

#if defined(__APPLE__)
#define CG_APPLE 1
#else
#define CG_APPLE 0
#endif

/// Picks the expectation for the runtime under test: Apple's beside GNUstep's.
#define CG_PLATFORM(apple, gnustep) (CG_APPLE ? (apple) : (gnustep))

typedef void (*CGTestFunction)(void);
void CGRegisterTest(const char *name, CGTestFunction function);
void CGRegisterScenario(const char *name, CGTestFunction function);

#define CG_TEST(name)                                                           \
    static void name(void);                                                     \
    __attribute__((constructor)) static void register_##name(void) { CGRegisterTest(#name, name); } \
    static void name(void)

/// A scenario runs unguarded in a child process (see CGExpectChild).
#define CG_SCENARIO(name)                                                       \
    static void scenario_##name(void);                                          \
    __attribute__((constructor)) static void register_scenario_##name(void) { CGRegisterScenario(#name, scenario_##name); } \
    static void scenario_##name(void)

void CGFail(const char *file, int line, NSString *message);

#define CG_CHECK(condition, ...)                                                                      \
    do {                                                                                              \
        if (!(condition)) CGFail(__FILE__, __LINE__, [NSString stringWithFormat:@"" __VA_ARGS__]);    \
    } while (0)

#define CG_EQUAL_OBJECTS(a, b)                                                                        \
    do {                                                                                              \
        id _a = (a), _b = (b);                                                                        \
        if (!((_a == nil && _b == nil) || [_a isEqual:_b]))                                           \
            CGFail(__FILE__, __LINE__, [NSString stringWithFormat:@"%s == %s: '%@' != '%@'", #a, #b, _a, _b]); \
    } while (0)

/// The reports recorded since the last CGResetReports(), as dictionaries with the keys
/// kind, reason, site, action, function, siteAddress, addresses (their count), frames.
NSArray *CGReports(void);
void CGResetReports(void);
/// Checks that exactly one report was recorded, with `kind` and `reason`, and resets.
void CGExpectOneReport(const char *file, int line, NSString *kind, NSString *reason);
#define CG_EXPECT_REPORT(kind, reason) CGExpectOneReport(__FILE__, __LINE__, kind, reason)
#define CG_EXPECT_NO_REPORT()                                                                         \
    do {                                                                                              \
        if ([CGReports() count] != 0) CGFail(__FILE__, __LINE__, [NSString stringWithFormat:@"unexpected reports %@", CGReports()]); \
        CGResetReports();                                                                             \
    } while (0)

/// How an unguarded scenario ended.
typedef struct {
    int exited;      // 1: exited with `status`; 0: killed by `signal`
    int status;
    int signal;
    NSString *output;  // stderr and stdout
} CGChildResult;

/// Runs scenario `name` in a child process without guards.
CGChildResult CGRunScenario(const char *name);
/// Checks the child raised an uncaught exception: abnormal end, `exceptionName` and
/// `reasonPart` in its output.
void CGExpectUncaughtException(const char *file, int line, const char *scenario, NSString *exceptionName, NSString *reasonPart);
#define CG_EXPECT_UNCAUGHT(scenario, name, reason) CGExpectUncaughtException(__FILE__, __LINE__, #scenario, name, reason)
/// Checks the child was killed by `signal`.
void CGExpectSignal(const char *file, int line, const char *scenario, int signal);
#define CG_EXPECT_SIGNAL(scenario, sig) CGExpectSignal(__FILE__, __LINE__, #scenario, sig)
/// Checks the child ended normally (the runtime tolerates the call).
void CGExpectClean(const char *file, int line, const char *scenario);
#define CG_EXPECT_CLEAN(scenario) CGExpectClean(__FILE__, __LINE__, #scenario)

/// The description a report uses for an object: "<Class 0x...>", with the class the app
/// knows (-class, not KVO's subclass).
NSString *CGDescribe(id object);
