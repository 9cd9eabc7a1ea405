// KVC (seed 002): unguarded, an undefined key, a nil key and nil for a scalar raise;
// guarded, reads answer nil and writes are ignored, each recorded with Foundation's text.
#import "CGTest.h"

@interface CGTAccount : NSObject {
    NSString *owner;
    NSInteger balance;
    CGTAccount *parent;
}
@end

@implementation CGTAccount
- (void)dealloc {
    [owner release];
    [parent release];
    [super dealloc];
}
@end

/// Answers a default for unknown keys itself: the guard must stay out.
@interface CGTLenientAccount : CGTAccount
@end
@implementation CGTLenientAccount
- (id)valueForUndefinedKey:(NSString *)key {
    (void)key;
    return @"default";
}
@end

CG_SCENARIO(kvcValueForUndefinedKey) { [[CGTAccount new] valueForKey:@"nickname"]; }
CG_SCENARIO(kvcSetValueForUndefinedKey) { [[CGTAccount new] setValue:@"x" forKey:@"nickname"]; }
CG_SCENARIO(kvcSetNilForScalar) { [[CGTAccount new] setValue:nil forKey:@"balance"]; }
CG_SCENARIO(kvcNilKey) { [[CGTAccount new] setValue:@"x" forKey:nil]; }

CG_TEST(kvcUnguardedCallsRaise) {
    CG_EXPECT_UNCAUGHT(kvcValueForUndefinedKey, @"NSUnknownKeyException",
                       CG_PLATFORM(@"this class is not key value coding-compliant for the key nickname", @"Unable to find value for key \"nickname\""));
    CG_EXPECT_UNCAUGHT(kvcSetValueForUndefinedKey, @"NSUnknownKeyException",
                       CG_PLATFORM(@"this class is not key value coding-compliant for the key nickname", @"Unable to set value for undefined key"));
    CG_EXPECT_UNCAUGHT(kvcSetNilForScalar, @"NSInvalidArgumentException",
                       CG_PLATFORM(@"could not set nil as the value for the key balance", @"Given nil value to set for key \"balance\""));
    CG_EXPECT_UNCAUGHT(kvcNilKey, CG_PLATFORM(@"NSInvalidArgumentException", @"NSUnknownKeyException"),
                       CG_PLATFORM(@"attempt to set a value for a nil key", @"Unable to set value for undefined key"));
}

CG_TEST(kvcUndefinedKeysAnswerNil) {
    CGTAccount *account = [[CGTAccount new] autorelease];
    CG_CHECK([account valueForKey:@"nickname"] == nil);
    CG_EXPECT_REPORT(@"kvc", ([NSString stringWithFormat:@"[%@ valueForUndefinedKey:]: this class is not key value coding-compliant for the key nickname.",
                                                         CGDescribe(account)]));
    [account setValue:@"Ann" forKey:@"nickname"];
    CG_EXPECT_REPORT(@"kvc", ([NSString stringWithFormat:@"[%@ setValue:forUndefinedKey:]: this class is not key value coding-compliant for the key nickname.",
                                                         CGDescribe(account)]));
    // Defined keys are untouched.
    [account setValue:@"Ann" forKey:@"owner"];
    CG_EQUAL_OBJECTS([account valueForKey:@"owner"], @"Ann");
    [account setValue:[NSNumber numberWithInt:5] forKey:@"balance"];
    CG_EQUAL_OBJECTS([account valueForKey:@"balance"], [NSNumber numberWithInt:5]);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(kvcNilValuesAndNilKeysAreIgnored) {
    CGTAccount *account = [[CGTAccount new] autorelease];
    [account setValue:[NSNumber numberWithInt:5] forKey:@"balance"];
    [account setValue:nil forKey:@"balance"];
    CG_EXPECT_REPORT(@"kvc", ([NSString stringWithFormat:@"[%@ setNilValueForKey]: could not set nil as the value for the key balance.", CGDescribe(account)]));
    CG_EQUAL_OBJECTS([account valueForKey:@"balance"], [NSNumber numberWithInt:5]);
    // nil for an object property is an ordinary write.
    [account setValue:nil forKey:@"owner"];
    CG_EXPECT_NO_REPORT();
    [account setValue:@"x" forKey:nil];
    CG_EXPECT_REPORT(@"kvc", @"-[CGTAccount setValue:forKey:]: attempt to set a value for a nil key");
    CG_CHECK([account valueForKey:nil] == nil);
    CG_EXPECT_REPORT(@"kvc", @"-[CGTAccount valueForKey:]: attempt to retrieve a value for a nil key");
    CG_CHECK([account valueForKeyPath:nil] == nil);
    CG_EXPECT_REPORT(@"kvc", @"-[CGTAccount valueForKeyPath:]: attempt to retrieve a value for a nil key");
    [account setValue:@"x" forKeyPath:nil];
    CG_EXPECT_REPORT(@"kvc", @"-[CGTAccount setValue:forKeyPath:]: attempt to set a value for a nil key");
}

CG_TEST(kvcKeyPaths) {
    CGTAccount *account = [[CGTAccount new] autorelease];
    // Through a nil step: nil, no error (a message to nil), nothing recorded.
    CG_CHECK([account valueForKeyPath:@"parent.owner"] == nil);
    [account setValue:@"Ann" forKeyPath:@"parent.owner"];
    CG_EXPECT_NO_REPORT();
    // Through an undefined step: that step is caught, the rest of the path answers nil.
    CG_CHECK([account valueForKeyPath:@"manager.owner"] == nil);
    CG_EXPECT_REPORT(@"kvc", ([NSString stringWithFormat:@"[%@ valueForUndefinedKey:]: this class is not key value coding-compliant for the key manager.",
                                                         CGDescribe(account)]));
    [account setValue:@"Ann" forKeyPath:@"manager.owner"];
    CG_EXPECT_REPORT(@"kvc", ([NSString stringWithFormat:@"[%@ valueForUndefinedKey:]: this class is not key value coding-compliant for the key manager.",
                                                         CGDescribe(account)]));
    // Through a real object: works.
    CGTAccount *parent = [[CGTAccount new] autorelease];
    [account setValue:parent forKey:@"parent"];
    [account setValue:@"Bo" forKeyPath:@"parent.owner"];
    CG_EQUAL_OBJECTS([account valueForKeyPath:@"parent.owner"], @"Bo");
    CG_EXPECT_NO_REPORT();
}

CG_TEST(kvcOverridesAreKept) {
    CGTLenientAccount *account = [[CGTLenientAccount new] autorelease];
    CG_EQUAL_OBJECTS([account valueForKey:@"nickname"], @"default");
    CG_EXPECT_NO_REPORT();
    // Switched off, the original raises.
    crashguard_objc_set_enabled(CRASHGUARD_OBJC_ALL & ~CRASHGUARD_OBJC_KVC);
    NSString *raised = nil;
    @try {
        [[[CGTAccount new] autorelease] valueForKey:@"nickname"];
    } @catch (NSException *exception) {
        raised = [exception name];
    }
    CG_EQUAL_OBJECTS(raised, NSUndefinedKeyException);
    CG_EXPECT_NO_REPORT();
}
