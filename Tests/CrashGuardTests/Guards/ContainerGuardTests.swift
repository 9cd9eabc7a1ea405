import CrashGuard
import CrashWire
import Foundation
import Testing

@Suite("container guard")
struct ContainerGuardTests {
    // MARK: The unguarded operations die

    @Test func unguardedArraySubscriptDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { _ = [1, 2, 3][runtimeOpaque(5)] }
    }

    @Test func unguardedSliceSubscriptDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { _ = [1, 2, 3][1...][runtimeOpaque(5)] }
    }

    @Test func unguardedRemoveLastOnEmptyDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            var empty = runtimeOpaque([Int]())
            empty.removeLast()
        }
    }

    @Test func unguardedDuplicateKeysDie() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            _ = Dictionary(uniqueKeysWithValues: runtimeOpaque([("a", 1), ("a", 2)]))
        }
    }

    @Test func unguardedInvertedRangeDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { _ = runtimeOpaque(5)..<runtimeOpaque(2) }
    }

    @Test func unguardedNSArrayDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { _ = NSArray(array: [1, 2, 3]).object(at: runtimeOpaque(5)) }
    }

    @Test func unguardedNSMutableArrayRemoveDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) { NSMutableArray(array: [1]).removeObject(at: runtimeOpaque(3)) }
    }

    // MARK: The guarded ones answer and record

    @Test func arraySubscript() {
        let array = [10, 20, 30]
        let (value, events) = recording { array[guarded: 5] }
        #expect(value == nil)
        let event = expectOne(events, .container, "-[Array objectAtIndex:]: index 5 beyond bounds [0 .. 2]")
        #expect(event?.context["index"] == "5")
        #expect(event?.context["count"] == "3")
        #expect(event?.context["action"] == "returned nil")
        let inRange = recording { array[guarded: 1] }
        #expect(inRange.value == 20 && inRange.events.isEmpty)
    }

    @Test func inRangeRecordsNothing() {
        let (value, events) = recording { ([10, 20, 30][guarded: 1], ContiguousArray([1])[guarded: 0]) }
        #expect(value.0 == 20 && value.1 == 1)
        #expect(events.isEmpty)
    }

    @Test func emptyArrayAndNegativeIndex() {
        expectOne(recording { [Int]()[guarded: 0] }.events, .container, "-[Array objectAtIndex:]: index 0 beyond bounds for empty array")
        expectOne(recording { [1][guarded: -1] }.events, .container, "-[Array objectAtIndex:]: index -1 beyond bounds [0 .. 0]")
    }

    @Test func contiguousArrayAndSlice() {
        let contiguous: ContiguousArray = [1, 2]
        expectOne(recording { contiguous[guarded: 2] }.events, .container, "-[ContiguousArray objectAtIndex:]: index 2 beyond bounds [0 .. 1]")
        let slice = [1, 2, 3, 4][2...]
        let (value, events) = recording { (slice[guarded: 0], slice[guarded: 3]) }
        #expect(value.0 == nil && value.1 == 4)
        expectOne(events, .container, "-[ArraySlice objectAtIndex:]: index 0 beyond bounds [2 .. 3]")
    }

    @Test func rangeSubscriptClamps() {
        let array = [1, 2, 3]
        let (value, events) = recording { array[guarded: 1..<10] }
        #expect(Array(value) == [2, 3])
        expectOne(events, .container, "-[Array subarrayWithRange:]: range {1, 9} extends beyond bounds [0 .. 2]")
        #expect(recording { Array(array[guarded: 0..<2]) }.value == [1, 2])
    }

    @Test func setterOutOfRangeIsIgnored() {
        var array = [1, 2, 3]
        let events = recording { array[guarded: 7] = 9 }.events
        #expect(array == [1, 2, 3])
        expectOne(events, .container, "-[Array replaceObjectAtIndex:withObject:]: index 7 beyond bounds [0 .. 2]")
        let ok = recording { array[guarded: 0] = 9 }.events
        #expect(array == [9, 2, 3] && ok.isEmpty)
        let nilWrite = recording { array[guarded: 0] = nil }.events
        #expect(array == [9, 2, 3])
        expectOne(nilWrite, .container, "-[Array replaceObjectAtIndex:withObject:]: object cannot be nil")
    }

    @Test func insertAndRemove() {
        var array = [1, 2, 3]
        let (inserted, insertEvents) = recording { array.guardedInsert(4, at: 9) }
        #expect(!inserted && array == [1, 2, 3])
        expectOne(insertEvents, .container, "-[Array insertObject:atIndex:]: index 9 beyond bounds [0 .. 3]")
        #expect(recording { array.guardedInsert(4, at: 3) } == (true, []) as (Bool, [GuardEvent]) ? true : array == [1, 2, 3, 4])
        let (removed, removeEvents) = recording { array.guardedRemove(at: 10) }
        #expect(removed == nil)
        expectOne(removeEvents, .container, "-[Array removeObjectAtIndex:]: index 10 beyond bounds [0 .. 3]")
        #expect(array.guardedRemove(at: 0) == 1)
    }

    @Test func removeFirstAndLastOnEmpty() {
        var empty: [String] = []
        let (last, lastEvents) = recording { empty.guardedRemoveLast() }
        #expect(last == nil)
        expectOne(lastEvents, .container, "-[Array removeLastObject]: cannot remove last element from an empty collection")
        let (first, firstEvents) = recording { empty.guardedRemoveFirst() }
        #expect(first == nil)
        expectOne(firstEvents, .container, "-[Array removeFirstObject]: cannot remove first element from an empty collection")
        var one = ["x", "y"]
        #expect(recording { (one.guardedRemoveLast(), one.guardedRemoveFirst()) }.events.isEmpty)
        #expect(one.isEmpty)
    }

    @Test func duplicateKeysKeepTheFirstValue() {
        let (dictionary, events) = recording {
            Dictionary(guardedUniqueKeysWithValues: [("a", 1), ("b", 2), ("a", 3)])
        }
        #expect(dictionary == ["a": 1, "b": 2])
        let event = expectOne(events, .container, "-[Dictionary initWithObjects:forKeys:]: duplicate key of type String")
        #expect(event?.context["duplicates"] == "1")
        #expect(event?.context["keys"] == "a")
        #expect(recording { Dictionary(guardedUniqueKeysWithValues: [(1, 1)]) }.events.isEmpty)
    }

    @Test func invertedRangeIsEmpty() {
        let (range, events) = recording { Range(guardedLower: 5, upper: 2) }
        #expect(range == 5..<5)
        let event = expectOne(events, .container, "Range<Int> requires lowerBound <= upperBound")
        #expect(event?.context["lowerBound"] == "5" && event?.context["upperBound"] == "2")
        #expect(recording { Range(guardedLower: 1, upper: 2) }.value == 1..<2)
    }

    @Test func nsArray() {
        let array = NSArray(array: [1, 2, 3])
        let (value, events) = recording { array.guardedObject(at: 5) }
        #expect(value == nil)
        let name = String(describing: type(of: array))
        expectOne(events, .container, "-[\(name) objectAtIndex:]: index 5 beyond bounds [0 .. 2]")
        #expect(array.guardedObject(at: 0) as? Int == 1)
    }

    @Test func nsMutableArray() {
        let array = NSMutableArray(array: [1, 2, 3])
        let name = String(describing: type(of: array))
        expectOne(
            recording { array.guardedRemoveObject(at: 3) }.events, .container,
            "-[\(name) removeObjectAtIndex:]: index 3 beyond bounds [0 .. 2]")
        expectOne(
            recording { array.guardedInsert(9, at: 4) }.events, .container,
            "-[\(name) insertObject:atIndex:]: index 4 beyond bounds [0 .. 3]")
        expectOne(
            recording { array.guardedReplaceObject(at: 8, with: 1) }.events, .container,
            "-[\(name) replaceObjectAtIndex:withObject:]: index 8 beyond bounds [0 .. 2]")
        let nothing: Any? = nil
        expectOne(recording { array.guardedAdd(nothing) }.events, .container, "-[\(name) addObject:]: object cannot be nil")
        #expect(array.count == 3)
        #expect(
            recording {
                array.guardedAdd(4)
                array.guardedInsert(0, at: 0)
                array.guardedRemoveObject(at: 4)
            }.events.isEmpty)
        #expect(array.count == 4 && array.object(at: 0) as? Int == 0)
    }

    @Test func nsDictionaries() {
        let (dictionary, events) = recording { NSDictionary(guardedObjects: [1, 2], forKeys: ["a", "b", "c"]) }
        #expect(dictionary.count == 2)
        expectOne(events, .container, "-[NSDictionary initWithObjects:forKeys:]: count of objects (2) differs from count of keys (3)")
        let noKey: AnyHashable? = nil
        let missing = recording { dictionary.guardedObject(forKey: noKey) }
        #expect(missing.value == nil)
        expectOne(missing.events, .container, "-[\(String(describing: type(of: dictionary))) objectForKey:]: key cannot be nil")
        #expect(dictionary.guardedObject(forKey: "a") as? Int == 1)

        let mutable = NSMutableDictionary()
        let name = String(describing: type(of: mutable))
        let nothing: Any? = nil
        let event = expectOne(
            recording { mutable.guardedSetObject(nothing, forKey: "k") }.events, .container,
            "-[\(name) setObject:forKey:]: object cannot be nil")
        #expect(event?.context["key"] == "k")
        expectOne(recording { mutable.guardedSetObject(1, forKey: noKey) }.events, .container, "-[\(name) setObject:forKey:]: key cannot be nil")
        #expect(recording { mutable.guardedSetObject(1, forKey: "k") }.events.isEmpty)
        #expect(mutable.count == 1)
    }

    @Test func nsCache() {
        let cache = NSCache<NSString, NSString>()
        let noValue: NSString? = nil
        expectOne(
            recording { GuardedCache.setObject(noValue, forKey: "k", in: cache) }.events, .container,
            "-[NSCache setObject:forKey:cost:]: attempt to insert nil value")
        let noKey: NSString? = nil
        expectOne(
            recording { GuardedCache.setObject("v", forKey: noKey, in: cache) }.events, .container,
            "-[NSCache setObject:forKey:cost:]: attempt to insert nil key")
        let (value, events) = recording { GuardedCache.object(forKey: noKey, in: cache) }
        #expect(value == nil)
        expectOne(events, .container, "-[NSCache objectForKey:]: key cannot be nil")
        #expect(recording { GuardedCache.setObject("v", forKey: "k", in: cache) }.events.isEmpty)
        #expect(GuardedCache.object(forKey: "k", in: cache) == "v")
    }
}
