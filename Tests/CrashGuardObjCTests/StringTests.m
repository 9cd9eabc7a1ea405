// Strings: unguarded, out-of-range reads and nil appends raise; guarded, reads answer the
// part within bounds, edits are ignored or clamped, each recorded with the runtime's text.
#import "CGTest.h"

/// A heap string (not a literal, not a tagged pointer on Apple platforms).
static NSString *heapString(NSString *text) { return [NSString stringWithFormat:@"%@%@", text, @""]; }

CG_SCENARIO(substringFromIndexOutOfRange) { [heapString(@"abcdefghijklmnopqrstuvwxyz") substringFromIndex:40]; }
CG_SCENARIO(appendNil) { [[NSMutableString stringWithString:@"abc"] appendString:nil]; }

CG_TEST(stringUnguardedCallsRaise) {
    CG_EXPECT_UNCAUGHT(substringFromIndexOutOfRange, @"NSRangeException",
                       CG_PLATFORM(@"-[__NSCFString substringFromIndex:]: Index 40 out of bounds; string length 26",
                                   @"in substringWithRange:, range { 40, 18446744073709551602 } extends beyond size (26)"));
    if (CG_APPLE) {
        CG_EXPECT_UNCAUGHT(appendNil, @"NSInvalidArgumentException", @"-[__NSCFString appendString:]: nil argument");
    } else {
        CG_EXPECT_CLEAN(appendNil);  // GNUstep appends nothing
    }
}

CG_TEST(stringReadsAreClamped) {
    NSString *text = heapString(@"abcdefghijklmnopqrstuvwxyz");
    NSString *cls = CG_PLATFORM(@"__NSCFString", @"GSCInlineString");
    CG_EQUAL_OBJECTS([text substringFromIndex:40], @"");
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ substringFromIndex:]: Index 40 out of bounds; string length 26", cls]));
    CG_EQUAL_OBJECTS([text substringToIndex:30], text);
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ substringToIndex:]: Index 30 out of bounds; string length 26", cls]));
    CG_EQUAL_OBJECTS([text substringWithRange:NSMakeRange(24, 10)], @"yz");
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ substringWithRange:]: Range {24, 10} out of bounds; string length 26", cls]));
    CG_CHECK([text characterAtIndex:26] == 0);
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ characterAtIndex:]: Index 26 out of bounds; string length 26", cls]));
    CG_EQUAL_OBJECTS([text substringWithRange:NSMakeRange(0, 3)], @"abc");
    CG_EXPECT_NO_REPORT();
    // Literals are a class of their own.
    CG_EQUAL_OBJECTS([@"abc" substringFromIndex:9], @"");
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ substringFromIndex:]: Index 9 out of bounds; string length 3",
                                                            CG_PLATFORM(@"__NSCFConstantString", @"NSConstantString")]));
}

CG_TEST(mutableStringBadEditsAreIgnored) {
    NSMutableString *text = [NSMutableString stringWithString:@"abc"];
    NSString *cls = CG_PLATFORM(@"__NSCFString", @"GSMutableString");
    [text appendString:nil];
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ appendString:]: nil argument", cls]));
    [text insertString:@"x" atIndex:9];
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ insertString:atIndex:]: Range or index out of bounds (index 9, string length 3)", cls]));
    CG_EQUAL_OBJECTS(text, @"abc");
    [text deleteCharactersInRange:NSMakeRange(2, 5)];
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ deleteCharactersInRange:]: Range {2, 5} out of bounds; string length 3", cls]));
    CG_EQUAL_OBJECTS(text, @"ab");
}
