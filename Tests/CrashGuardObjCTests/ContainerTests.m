// Containers: unguarded, each call raises; guarded, it answers the seed's default and
// records the runtime's own reason with the concrete class of the cluster.
#import "CGTest.h"

static NSArray *three(void) { return [NSArray arrayWithObjects:@"a", @"b", @"c", nil]; }

// ---- Unguarded: child processes ----

CG_SCENARIO(arrayReadOutOfBounds) { [three() objectAtIndex:5]; }
CG_SCENARIO(mutableArrayInsertNil) { [[NSMutableArray array] insertObject:nil atIndex:0]; }
CG_SCENARIO(dictionarySetNil) { [[NSMutableDictionary dictionary] setObject:nil forKey:@"k"]; }
CG_SCENARIO(dictionaryLiteralNil) {
    id objects[2] = {@"a", nil};
    id keys[2] = {@"k1", @"k2"};
    [NSDictionary dictionaryWithObjects:objects forKeys:keys count:2];
}

CG_TEST(containerUnguardedCallsRaise) {
    CG_EXPECT_UNCAUGHT(arrayReadOutOfBounds, @"NSRangeException",
                       CG_PLATFORM(@"-[__NSArrayI objectAtIndex:]: index 5 beyond bounds [0 .. 2]", @"Index 5 is out of range 3"));
    CG_EXPECT_UNCAUGHT(mutableArrayInsertNil, @"NSInvalidArgumentException",
                       CG_PLATFORM(@"-[__NSArrayM insertObject:atIndex:]: object cannot be nil", @"Tried to insert nil"));
    CG_EXPECT_UNCAUGHT(dictionarySetNil, @"NSInvalidArgumentException",
                       CG_PLATFORM(@"-[__NSDictionaryM setObject:forKey:]: object cannot be nil (key: k)", @"Tried to add nil value for key 'k' to dictionary"));
    CG_EXPECT_UNCAUGHT(dictionaryLiteralNil, @"NSInvalidArgumentException",
                       CG_PLATFORM(@"-[__NSPlaceholderDictionary initWithObjects:forKeys:count:]: attempt to insert nil object from objects[1]",
                                   @"Tried to init dictionary with nil value"));
}

// ---- Guarded ----

CG_TEST(arrayReadsOutOfBoundsAnswerNil) {
    NSArray *array = three();
    NSString *cls = CG_PLATFORM(@"__NSArrayI", @"GSInlineArray");
    CG_CHECK([array objectAtIndex:5] == nil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ objectAtIndex:]: index 5 beyond bounds [0 .. 2]", cls]));
    CG_CHECK([array objectAtIndexedSubscript:3] == nil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ objectAtIndexedSubscript:]: index 3 beyond bounds [0 .. 2]", cls]));
    // In bounds: the original answers, nothing recorded.
    CG_EQUAL_OBJECTS([array objectAtIndex:2], @"c");
    CG_EXPECT_NO_REPORT();

    NSArray *empty = [NSArray array];
    CG_CHECK([empty objectAtIndex:0] == nil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ objectAtIndex:]: index 0 beyond bounds for empty array",
                                                               CG_PLATFORM(@"__NSArray0", @"GSInlineArray")]));

    NSMutableArray *mutable = [NSMutableArray arrayWithObject:@"x"];
    CG_CHECK([mutable objectAtIndex:3] == nil);
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ objectAtIndex:]: index 3 beyond bounds [0 .. 0]",
                                                               CG_PLATFORM(@"__NSArrayM", @"GSMutableArray")]));
    CG_EQUAL_OBJECTS([three() subarrayWithRange:NSMakeRange(1, 9)], ([NSArray arrayWithObjects:@"b", @"c", nil]));
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ subarrayWithRange:]: range {1, 9} extends beyond bounds [0 .. 2]", cls]));
}

CG_TEST(mutableArrayBadWritesAreIgnored) {
    NSMutableArray *array = [NSMutableArray arrayWithObject:@"x"];
    NSString *cls = CG_PLATFORM(@"__NSArrayM", @"GSMutableArray");
    [array insertObject:nil atIndex:0];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ insertObject:atIndex:]: object cannot be nil", cls]));
    [array insertObject:@"y" atIndex:7];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ insertObject:atIndex:]: index 7 beyond bounds [0 .. 1]", cls]));
    [array addObject:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ addObject:]: object cannot be nil", cls]));
    [array removeObjectAtIndex:9];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ removeObjectAtIndex:]: index 9 beyond bounds [0 .. 0]", cls]));
    [array replaceObjectAtIndex:4 withObject:@"z"];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ replaceObjectAtIndex:withObject:]: index 4 beyond bounds [0 .. 0]", cls]));
    CG_EQUAL_OBJECTS(array, [NSArray arrayWithObject:@"x"]);
    // Appending through the subscript setter at index == count is legal.
    [array setObject:@"w" atIndexedSubscript:1];
    CG_EXPECT_NO_REPORT();
    CG_EQUAL_OBJECTS(array, ([NSArray arrayWithObjects:@"x", @"w", nil]));
}

CG_TEST(literalsDropNilEntries) {
    id objects[3] = {@"a", nil, @"c"};
    id keys[3] = {@"k1", @"k2", @"k3"};
    CG_EQUAL_OBJECTS([NSArray arrayWithObjects:objects count:3], ([NSArray arrayWithObjects:@"a", @"c", nil]));
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ initWithObjects:count:]: attempt to insert nil object from objects[1]",
                                                               CG_PLATFORM(@"__NSPlaceholderArray", @"GSPlaceholderArray")]));
    NSDictionary *dictionary = [NSDictionary dictionaryWithObjects:objects forKeys:keys count:3];
    CG_EQUAL_OBJECTS(dictionary, ([NSDictionary dictionaryWithObjectsAndKeys:@"a", @"k1", @"c", @"k3", nil]));
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ initWithObjects:forKeys:count:]: attempt to insert nil object from objects[1]",
                                                               CG_PLATFORM(@"__NSPlaceholderDictionary", @"GSDictionary")]));
    id nilKey[2] = {@"k1", nil};
    id values[2] = {@"a", @"b"};
    CG_EQUAL_OBJECTS([NSDictionary dictionaryWithObjects:values forKeys:nilKey count:2], ([NSDictionary dictionaryWithObject:@"a" forKey:@"k1"]));
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ initWithObjects:forKeys:count:]: attempt to insert nil key from keys[1]",
                                                               CG_PLATFORM(@"__NSPlaceholderDictionary", @"GSDictionary")]));
}

CG_TEST(mutableDictionaryNilWritesAreIgnored) {
    NSMutableDictionary *dictionary = [NSMutableDictionary dictionaryWithObject:@"v" forKey:@"k"];
    NSString *cls = CG_PLATFORM(@"__NSDictionaryM", @"GSMutableDictionary");
    [dictionary setObject:nil forKey:@"k"];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ setObject:forKey:]: object cannot be nil", cls]));
    [dictionary setObject:@"v" forKey:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ setObject:forKey:]: key cannot be nil", cls]));
    [dictionary removeObjectForKey:nil];
    CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%@ removeObjectForKey:]: key cannot be nil", cls]));
    CG_EQUAL_OBJECTS(dictionary, [NSDictionary dictionaryWithObject:@"v" forKey:@"k"]);
    // A nil object through the subscript setter removes the key: documented, not an error.
    [dictionary setObject:nil forKeyedSubscript:@"k"];
    CG_EXPECT_NO_REPORT();
    CG_CHECK([dictionary count] == 0);
}

CG_TEST(switchedOffFamilyCallsTheOriginal) {
    crashguard_objc_set_enabled(CRASHGUARD_OBJC_ALL & ~CRASHGUARD_OBJC_CONTAINER);
    NSString *name = nil;
    @try {
        [three() objectAtIndex:5];
    } @catch (NSException *exception) {
        name = [exception name];
    }
    CG_EQUAL_OBJECTS(name, NSRangeException);
    CG_EXPECT_NO_REPORT();
}

CG_TEST(debugModeRaisesAfterRecording) {
    crashguard_objc_set_raise_after_recording(1);
    NSException *caught = nil;
    @try {
        [three() objectAtIndex:5];
    } @catch (NSException *exception) {
        caught = exception;
    }
    NSString *reason = [NSString stringWithFormat:@"-[%@ objectAtIndex:]: index 5 beyond bounds [0 .. 2]", CG_PLATFORM(@"__NSArrayI", @"GSInlineArray")];
    CG_EQUAL_OBJECTS([caught name], NSRangeException);
    CG_EQUAL_OBJECTS([caught reason], reason);
    CG_EXPECT_REPORT(@"container", reason);
}

// The whole cluster: every concrete array class found at run time is covered, including
// ones made by copies and mutable copies.
CG_TEST(everyConcreteArrayClassIsGuarded) {
    NSArray *base = three();
    NSArray *variants = [NSArray arrayWithObjects:base, [[base copy] autorelease], [[base mutableCopy] autorelease],
                                                  [NSMutableArray arrayWithArray:base], [NSArray arrayWithArray:base], nil];
    for (NSUInteger i = 0; i < [variants count]; i++) {
        NSArray *array = [variants objectAtIndex:i];
        CG_CHECK([array objectAtIndex:10] == nil, @"%s", class_getName(object_getClass(array)));
        CG_EXPECT_REPORT(@"container", ([NSString stringWithFormat:@"-[%s objectAtIndex:]: index 10 beyond bounds [0 .. 2]",
                                                                   class_getName(object_getClass(array))]));
    }
}
