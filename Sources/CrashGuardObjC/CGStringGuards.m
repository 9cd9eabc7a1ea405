// Strings: the NSString / NSMutableString and NSAttributedString / NSMutableAttributedString
// class clusters (__NSCFString, NSTaggedPointerString, NSConcreteAttributedString ... on
// Apple platforms; GSCInlineString, GSUnicodeString, NSConstantString, GSMutableString,
// GSAttributedString ... on GNUstep). Out-of-range reads answer the part within bounds
// (the seed's clamping), out-of-range edits are clamped or ignored, nil arguments ignored
// (an attributed string made from nil is made from "").
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

CG_GUARD_CODE_BEGIN

static void reportString(id self, SEL cmd, NSString *action, NSString *format, ...) NS_FORMAT_FUNCTION(4, 5);

static void reportString(id self, SEL cmd, NSString *action, NSString *format, ...) {
    va_list args;
    va_start(args, format);
    NSString *detail = CG_AUTORELEASE([[NSString alloc] initWithFormat:format arguments:args]);
    va_end(args);
    NSString *site = [NSString stringWithFormat:@"-[%@ %s]", CGClassName(self), sel_getName(cmd)];
    NSString *reason = [NSString stringWithFormat:@"%@: %@", site, detail];
    BOOL isNil = [detail hasPrefix:@"nil"];
    CGReport(CRASHGUARD_OBJC_STRING, "string", site, action, reason,
             isNil ? NSInvalidArgumentException : NSRangeException);
}

/// `range` of the string, clamped (and recorded, `action` saying what the guard does)
/// when it runs past the end.
static NSRange checkedRange(id self, SEL cmd, NSRange range, NSString *action) {
    NSUInteger length = [self length];
    if (CGRangeFits(range, length)) return range;
    reportString(self, cmd, action, @"Range {%lu, %lu} out of bounds; string length %lu", (unsigned long)range.location,
                 (unsigned long)range.length, (unsigned long)length);
    return CGClampRange(range, length);
}

static id cgSubstringFromIndex(id self, SEL _cmd, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING)) {
        NSUInteger length = [self length];
        if (index > length) {
            reportString(self, _cmd, @"returned an empty string", @"Index %lu out of bounds; string length %lu",
                         (unsigned long)index, (unsigned long)length);
            index = length;
        }
    }
    return ((id (*)(id, SEL, NSUInteger))original)(self, _cmd, index);
}

static id cgSubstringToIndex(id self, SEL _cmd, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING)) {
        NSUInteger length = [self length];
        if (index > length) {
            reportString(self, _cmd, @"returned the whole string", @"Index %lu out of bounds; string length %lu",
                         (unsigned long)index, (unsigned long)length);
            index = length;
        }
    }
    return ((id (*)(id, SEL, NSUInteger))original)(self, _cmd, index);
}

static id cgSubstringWithRange(id self, SEL _cmd, NSRange range) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING)) range = checkedRange(self, _cmd, range, @"returned the part within bounds");
    return ((id (*)(id, SEL, NSRange))original)(self, _cmd, range);
}

static unichar cgCharacterAtIndex(id self, SEL _cmd, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING)) {
        NSUInteger length = [self length];
        if (index >= length) {
            reportString(self, _cmd, @"returned 0", @"Index %lu out of bounds; string length %lu",
                         (unsigned long)index, (unsigned long)length);
            return 0;
        }
    }
    return ((unichar (*)(id, SEL, NSUInteger))original)(self, _cmd, index);
}

static void cgAppendString(id self, SEL _cmd, id string) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING) && string == nil) {
        reportString(self, _cmd, @"ignored", @"nil argument");
        return;
    }
    ((void (*)(id, SEL, id))original)(self, _cmd, string);
}

static void cgInsertStringAtIndex(id self, SEL _cmd, id string, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING)) {
        if (string == nil) {
            reportString(self, _cmd, @"ignored", @"nil argument");
            return;
        }
        NSUInteger length = [self length];
        if (index > length) {
            reportString(self, _cmd, @"ignored", @"Range or index out of bounds (index %lu, string length %lu)",
                         (unsigned long)index, (unsigned long)length);
            return;
        }
    }
    ((void (*)(id, SEL, id, NSUInteger))original)(self, _cmd, string, index);
}

static void cgDeleteCharactersInRange(id self, SEL _cmd, NSRange range) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING)) range = checkedRange(self, _cmd, range, @"deleted the part within bounds");
    ((void (*)(id, SEL, NSRange))original)(self, _cmd, range);
}

// -replaceCharactersInRange:withString: is the primitive of NSMutableString and of
// NSMutableAttributedString (GNUstep's -deleteCharactersInRange: calls it with nil, which
// both runtimes' primitives take as "delete"): the range is clamped.
static void cgReplaceCharactersInRange(id self, SEL _cmd, NSRange range, id string) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING)) range = checkedRange(self, _cmd, range, @"replaced the part within bounds");
    ((void (*)(id, SEL, NSRange, id))original)(self, _cmd, range, string);
}

// ---- NSAttributedString ----

typedef id (*CGInitString)(CG_CONSUMED id, SEL, id) CG_RETURNS_RETAINED;
typedef id (*CGInitStringAttributes)(CG_CONSUMED id, SEL, id, id) CG_RETURNS_RETAINED;

static id cgAttributedInitWithString(CG_CONSUMED id self, SEL _cmd, id string) CG_RETURNS_RETAINED;
static id cgAttributedInitWithString(CG_CONSUMED id self, SEL _cmd, id string) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING) && string == nil) {
        reportString(self, _cmd, @"made an empty string", @"nil argument");
        string = @"";
    }
    return ((CGInitString)original)(self, _cmd, string);
}

static id cgAttributedInitWithStringAttributes(CG_CONSUMED id self, SEL _cmd, id string, id attributes) CG_RETURNS_RETAINED;
static id cgAttributedInitWithStringAttributes(CG_CONSUMED id self, SEL _cmd, id string, id attributes) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING) && string == nil) {
        reportString(self, _cmd, @"made an empty string", @"nil argument");
        string = @"";
    }
    return ((CGInitStringAttributes)original)(self, _cmd, string, attributes);
}

/// An attribute index at or past the end: YES when refused (recorded, `effectiveRange`
/// set to {NSNotFound, 0}).
static BOOL refusedAttributeIndex(id self, SEL cmd, NSUInteger index, NSRange *effectiveRange) {
    NSUInteger length = [self length];
    if (index < length) return NO;
    reportString(self, cmd, @"returned nil", @"Index %lu out of bounds; string length %lu", (unsigned long)index, (unsigned long)length);
    if (effectiveRange != NULL) *effectiveRange = NSMakeRange(NSNotFound, 0);
    return YES;
}

static id cgAttributeAtIndex(id self, SEL _cmd, id name, NSUInteger index, NSRange *effectiveRange) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING) && refusedAttributeIndex(self, _cmd, index, effectiveRange)) return nil;
    return ((id (*)(id, SEL, id, NSUInteger, NSRange *))original)(self, _cmd, name, index, effectiveRange);
}

static id cgAttributesAtIndex(id self, SEL _cmd, NSUInteger index, NSRange *effectiveRange) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_STRING) && refusedAttributeIndex(self, _cmd, index, effectiveRange)) return nil;
    return ((id (*)(id, SEL, NSUInteger, NSRange *))original)(self, _cmd, index, effectiveRange);
}

static void warmStrings(void) {
    NSString *s = [NSString stringWithFormat:@"%d", 12];
    [s length];
    [@"abc" length];
    NSMutableString *m = [NSMutableString stringWithCapacity:4];
    [m appendString:s];
    [m insertString:s atIndex:0];
    [m deleteCharactersInRange:NSMakeRange(0, 1)];
    NSMutableString *copied = CG_AUTORELEASE([s mutableCopy]);
    [copied appendString:s];
    [copied replaceCharactersInRange:NSMakeRange(0, 1) withString:s];
    NSAttributedString *attributed = CG_AUTORELEASE([[NSAttributedString alloc] initWithString:s]);
    [attributed length];
    NSMutableAttributedString *mutableAttributed = CG_AUTORELEASE([[NSMutableAttributedString alloc] initWithString:s]);
    [mutableAttributed replaceCharactersInRange:NSMakeRange(0, 1) withString:s];
    [mutableAttributed deleteCharactersInRange:NSMakeRange(0, 1)];
}

void CGInstallStringGuards(void) {
    warmStrings();
    Class string = [NSString class], mutableString = [NSMutableString class];
    Class attributed = [NSAttributedString class], mutableAttributed = [NSMutableAttributedString class];
    const CGClusterMethod methods[] = {
        {string, @selector(substringFromIndex:), (IMP)cgSubstringFromIndex},
        {string, @selector(substringToIndex:), (IMP)cgSubstringToIndex},
        {string, @selector(substringWithRange:), (IMP)cgSubstringWithRange},
        {string, @selector(characterAtIndex:), (IMP)cgCharacterAtIndex},
        {mutableString, @selector(appendString:), (IMP)cgAppendString},
        {mutableString, @selector(insertString:atIndex:), (IMP)cgInsertStringAtIndex},
        {mutableString, @selector(deleteCharactersInRange:), (IMP)cgDeleteCharactersInRange},
        {mutableString, @selector(replaceCharactersInRange:withString:), (IMP)cgReplaceCharactersInRange},
        {attributed, @selector(initWithString:), (IMP)cgAttributedInitWithString},
        {attributed, @selector(initWithString:attributes:), (IMP)cgAttributedInitWithStringAttributes},
        {attributed, @selector(attributedSubstringFromRange:), (IMP)cgSubstringWithRange},
        {attributed, @selector(attribute:atIndex:effectiveRange:), (IMP)cgAttributeAtIndex},
        {attributed, @selector(attributesAtIndex:effectiveRange:), (IMP)cgAttributesAtIndex},
        {mutableAttributed, @selector(replaceCharactersInRange:withString:), (IMP)cgReplaceCharactersInRange},
        {mutableAttributed, @selector(deleteCharactersInRange:), (IMP)cgDeleteCharactersInRange},
    };
    CGSwizzleClusterMethods(methods, sizeof methods / sizeof methods[0]);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
