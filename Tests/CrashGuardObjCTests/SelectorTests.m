// Unrecognized selectors and NSNull: unguarded, the message raises
// NSInvalidArgumentException; guarded, a stub (or for NSNull the first of "", 0, [], {}
// that answers) returns 0 / nil and the runtime's text is recorded.
#import "CGTest.h"

@interface CGTStudent : NSObject
@end
@implementation CGTStudent
@end

/// Forwards on its own: the guard must stay out.
@interface CGTForwarder : NSObject
@end
@implementation CGTForwarder
- (id)forwardingTargetForSelector:(SEL)sel {
    (void)sel;
    return @"forwarded";
}
@end

CG_SCENARIO(unrecognizedSelector) { [[CGTStudent new] performSelector:@selector(study)]; }
CG_SCENARIO(nullLength) { [(id)[NSNull null] length]; }

CG_TEST(selectorUnguardedCallsRaise) {
    CG_EXPECT_UNCAUGHT(unrecognizedSelector, @"NSInvalidArgumentException",
                       CG_PLATFORM(@"-[CGTStudent study]: unrecognized selector sent to instance", @"-[CGTStudent study]: unrecognized selector sent to instance"));
    CG_EXPECT_UNCAUGHT(nullLength, @"NSInvalidArgumentException",
                       CG_PLATFORM(@"-[NSNull length]: unrecognized selector sent to instance", @"-[NSNull length]"));
}

CG_TEST(unrecognizedSelectorAnswersZero) {
    CGTStudent *student = [[CGTStudent new] autorelease];
    CG_CHECK([student performSelector:@selector(study)] == nil);
    CG_EXPECT_REPORT(@"unrecognizedSelector", ([NSString stringWithFormat:@"-[CGTStudent study]: unrecognized selector sent to instance %p", (void *)student]));
    CG_CHECK([(id)student count] == 0);
    CG_EXPECT_REPORT(@"unrecognizedSelector", ([NSString stringWithFormat:@"-[CGTStudent count]: unrecognized selector sent to instance %p", (void *)student]));
    CG_CHECK([(id)student doubleValue] == 0.0);
    CG_EXPECT_REPORT(@"unrecognizedSelector", ([NSString stringWithFormat:@"-[CGTStudent doubleValue]: unrecognized selector sent to instance %p", (void *)student]));
    CG_CHECK([CGTStudent performSelector:@selector(register:) withObject:@"x"] == nil);
    CG_EXPECT_REPORT(@"unrecognizedSelector", ([NSString stringWithFormat:@"+[CGTStudent register:]: unrecognized selector sent to class %p", (void *)[CGTStudent class]]));
    // Known selectors are untouched.
    CG_CHECK([student isKindOfClass:[NSObject class]]);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(classesThatForwardThemselvesAreLeftAlone) {
    CGTForwarder *forwarder = [[CGTForwarder new] autorelease];
    CG_CHECK([(id)forwarder length] == 9);  // answered by @"forwarded"
    CG_EXPECT_NO_REPORT();
}

CG_TEST(nullForwardsToEmptyValues) {
    id null = [NSNull null];
    CG_CHECK([null length] == 0);
    CG_EXPECT_REPORT(@"null", ([NSString stringWithFormat:@"-[NSNull length]: unrecognized selector sent to instance %p", (void *)null]));
    CG_CHECK([null objectForKey:@"name"] == nil);
    CG_EXPECT_REPORT(@"null", ([NSString stringWithFormat:@"-[NSNull objectForKey:]: unrecognized selector sent to instance %p", (void *)null]));
    CG_CHECK([null count] == 0);
    CG_EXPECT_REPORT(@"null", ([NSString stringWithFormat:@"-[NSNull count]: unrecognized selector sent to instance %p", (void *)null]));
    CG_CHECK([null integerValue] == 0);
    CG_EXPECT_REPORT(@"null", ([NSString stringWithFormat:@"-[NSNull integerValue]: unrecognized selector sent to instance %p", (void *)null]));
    CG_EQUAL_OBJECTS([null lowercaseString], @"");
    CG_EXPECT_REPORT(@"null", ([NSString stringWithFormat:@"-[NSNull lowercaseString]: unrecognized selector sent to instance %p", (void *)null]));
    // With the null guard off, the message raises: NSNull is Foundation's, outside the
    // selector guard's scope.
    crashguard_objc_set_enabled(CRASHGUARD_OBJC_ALL & ~CRASHGUARD_OBJC_NULL);
    NSString *raised = nil;
    @try {
        [null count];
    } @catch (NSException *exception) {
        raised = [exception name];
    }
    CG_EQUAL_OBJECTS(raised, NSInvalidArgumentException);
    CG_EXPECT_NO_REPORT();
}

/// The name of the exception `[receiver performSelector:selector withObject:argument]`
/// raised, or nil.
static NSString *raisedBy(id receiver, SEL selector, id argument) {
    @try {
        [receiver performSelector:selector withObject:argument];
    } @catch (NSException *exception) {
        return [exception name];
    }
    return nil;
}

// The selector guard takes over for the app's classes only: by default those of the main
// executable (this test program) and their subclasses; Foundation's keep raising.
CG_TEST(selectorGuardIsLimitedToTheAppsClasses) {
    CG_CHECK(crashguard_objc_selector_guards_class("CGTStudent") == 1);
    CG_CHECK(crashguard_objc_selector_guards_class("NSObject") == 0);
    CG_CHECK(crashguard_objc_selector_guards_class("NSArray") == 0);
    CG_CHECK(crashguard_objc_selector_guards_class("NSNull") == 0);
    id object = [[NSObject new] autorelease];
    CG_EQUAL_OBJECTS(raisedBy(object, @selector(study), nil), NSInvalidArgumentException);
    CG_EQUAL_OBJECTS(raisedBy([NSObject class], @selector(register:), @"x"), NSInvalidArgumentException);
    CG_EXPECT_NO_REPORT();

    // A class made at run time lives in no image: guarded through a configured prefix.
    Class widget = objc_allocateClassPair([NSObject class], "CGTXWidget", 0);
    objc_registerClassPair(widget);
    id instance = [[widget new] autorelease];
    CG_CHECK(crashguard_objc_selector_guards_class("CGTXWidget") == 0);
    CG_EQUAL_OBJECTS(raisedBy(instance, @selector(spin), nil), NSInvalidArgumentException);
    const char *prefixes[] = {"CGTX"};
    crashguard_objc_selector_scope(prefixes, 1, NULL, 0);
    CG_CHECK(crashguard_objc_selector_guards_class("CGTXWidget") == 1);
    CG_CHECK([instance performSelector:@selector(spin)] == nil);
    CG_EXPECT_REPORT(@"unrecognizedSelector", ([NSString stringWithFormat:@"-[CGTXWidget spin]: unrecognized selector sent to instance %p", (void *)instance]));
    CG_CHECK(crashguard_objc_selector_guards_class("CGTStudent") == 1);  // the main image still counts
    CG_CHECK(crashguard_objc_selector_guards_class("NSObject") == 0);

    // Images named explicitly replace the main image.
    const char *images[] = {"libSomethingElse.so"};
    crashguard_objc_selector_scope(NULL, 0, images, 1);
    CG_CHECK(crashguard_objc_selector_guards_class("CGTStudent") == 0);
    const char *self[] = {"crashguard-objc-tests"};
    crashguard_objc_selector_scope(NULL, 0, self, 1);
    CG_CHECK(crashguard_objc_selector_guards_class("CGTStudent") == 1);
    crashguard_objc_selector_scope(NULL, 0, NULL, 0);
    CG_CHECK(crashguard_objc_selector_guards_class("CGTStudent") == 1);
    CG_CHECK(crashguard_objc_selector_guards_class("CGTXWidget") == 0);
}
