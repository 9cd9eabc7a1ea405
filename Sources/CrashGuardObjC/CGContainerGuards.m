// Containers: the NSArray / NSMutableArray / NSDictionary / NSMutableDictionary, NSSet /
// NSMutableSet, NSOrderedSet / NSMutableOrderedSet and NSData / NSMutableData class
// clusters, and NSCache. Every concrete class of a cluster that implements a guarded
// selector itself is swizzled (found with objc_getClassList: __NSArrayI, __NSArrayM,
// __NSDictionaryM, __NSSetM, __NSOrderedSetM, NSConcreteData ... on Apple platforms;
// GSInlineArray, GSMutableArray, GSDictionary, GSSet, GSMutableSet, GSOrderedSet,
// NSDataMalloc ... on GNUstep). A call that would raise answers the seed's default
// instead: nil for a read out of bounds, no change for a bad write, nil entries dropped
// from a literal, the part within bounds for a range.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

CG_GUARD_CODE_BEGIN


static void reportContainer(id self, SEL cmd, NSString *action, NSString *exception, NSString *format, ...)
    NS_FORMAT_FUNCTION(5, 6);

static void reportContainer(id self, SEL cmd, NSString *action, NSString *exception, NSString *format, ...) {
    va_list args;
    va_start(args, format);
    NSString *detail = CG_AUTORELEASE([[NSString alloc] initWithFormat:format arguments:args]);
    va_end(args);
    BOOL meta = class_isMetaClass(object_getClass(self));
    NSString *site = [NSString stringWithFormat:@"%c[%@ %s]", meta ? '+' : '-', CGClassName(self), sel_getName(cmd)];
    NSString *reason = [NSString stringWithFormat:@"%@: %@", site, detail];
    CGReport(CRASHGUARD_OBJC_CONTAINER, "container", site, action, reason, exception);
}

typedef id (*CGInitObjects)(CG_CONSUMED id, SEL, const CG_UNSAFE id *, NSUInteger) CG_RETURNS_RETAINED;
typedef id (*CGInitObjectsKeys)(CG_CONSUMED id, SEL, const CG_UNSAFE id *, const CG_UNSAFE id *, NSUInteger) CG_RETURNS_RETAINED;

static NSString *beyondBounds(NSUInteger index, NSUInteger count) {
    if (count == 0) return [NSString stringWithFormat:@"index %lu beyond bounds for empty array", (unsigned long)index];
    return [NSString stringWithFormat:@"index %lu beyond bounds [0 .. %lu]", (unsigned long)index, (unsigned long)(count - 1)];
}

// The checks of the mutating methods: YES when the write is refused (recorded, and the
// caller returns without calling the original). Always inlined: a recorded stack shows the
// guarded method's own function on top of reportContainer, as it did before they were shared.

/// A nil `value` (`what`: "object" or "key").
static inline __attribute__((always_inline)) BOOL refusedNil(id self, SEL cmd, id value, NSString *what) {
    if (value != nil) return NO;
    reportContainer(self, cmd, @"ignored", NSInvalidArgumentException, @"%@ cannot be nil", what);
    return YES;
}

/// An `index` at or past the array's count (past it where `appends`: an index equal to the
/// count adds at the end).
static inline __attribute__((always_inline)) BOOL refusedIndex(id self, SEL cmd, NSUInteger index, BOOL appends) {
    NSUInteger count = [self count];
    if (appends ? index <= count : index < count) return NO;
    reportContainer(self, cmd, @"ignored", NSRangeException, @"%@", beyondBounds(index, count));
    return YES;
}

// ---- NSArray ----

static id cgArrayObjectAtIndex(id self, SEL _cmd, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)) {
        NSUInteger count = [self count];
        if (index >= count) {
            reportContainer(self, _cmd, @"returned nil", NSRangeException, @"%@", beyondBounds(index, count));
            return nil;
        }
    }
    return ((id (*)(id, SEL, NSUInteger))original)(self, _cmd, index);
}

static NSArray *cgArraySubarrayWithRange(id self, SEL _cmd, NSRange range) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)) {
        NSUInteger count = [self count];
        if (range.location > count || range.length > count - range.location) {
            reportContainer(self, _cmd, @"returned the part within bounds", NSRangeException,
                            @"range {%lu, %lu} extends beyond bounds %@", (unsigned long)range.location,
                            (unsigned long)range.length,
                            count == 0 ? @"for empty array"
                                       : [NSString stringWithFormat:@"[0 .. %lu]", (unsigned long)(count - 1)]);
            NSUInteger location = MIN(range.location, count);
            range = NSMakeRange(location, MIN(range.length, count - location));
        }
    }
    return ((id (*)(id, SEL, NSRange))original)(self, _cmd, range);
}

// -initWithObjects:count: (behind +arrayWithObjects:count: and literals): nil objects dropped.
static id cgArrayInitWithObjectsCount(CG_CONSUMED id self, SEL _cmd, const CG_UNSAFE id *objects, NSUInteger count) CG_RETURNS_RETAINED;
static id cgArrayInitWithObjectsCount(CG_CONSUMED id self, SEL _cmd, const CG_UNSAFE id *objects, NSUInteger count) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && objects != NULL) {
        NSUInteger firstNil = NSNotFound;
        for (NSUInteger i = 0; i < count && firstNil == NSNotFound; i++) {
            if (objects[i] == nil) firstNil = i;
        }
        if (firstNil != NSNotFound) {
            CG_UNSAFE id *kept = (CG_UNSAFE id *)calloc(count ? count : 1, sizeof(id));
            NSUInteger n = 0;
            for (NSUInteger i = 0; i < count; i++) {
                if (objects[i] != nil) kept[n++] = objects[i];
            }
            reportContainer(self, _cmd, @"dropped nil objects", NSInvalidArgumentException,
                            @"attempt to insert nil object from objects[%lu]", (unsigned long)firstNil);
            id result = ((CGInitObjects)original)(self, _cmd, kept, n);
            free(kept);
            return result;
        }
    }
    return ((CGInitObjects)original)(self, _cmd, objects, count);
}

// ---- NSMutableArray ----

static void cgArrayInsertObjectAtIndex(id self, SEL _cmd, id object, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)) {
        if (refusedNil(self, _cmd, object, @"object")) return;
        // Foundation's own message here names the bounds [0 .. count], the insert positions.
        NSUInteger count = [self count];
        if (index > count) {
            reportContainer(self, _cmd, @"ignored", NSRangeException, @"%@",
                            count == 0 ? [NSString stringWithFormat:@"index %lu beyond bounds for empty array", (unsigned long)index]
                                       : [NSString stringWithFormat:@"index %lu beyond bounds [0 .. %lu]", (unsigned long)index, (unsigned long)count]);
            return;
        }
    }
    ((void (*)(id, SEL, id, NSUInteger))original)(self, _cmd, object, index);
}

static void cgArrayAddObject(id self, SEL _cmd, id object) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && refusedNil(self, _cmd, object, @"object")) return;
    ((void (*)(id, SEL, id))original)(self, _cmd, object);
}

static void cgArrayRemoveObjectAtIndex(id self, SEL _cmd, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && refusedIndex(self, _cmd, index, NO)) return;
    ((void (*)(id, SEL, NSUInteger))original)(self, _cmd, index);
}

// -replaceObjectAtIndex:withObject:.
static void cgArrayReplaceObjectAtIndex(id self, SEL _cmd, NSUInteger index, id object) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)
        && (refusedNil(self, _cmd, object, @"object") || refusedIndex(self, _cmd, index, NO)))
        return;
    ((void (*)(id, SEL, NSUInteger, id))original)(self, _cmd, index, object);
}

// -setObject:atIndexedSubscript: (object first; index == count appends).
static void cgArraySetObjectAtIndexedSubscript(id self, SEL _cmd, id object, NSUInteger index) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)
        && (refusedNil(self, _cmd, object, @"object") || refusedIndex(self, _cmd, index, YES)))
        return;
    ((void (*)(id, SEL, id, NSUInteger))original)(self, _cmd, object, index);
}

// ---- NSDictionary ----

// -initWithObjects:forKeys:count: (behind +dictionaryWithObjects:forKeys:count: and
// literals): pairs with a nil key or object are dropped.
static id cgDictionaryInitWithObjectsForKeysCount(CG_CONSUMED id self, SEL _cmd, const CG_UNSAFE id *objects,
                                                  const CG_UNSAFE id *keys, NSUInteger count) CG_RETURNS_RETAINED;
static id cgDictionaryInitWithObjectsForKeysCount(CG_CONSUMED id self, SEL _cmd, const CG_UNSAFE id *objects,
                                                  const CG_UNSAFE id *keys, NSUInteger count) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && objects != NULL && keys != NULL) {
        NSUInteger firstNil = NSNotFound;
        BOOL nilKey = NO;
        for (NSUInteger i = 0; i < count && firstNil == NSNotFound; i++) {
            if (objects[i] == nil || keys[i] == nil) {
                firstNil = i;
                nilKey = objects[i] != nil;
            }
        }
        if (firstNil != NSNotFound) {
            CG_UNSAFE id *keptObjects = (CG_UNSAFE id *)calloc(count ? count : 1, sizeof(id));
            CG_UNSAFE id *keptKeys = (CG_UNSAFE id *)calloc(count ? count : 1, sizeof(id));
            NSUInteger n = 0;
            for (NSUInteger i = 0; i < count; i++) {
                if (objects[i] != nil && keys[i] != nil) {
                    keptObjects[n] = objects[i];
                    keptKeys[n++] = keys[i];
                }
            }
            reportContainer(self, _cmd, @"dropped nil pairs", NSInvalidArgumentException,
                            @"attempt to insert nil %@ from %@[%lu]", nilKey ? @"key" : @"object",
                            nilKey ? @"keys" : @"objects", (unsigned long)firstNil);
            id result = ((CGInitObjectsKeys)original)(self, _cmd, keptObjects, keptKeys, n);
            free(keptObjects);
            free(keptKeys);
            return result;
        }
    }
    return ((CGInitObjectsKeys)original)(self, _cmd, objects, keys, count);
}

// ---- NSMutableDictionary ----

static void cgDictionarySetObjectForKey(id self, SEL _cmd, id object, id key) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)) {
        // setObject:forKeyedSubscript: with a nil object removes the key (documented), so
        // only a nil key is an error there.
        BOOL subscript = sel_isEqual(_cmd, @selector(setObject:forKeyedSubscript:));
        if (refusedNil(self, _cmd, key, @"key") || (!subscript && refusedNil(self, _cmd, object, @"object"))) return;
    }
    ((void (*)(id, SEL, id, id))original)(self, _cmd, object, key);
}

static void cgDictionaryRemoveObjectForKey(id self, SEL _cmd, id key) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && refusedNil(self, _cmd, key, @"key")) return;
    ((void (*)(id, SEL, id))original)(self, _cmd, key);
}

// ---- NSMutableSet ----

static void cgSetRemoveObject(id self, SEL _cmd, id object) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && refusedNil(self, _cmd, object, @"object")) return;
    ((void (*)(id, SEL, id))original)(self, _cmd, object);
}

// ---- NSCache ----

static void cgCacheSetObjectForKey(id self, SEL _cmd, id object, id key) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && (refusedNil(self, _cmd, object, @"object") || refusedNil(self, _cmd, key, @"key"))) return;
    ((void (*)(id, SEL, id, id))original)(self, _cmd, object, key);
}

static void cgCacheSetObjectForKeyCost(id self, SEL _cmd, id object, id key, NSUInteger cost) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && (refusedNil(self, _cmd, object, @"object") || refusedNil(self, _cmd, key, @"key"))) return;
    ((void (*)(id, SEL, id, id, NSUInteger))original)(self, _cmd, object, key, cost);
}

// ---- NSData / NSMutableData ----

/// `range` of the data's bytes, clamped (and recorded) when it runs past the end.
static NSRange checkedDataRange(id self, SEL cmd, NSRange range, NSString *action) {
    NSUInteger length = [self length];
    if (CGRangeFits(range, length)) return range;
    reportContainer(self, cmd, action, NSRangeException, @"range {%lu, %lu} exceeds data length %lu", (unsigned long)range.location,
                    (unsigned long)range.length, (unsigned long)length);
    return CGClampRange(range, length);
}

static id cgDataSubdataWithRange(id self, SEL _cmd, NSRange range) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)) range = checkedDataRange(self, _cmd, range, @"returned the part within bounds");
    return ((id (*)(id, SEL, NSRange))original)(self, _cmd, range);
}

static void cgDataGetBytesRange(id self, SEL _cmd, void *buffer, NSRange range) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER)) range = checkedDataRange(self, _cmd, range, @"copied the bytes within bounds");
    ((void (*)(id, SEL, void *, NSRange))original)(self, _cmd, buffer, range);
}

/// A mutable data's edit grows the data past its end, but must start within it.
static BOOL refusedDataLocation(id self, SEL cmd, NSRange range) {
    NSUInteger length = [self length];
    if (range.location <= length) return NO;
    reportContainer(self, cmd, @"ignored", NSRangeException, @"range {%lu, %lu} exceeds data length %lu", (unsigned long)range.location,
                    (unsigned long)range.length, (unsigned long)length);
    return YES;
}

static void cgDataReplaceBytes(id self, SEL _cmd, NSRange range, const void *bytes) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && refusedDataLocation(self, _cmd, range)) return;
    ((void (*)(id, SEL, NSRange, const void *))original)(self, _cmd, range, bytes);
}

static void cgDataReplaceBytesLength(id self, SEL _cmd, NSRange range, const void *bytes, NSUInteger length) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && refusedDataLocation(self, _cmd, range)) return;
    ((void (*)(id, SEL, NSRange, const void *, NSUInteger))original)(self, _cmd, range, bytes, length);
}

static void cgDataResetBytes(id self, SEL _cmd, NSRange range) {
    IMP original = CGOriginal(self, _cmd);
    if (CGEnabled(CRASHGUARD_OBJC_CONTAINER) && refusedDataLocation(self, _cmd, range)) return;
    ((void (*)(id, SEL, NSRange))original)(self, _cmd, range);
}

/// Messages each cluster once, so that classes which copy their methods at +initialize
/// (GNUstep's mutable clusters) have done so before they are swizzled.
static void warmClusters(void) {
    id one = @"1";
    NSArray *a = [NSArray arrayWithObjects:one, one, one, nil];
    [a count];
    [[NSArray array] count];
    NSMutableArray *m = [NSMutableArray arrayWithCapacity:1];
    [m addObject:one];
    [m insertObject:one atIndex:0];
    [m replaceObjectAtIndex:0 withObject:one];
    [m removeObjectAtIndex:0];
    [CG_AUTORELEASE([m copy]) count];
    NSMutableArray *mutableCopy = CG_AUTORELEASE([a mutableCopy]);
    [mutableCopy addObject:one];
    NSDictionary *d = [NSDictionary dictionaryWithObjectsAndKeys:one, one, nil];
    [d count];
    [[NSDictionary dictionary] count];
    NSMutableDictionary *md = [NSMutableDictionary dictionaryWithCapacity:1];
    [md setObject:one forKey:one];
    [md removeObjectForKey:one];
    NSMutableDictionary *mutableDictionary = CG_AUTORELEASE([d mutableCopy]);
    [mutableDictionary setObject:one forKey:@"2"];
    NSSet *set = [NSSet setWithObject:one];
    [set count];
    NSMutableSet *mutableSet = [NSMutableSet setWithCapacity:1];
    [mutableSet addObject:one];
    [mutableSet removeObject:one];
    NSOrderedSet *ordered = [NSOrderedSet orderedSetWithObject:one];
    [ordered count];
    NSMutableOrderedSet *mutableOrdered = [NSMutableOrderedSet orderedSetWithCapacity:1];
    [mutableOrdered addObject:one];
    [mutableOrdered insertObject:@"2" atIndex:0];
    [mutableOrdered replaceObjectAtIndex:0 withObject:@"3"];
    [mutableOrdered removeObjectAtIndex:0];
    NSData *data = [NSData dataWithBytes:"ab" length:2];
    [data length];
    NSMutableData *mutableData = [NSMutableData dataWithBytes:"ab" length:2];
    [mutableData replaceBytesInRange:NSMakeRange(0, 1) withBytes:"c"];
    [mutableData resetBytesInRange:NSMakeRange(0, 1)];
    NSCache *cache = CG_AUTORELEASE([[NSCache alloc] init]);
    [cache setObject:one forKey:one];
}

void CGInstallContainerGuards(void) {
    warmClusters();
    Class array = [NSArray class], mutableArray = [NSMutableArray class];
    Class dictionary = [NSDictionary class], mutableDictionary = [NSMutableDictionary class];
    Class set = [NSSet class], mutableSet = [NSMutableSet class];
    Class ordered = [NSOrderedSet class], mutableOrdered = [NSMutableOrderedSet class];
    Class data = [NSData class], mutableData = [NSMutableData class], cache = [NSCache class];
    // The array functions serve the ordered sets too: same selectors, same checks.
    const CGClusterMethod methods[] = {
        {array, @selector(objectAtIndex:), (IMP)cgArrayObjectAtIndex},
        {array, @selector(objectAtIndexedSubscript:), (IMP)cgArrayObjectAtIndex},
        {array, @selector(subarrayWithRange:), (IMP)cgArraySubarrayWithRange},
        {array, @selector(initWithObjects:count:), (IMP)cgArrayInitWithObjectsCount},
        {mutableArray, @selector(insertObject:atIndex:), (IMP)cgArrayInsertObjectAtIndex},
        {mutableArray, @selector(addObject:), (IMP)cgArrayAddObject},
        {mutableArray, @selector(removeObjectAtIndex:), (IMP)cgArrayRemoveObjectAtIndex},
        {mutableArray, @selector(replaceObjectAtIndex:withObject:), (IMP)cgArrayReplaceObjectAtIndex},
        {mutableArray, @selector(setObject:atIndexedSubscript:), (IMP)cgArraySetObjectAtIndexedSubscript},
        {dictionary, @selector(initWithObjects:forKeys:count:), (IMP)cgDictionaryInitWithObjectsForKeysCount},
        {mutableDictionary, @selector(setObject:forKey:), (IMP)cgDictionarySetObjectForKey},
        {mutableDictionary, @selector(setObject:forKeyedSubscript:), (IMP)cgDictionarySetObjectForKey},
        {mutableDictionary, @selector(removeObjectForKey:), (IMP)cgDictionaryRemoveObjectForKey},
        {set, @selector(initWithObjects:count:), (IMP)cgArrayInitWithObjectsCount},
        {mutableSet, @selector(addObject:), (IMP)cgArrayAddObject},
        {mutableSet, @selector(removeObject:), (IMP)cgSetRemoveObject},
        {ordered, @selector(initWithObjects:count:), (IMP)cgArrayInitWithObjectsCount},
        {ordered, @selector(objectAtIndex:), (IMP)cgArrayObjectAtIndex},
        {ordered, @selector(objectAtIndexedSubscript:), (IMP)cgArrayObjectAtIndex},
        {mutableOrdered, @selector(addObject:), (IMP)cgArrayAddObject},
        {mutableOrdered, @selector(insertObject:atIndex:), (IMP)cgArrayInsertObjectAtIndex},
        {mutableOrdered, @selector(removeObjectAtIndex:), (IMP)cgArrayRemoveObjectAtIndex},
        {mutableOrdered, @selector(replaceObjectAtIndex:withObject:), (IMP)cgArrayReplaceObjectAtIndex},
        {mutableOrdered, @selector(setObject:atIndexedSubscript:), (IMP)cgArraySetObjectAtIndexedSubscript},
        {cache, @selector(setObject:forKey:), (IMP)cgCacheSetObjectForKey},
        {cache, @selector(setObject:forKey:cost:), (IMP)cgCacheSetObjectForKeyCost},
        {data, @selector(subdataWithRange:), (IMP)cgDataSubdataWithRange},
        {data, @selector(getBytes:range:), (IMP)cgDataGetBytesRange},
        {mutableData, @selector(replaceBytesInRange:withBytes:), (IMP)cgDataReplaceBytes},
        {mutableData, @selector(replaceBytesInRange:withBytes:length:), (IMP)cgDataReplaceBytesLength},
        {mutableData, @selector(resetBytesInRange:), (IMP)cgDataResetBytes},
    };
    CGSwizzleClusterMethods(methods, sizeof methods / sizeof methods[0]);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
