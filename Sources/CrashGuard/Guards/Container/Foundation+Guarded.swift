import CrashWire
import Foundation

// Container guard (kind `container`) for Foundation's reference containers: `NSArray`,
// `NSMutableArray`, `NSDictionary`, `NSMutableDictionary` and `NSCache`. Out-of-range
// access raises NSRangeException on Apple platforms and traps (SIGILL) in
// swift-corelibs-foundation on Linux; nil objects and keys, impossible to pass from
// Swift to the unguarded methods, are refused here rather than silently boxed.
// Reasons use the receiver's runtime class name: `-[NSMutableArray objectAtIndex:]: ...`
// on Linux, `-[__NSArrayM objectAtIndex:]: ...` on Apple platforms, as the runtime does.

extension NSArray {
    /// The object at `index`, or `nil` (recorded,
    /// `-[NSArray objectAtIndex:]: index 5 beyond bounds [0 .. 2]`) when out of range.
    public func guardedObject(
        at index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Any? {
        if index >= 0 && index < count { return object(at: index) }
        recordBounds(index, "objectAtIndex:", action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function))
        return nil
    }

    fileprivate func recordBounds(_ index: Int, _ selector: String, action: String, insertion: Bool = false, site: CallSite) {
        ContainerReason.record(
            Describe.typeName(type(of: self)), selector,
            ContainerReason.bounds(index, lower: 0, upper: insertion ? count : count - 1, empty: count == 0 && !insertion),
            action: action, extra: ["index": String(index), "count": String(count)], site: site
        )
    }
}

extension NSMutableArray {
    /// Appends `object`; a `nil` object is ignored and recorded
    /// (`-[NSMutableArray addObject:]: object cannot be nil`).
    public func guardedAdd(
        _ object: Any?, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        guard let object else {
            ContainerReason.record(
                Describe.typeName(type(of: self)), "addObject:", "object cannot be nil",
                action: "ignored the insert", site: CallSite(fileID: fileID, line: line, function: function))
            return
        }
        add(object)
    }

    /// Inserts `object` at `index` (`0...count`); out of range or `nil` is ignored and
    /// recorded (`-[NSMutableArray insertObject:atIndex:]: index 7 beyond bounds [0 .. 3]`).
    public func guardedInsert(
        _ object: Any?, at index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        let site = CallSite(fileID: fileID, line: line, function: function)
        guard let object else {
            ContainerReason.record(
                Describe.typeName(type(of: self)), "insertObject:atIndex:", "object cannot be nil",
                action: "ignored the insert", site: site)
            return
        }
        guard index >= 0 && index <= count else {
            recordBounds(index, "insertObject:atIndex:", action: "ignored the insert", insertion: true, site: site)
            return
        }
        insert(object, at: index)
    }

    /// Removes the object at `index`; out of range is ignored and recorded
    /// (`-[NSMutableArray removeObjectAtIndex:]: index 5 beyond bounds [0 .. 2]`).
    public func guardedRemoveObject(
        at index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        guard index >= 0 && index < count else {
            recordBounds(index, "removeObjectAtIndex:", action: "ignored the remove", site: CallSite(fileID: fileID, line: line, function: function))
            return
        }
        removeObject(at: index)
    }

    /// Replaces the object at `index`; out of range or `nil` is ignored and recorded
    /// (`-[NSMutableArray replaceObjectAtIndex:withObject:]: index 5 beyond bounds [0 .. 2]`).
    public func guardedReplaceObject(
        at index: Int, with object: Any?, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        let site = CallSite(fileID: fileID, line: line, function: function)
        guard index >= 0 && index < count else {
            recordBounds(index, "replaceObjectAtIndex:withObject:", action: "ignored the write", site: site)
            return
        }
        guard let object else {
            ContainerReason.record(
                Describe.typeName(type(of: self)), "replaceObjectAtIndex:withObject:", "object cannot be nil",
                action: "ignored the write", site: site)
            return
        }
        replaceObject(at: index, with: object)
    }
}

extension NSDictionary {
    /// Like `NSDictionary(objects:forKeys:)`, which raises (Apple) or traps (Linux) when
    /// the counts differ, but pairs up only the first `min(objects.count, keys.count)`
    /// and records `-[NSDictionary initWithObjects:forKeys:]: count of objects (2) differs from count of keys (3)`.
    public convenience init(
        guardedObjects objects: [Any], forKeys keys: [AnyHashable],
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        let n = Swift.min(objects.count, keys.count)
        self.init(dictionary: Dictionary(zip(keys, objects), uniquingKeysWith: { _, last in last }))
        if objects.count != keys.count {
            ContainerReason.record(
                Describe.typeName(Self.self), "initWithObjects:forKeys:",
                "count of objects (\(objects.count)) differs from count of keys (\(keys.count))",
                action: "kept the first \(n) pairs", site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
    }

    /// The object for `key`; a `nil` key returns `nil` and is recorded
    /// (`-[NSDictionary objectForKey:]: key cannot be nil`).
    public func guardedObject(
        forKey key: AnyHashable?, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Any? {
        guard let key else {
            ContainerReason.record(
                Describe.typeName(type(of: self)), "objectForKey:", "key cannot be nil",
                action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function))
            return nil
        }
        return object(forKey: key.base)
    }
}

extension NSMutableDictionary {
    /// Sets `object` for `key`; a `nil` object or key is ignored and recorded
    /// (`-[NSMutableDictionary setObject:forKey:]: object cannot be nil (key: name)` /
    /// `key cannot be nil`). Use `removeObject(forKey:)` to remove.
    public func guardedSetObject(
        _ object: Any?, forKey key: AnyHashable?, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        let site = CallSite(fileID: fileID, line: line, function: function)
        guard let key else {
            ContainerReason.record(
                Describe.typeName(type(of: self)), "setObject:forKey:", "key cannot be nil",
                action: "ignored the write", site: site)
            return
        }
        guard let object else {
            ContainerReason.record(
                Describe.typeName(type(of: self)), "setObject:forKey:", "object cannot be nil",
                action: "ignored the write", extra: ["key": Describe.value(key.base)], site: site)
            return
        }
        #if canImport(Darwin)
        guard let copying = key.base as AnyObject as? NSCopying else {
            ContainerReason.record(
                Describe.typeName(type(of: self)), "setObject:forKey:", "key does not conform to NSCopying",
                action: "ignored the write", site: site)
            return
        }
        setObject(object, forKey: copying)
        #else
        setObject(object, forKey: key)
        #endif
    }
}

/// Guarded `NSCache` access. Free functions rather than an `NSCache` extension: on Apple
/// platforms an extension of a generic Objective-C class may not use its generic
/// parameters at run time.
public enum GuardedCache {
    /// Caches `object` for `key` in `cache`; a `nil` object or key is ignored and recorded
    /// (`-[NSCache setObject:forKey:cost:]: attempt to insert nil value`).
    public static func setObject<Key: AnyObject, Object: AnyObject>(
        _ object: Object?, forKey key: Key?, cost: Int = 0, in cache: NSCache<Key, Object>,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        guard let object, let key else {
            ContainerReason.record(
                "NSCache", "setObject:forKey:cost:",
                key == nil ? "attempt to insert nil key" : "attempt to insert nil value",
                action: "ignored the write", site: CallSite(fileID: fileID, line: line, function: function)
            )
            return
        }
        cache.setObject(object, forKey: key, cost: cost)
    }

    /// The object for `key` in `cache`; a `nil` key returns `nil` and is recorded
    /// (`-[NSCache objectForKey:]: key cannot be nil`).
    public static func object<Key: AnyObject, Object: AnyObject>(
        forKey key: Key?, in cache: NSCache<Key, Object>,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Object? {
        guard let key else {
            ContainerReason.record(
                "NSCache", "objectForKey:", "key cannot be nil",
                action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function))
            return nil
        }
        return cache.object(forKey: key)
    }
}
