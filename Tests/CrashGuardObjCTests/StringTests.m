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

// ---- NSMutableString's primitive and attributed strings ----

CG_SCENARIO(replaceOutOfRange) { [[NSMutableString stringWithString:@"abc"] replaceCharactersInRange:NSMakeRange(2, 5) withString:@"x"]; }
CG_SCENARIO(attributedNil) { [[NSAttributedString alloc] initWithString:nil]; }
CG_SCENARIO(attributedSubstringOutOfRange) {
    [[[NSAttributedString alloc] initWithString:@"hello"] attributedSubstringFromRange:NSMakeRange(3, 5)];
}
CG_SCENARIO(attributeOutOfRange) { [[[NSAttributedString alloc] initWithString:@"hello"] attribute:@"k" atIndex:9 effectiveRange:NULL]; }
CG_SCENARIO(mutableAttributedDeleteOutOfRange) {
    [[[NSMutableAttributedString alloc] initWithString:@"hello"] deleteCharactersInRange:NSMakeRange(3, 5)];
}

CG_TEST(attributedStringUnguardedCallsRaise) {
    CG_EXPECT_UNCAUGHT(replaceOutOfRange, @"NSRangeException",
                       CG_PLATFORM(@"Range {2, 5} out of bounds", @"in replaceCharactersInRange:withString:, range { 2, 5 } extends beyond size (3)"));
    CG_EXPECT_UNCAUGHT(attributedNil, @"NSInvalidArgumentException", CG_PLATFORM(@"nil value", @"aString object passed to"));
    CG_EXPECT_UNCAUGHT(attributedSubstringOutOfRange, @"NSRangeException",
                       CG_PLATFORM(@"Out of bounds", @"in attributedSubstringFromRange:, range { 3, 5 } extends beyond size (5)"));
    CG_EXPECT_UNCAUGHT(attributeOutOfRange, @"NSRangeException", CG_PLATFORM(@"Out of bounds", @"index is out of range"));
    CG_EXPECT_UNCAUGHT(mutableAttributedDeleteOutOfRange, @"NSRangeException",
                       CG_PLATFORM(@"Out of bounds", @"range { 3, 5 } extends beyond size (5)"));
}

CG_TEST(mutableStringReplaceIsClamped) {
    NSMutableString *text = [NSMutableString stringWithString:@"abcde"];
    [text replaceCharactersInRange:NSMakeRange(3, 9) withString:@"XY"];
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ replaceCharactersInRange:withString:]: Range {3, 9} out of bounds; string length 5",
                                                            CG_PLATFORM(@"__NSCFString", @"GSMutableString")]));
    CG_EQUAL_OBJECTS(text, @"abcXY");
    [text replaceCharactersInRange:NSMakeRange(0, 1) withString:@"A"];
    [text deleteCharactersInRange:NSMakeRange(4, 1)];
    CG_EQUAL_OBJECTS(text, @"AbcX");
    CG_EXPECT_NO_REPORT();
}

CG_TEST(attributedStringsAreClamped) {
    NSString *cls = CG_PLATFORM(@"NSConcreteAttributedString", @"GSAttributedString");
    NSAttributedString *empty = [[[NSAttributedString alloc] initWithString:nil] autorelease];
    CG_EQUAL_OBJECTS([empty string], @"");
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ initWithString:]: nil argument", cls]));
    NSAttributedString *hello = [[[NSAttributedString alloc] initWithString:@"hello"] autorelease];
    CG_EQUAL_OBJECTS([[hello attributedSubstringFromRange:NSMakeRange(3, 5)] string], @"lo");
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ attributedSubstringFromRange:]: Range {3, 5} out of bounds; string length 5", cls]));
    NSRange effective = NSMakeRange(1, 1);
    CG_CHECK([hello attribute:@"k" atIndex:9 effectiveRange:&effective] == nil);
    CG_CHECK(effective.location == NSNotFound && effective.length == 0);
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ attribute:atIndex:effectiveRange:]: Index 9 out of bounds; string length 5", cls]));
    CG_CHECK([hello attributesAtIndex:5 effectiveRange:NULL] == nil);
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ attributesAtIndex:effectiveRange:]: Index 5 out of bounds; string length 5", cls]));
    CG_CHECK([hello attribute:@"k" atIndex:4 effectiveRange:NULL] == nil);  // in range, no such attribute
    CG_EXPECT_NO_REPORT();

    NSMutableAttributedString *text = [[[NSMutableAttributedString alloc] initWithString:@"hello"] autorelease];
    NSString *mcls = CG_PLATFORM(@"NSConcreteMutableAttributedString", @"GSMutableAttributedString");
    [text replaceCharactersInRange:NSMakeRange(3, 5) withString:@"p!"];
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ replaceCharactersInRange:withString:]: Range {3, 5} out of bounds; string length 5", mcls]));
    CG_EQUAL_OBJECTS([text string], @"help!");
    [text deleteCharactersInRange:NSMakeRange(4, 3)];
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ deleteCharactersInRange:]: Range {4, 3} out of bounds; string length 5", mcls]));
    CG_EQUAL_OBJECTS([text string], @"help");
    NSMutableAttributedString *fromNil = [[[NSMutableAttributedString alloc] initWithString:nil] autorelease];
    CG_EQUAL_OBJECTS([fromNil string], @"");
    CG_EXPECT_REPORT(@"string", ([NSString stringWithFormat:@"-[%@ initWithString:]: nil argument", mcls]));
}
