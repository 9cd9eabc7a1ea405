// The other containers of the seeds: NSSet, NSOrderedSet, NSCache and NSData. Unguarded,
// each call raises (where the runtime raises); guarded, it answers the seed's default and
// records the reason with the concrete class of the cluster.
#import "CGTest.h"

static NSOrderedSet *orderedPair(void) { return [NSOrderedSet orderedSetWithObjects:@"a", @"b", nil]; }
static NSData *sixBytes(void) { return [NSData dataWithBytes:"abcdef" length:6]; }

// ---- Unguarded: child processes ----

CG_SCENARIO(setWithNil) { [NSSet setWithObject:nil]; }
CG_SCENARIO(mutableSetAddNil) { [[NSMutableSet set] addObject:nil]; }
CG_SCENARIO(orderedSetReadOutOfBounds) { [orderedPair() objectAtIndex:5]; }
CG_SCENARIO(mutableOrderedSetRemoveOutOfBounds) { [[NSMutableOrderedSet orderedSetWithObject:@"a"] removeObjectAtIndex:5]; }
CG_SCENARIO(cacheNilKey) { [[NSCache new] setObject:@"v" forKey:nil]; }
CG_SCENARIO(dataSubdataOutOfBounds) { [sixBytes() subdataWithRange:NSMakeRange(4, 5)]; }
CG_SCENARIO(dataGetBytesOutOfBounds) {
    char buffer[8];
    [sixBytes() getBytes:buffer range:NSMakeRange(4, 5)];
}

CG_TEST(collectionsUnguardedCallsRaise) {
    CG_EXPECT_UNCAUGHT(setWithNil, @"NSInvalidArgumentException",
                       CG_PLATFORM(@"attempt to insert nil object from objects[0]", @"Tried to init set with nil value"));
    CG_EXPECT_UNCAUGHT(mutableSetAddNil, @"NSInvalidArgumentException", CG_PLATFORM(@"object cannot be nil", @"Tried to add nil to set"));
    CG_EXPECT_UNCAUGHT(orderedSetReadOutOfBounds, CG_PLATFORM(@"NSRangeException", @"NSInternalInconsistencyException"),
                       CG_PLATFORM(@"index 5 beyond bounds [0 .. 1]", @"Assertion failed in GSIArrayItemAtIndex"));
    CG_EXPECT_UNCAUGHT(mutableOrderedSetRemoveOutOfBounds, CG_PLATFORM(@"NSRangeException", @"NSInternalInconsistencyException"),
                       CG_PLATFORM(@"index 5 beyond bounds [0 .. 0]", @"Assertion failed in GSIArrayItemAtIndex"));
    CG_EXPECT_UNCAUGHT(cacheNilKey, @"NSInvalidArgumentException", CG_PLATFORM(@"attempt to insert nil", @"given nil argument"));
    CG_EXPECT_UNCAUGHT(dataSubdataOutOfBounds, @"NSRangeException",
                       CG_PLATFORM(@"range {4, 5} exceeds data length 6", @"in subdataWithRange:, range { 4, 5 } extends beyond size (6)"));
    CG_EXPECT_UNCAUGHT(dataGetBytesOutOfBounds, @"NSRangeException",
                       CG_PLATFORM(@"range {4, 5} exceeds data length 6", @"in getBytes:range:, range { 4, 5 } extends beyond size (6)"));
}

// ---- Guarded ----

CG_TEST(setsDropNilAndIgnoreNilWrites) {
    NSSet *fromNil = [NSSet setWithObject:nil];
    CG_CHECK(fromNil != nil && [fromNil count] == 0, @"%@", fromNil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ initWithObjects:count:]: attempt to insert nil object from objects[0]",
                                                               CG_PLATFORM(@"__NSPlaceholderSet", @"GSSet")]));
    id objects[3] = {@"a", nil, @"c"};
    CG_EQUAL_OBJECTS([NSSet setWithObjects:objects count:3], ([NSSet setWithObjects:@"a", @"c", nil]));
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ initWithObjects:count:]: attempt to insert nil object from objects[1]",
                                                               CG_PLATFORM(@"__NSPlaceholderSet", @"GSSet")]));
    NSMutableSet *set = [NSMutableSet setWithObject:@"a"];
    NSString *cls = CG_PLATFORM(@"__NSSetM", @"GSMutableSet");
    [set addObject:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ addObject:]: object cannot be nil", cls]));
    [set removeObject:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ removeObject:]: object cannot be nil", cls]));
    CG_EQUAL_OBJECTS(set, [NSSet setWithObject:@"a"]);
    [set addObject:@"b"];
    [set removeObject:@"a"];
    CG_EQUAL_OBJECTS(set, [NSSet setWithObject:@"b"]);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(orderedSetsAnswerNilAndIgnoreBadWrites) {
    NSOrderedSet *ordered = orderedPair();
    NSString *cls = CG_PLATFORM(@"__NSOrderedSetI", @"GSOrderedSet");
    CG_CHECK([ordered objectAtIndex:5] == nil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ objectAtIndex:]: index 5 beyond bounds [0 .. 1]", cls]));
    CG_CHECK([ordered objectAtIndexedSubscript:2] == nil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ objectAtIndexedSubscript:]: index 2 beyond bounds [0 .. 1]", cls]));
    CG_EQUAL_OBJECTS([ordered objectAtIndex:1], @"b");
    CG_EXPECT_NO_REPORT();
    CG_CHECK([[NSOrderedSet orderedSetWithObject:nil] count] == 0);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ initWithObjects:count:]: attempt to insert nil object from objects[0]",
                                                               CG_PLATFORM(@"__NSPlaceholderOrderedSet", @"GSOrderedSet")]));

    NSMutableOrderedSet *mutable = [NSMutableOrderedSet orderedSetWithObject:@"a"];
    NSString *mcls = CG_PLATFORM(@"__NSOrderedSetM", @"GSMutableOrderedSet");
    [mutable addObject:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ addObject:]: object cannot be nil", mcls]));
    [mutable insertObject:nil atIndex:0];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ insertObject:atIndex:]: object cannot be nil", mcls]));
    [mutable insertObject:@"x" atIndex:5];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ insertObject:atIndex:]: index 5 beyond bounds [0 .. 1]", mcls]));
    [mutable removeObjectAtIndex:5];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ removeObjectAtIndex:]: index 5 beyond bounds [0 .. 0]", mcls]));
    [mutable replaceObjectAtIndex:5 withObject:@"y"];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ replaceObjectAtIndex:withObject:]: index 5 beyond bounds [0 .. 0]", mcls]));
    [mutable replaceObjectAtIndex:0 withObject:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ replaceObjectAtIndex:withObject:]: object cannot be nil", mcls]));
    CG_CHECK([mutable objectAtIndex:3] == nil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ objectAtIndex:]: index 3 beyond bounds [0 .. 0]", mcls]));
    CG_EQUAL_OBJECTS([mutable array], [NSArray arrayWithObject:@"a"]);
    [mutable insertObject:@"z" atIndex:1];
    CG_EQUAL_OBJECTS([mutable array], ([NSArray arrayWithObjects:@"a", @"z", nil]));
    CG_EXPECT_NO_REPORT();
}

CG_TEST(cacheIgnoresNilKeysAndObjects) {
    NSCache *cache = [[NSCache new] autorelease];
    NSString *cls = CG_PLATFORM(@"NSCache", @"NSCache");
    [cache setObject:@"v" forKey:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ setObject:forKey:]: key cannot be nil", cls]));
    [cache setObject:nil forKey:@"k"];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ setObject:forKey:]: object cannot be nil", cls]));
    [cache setObject:nil forKey:@"k" cost:3];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ setObject:forKey:cost:]: object cannot be nil", cls]));
    [cache setObject:@"v" forKey:@"k"];
    CG_EQUAL_OBJECTS([cache objectForKey:@"k"], @"v");
    CG_EXPECT_NO_REPORT();
}

CG_TEST(dataRangesAreClamped) {
    NSData *data = sixBytes();
    NSString *cls = CG_PLATFORM(@"NSConcreteData", @"NSDataMalloc");
    CG_EQUAL_OBJECTS([data subdataWithRange:NSMakeRange(4, 5)], [NSData dataWithBytes:"ef" length:2]);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ subdataWithRange:]: range {4, 5} exceeds data length 6", cls]));
    char buffer[8] = "zzzzzzz";
    [data getBytes:buffer range:NSMakeRange(4, 5)];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ getBytes:range:]: range {4, 5} exceeds data length 6", cls]));
    CG_CHECK(memcmp(buffer, "efzzzzz", 7) == 0, @"%s", buffer);
    CG_EQUAL_OBJECTS([data subdataWithRange:NSMakeRange(1, 2)], [NSData dataWithBytes:"bc" length:2]);
    CG_EXPECT_NO_REPORT();

    NSMutableData *mutable = [NSMutableData dataWithBytes:"abcdef" length:6];
    NSString *mcls = CG_PLATFORM(@"NSConcreteMutableData", @"NSMutableDataMalloc");
    [mutable replaceBytesInRange:NSMakeRange(8, 1) withBytes:"x"];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ replaceBytesInRange:withBytes:]: range {8, 1} exceeds data length 6", mcls]));
    [mutable replaceBytesInRange:NSMakeRange(7, 1) withBytes:"xy" length:2];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ replaceBytesInRange:withBytes:length:]: range {7, 1} exceeds data length 6", mcls]));
    [mutable resetBytesInRange:NSMakeRange(9, 2)];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ resetBytesInRange:]: range {9, 2} exceeds data length 6", mcls]));
    CG_EQUAL_OBJECTS(mutable, [NSData dataWithBytes:"abcdef" length:6]);
    // An edit that starts within the data and runs past its end grows it: not an error.
    [mutable replaceBytesInRange:NSMakeRange(5, 2) withBytes:"XY"];
    CG_EQUAL_OBJECTS(mutable, [NSData dataWithBytes:"abcdeXY" length:7]);
    CG_EXPECT_NO_REPORT();
}
