import CrashGuard
import CrashWire
import Foundation
import Testing

private class Person {
    var name = "Ann"
    var nickname: String? = nil
    init() {}
}

private final class Employee: Person, KeyValueSettable {
    var age = 30
    var address = Address()

    static let keyedSetters = KeyedSetters<Employee>()
        .settable("name", \.name)
        .settable("nickname", \.nickname)
        .settable("age", \.age)
}

private struct Address: KeyValueSettable {
    var city = "Oslo"
    static let keyedSetters = KeyedSetters<Address>().settable("city", \.city)
}

@Suite("kvc guard")
struct KVCGuardTests {
    @Test func unguardedUndefinedKeyDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            _ = Mirror(reflecting: Address()).descendant(runtimeOpaque("zip"))!
        }
    }

    @Test func readsPropertiesByName() {
        let employee = Employee()
        let (values, events) = recording {
            (
                GuardedKVC.value(forKey: "age", of: employee) as? Int,
                GuardedKVC.value(forKey: "name", of: employee) as? String,  // inherited
                GuardedKVC.value(forKey: "nickname", of: employee),  // nil, defined
                GuardedKVC.value(forKeyPath: "address.city", of: employee) as? String
            )
        }
        #expect(values.0 == 30 && values.1 == "Ann" && values.2 == nil && values.3 == "Oslo")
        #expect(events.isEmpty)
    }

    @Test func undefinedKeyReadsNil() {
        let employee = Employee()
        let (value, events) = recording { GuardedKVC.value(forKey: "salary", of: employee) }
        #expect(value == nil)
        expectOne(
            events, .kvc,
            "[<Employee \(objectAddress(employee))> valueForUndefinedKey:]: this class is not key value coding-compliant for the key salary.")
        let path = recording { GuardedKVC.value(forKeyPath: "address.zip", of: employee) }
        #expect(path.value == nil)
        expectOne(path.events, .kvc, "[<Address> valueForUndefinedKey:]: this class is not key value coding-compliant for the key zip.")
        expectOne(
            recording { GuardedKVC.value(forKey: "", of: employee) }.events, .kvc,
            "-[Employee valueForKey:]: attempt to retrieve a value for an empty key")
    }

    @Test func setsThroughTheTable() {
        let employee = Employee()
        let events = recording {
            #expect(employee.guardedSetValue("Bo", forKey: "name"))
            #expect(employee.guardedSetValue(41, forKey: "age"))
            #expect(employee.guardedSetValue("B", forKey: "nickname"))
            #expect(employee.guardedSetValue(nil, forKey: "nickname"))
        }.events
        #expect(events.isEmpty)
        #expect(employee.name == "Bo" && employee.age == 41 && employee.nickname == nil)
        var address = Address()
        #expect(address.guardedSetValue("Rome", forKey: "city") && address.city == "Rome")
        #expect(address.guardedValue(forKey: "city") as? String == "Rome")
    }

    @Test func undefinedKeyWriteIsIgnored() {
        let employee = Employee()
        let (written, events) = recording { employee.guardedSetValue(1, forKey: "salary") }
        #expect(!written)
        let event = expectOne(
            events, .kvc,
            "[<Employee \(objectAddress(employee))> setValue:forUndefinedKey:]: this class is not key value coding-compliant for the key salary.")
        #expect(event?.context["action"] == "ignored the write")
    }

    @Test func wrongTypeAndNilAreIgnored() {
        let employee = Employee()
        let wrong = recording { employee.guardedSetValue(5, forKey: "name") }
        #expect(!wrong.value && employee.name == "Ann")
        expectOne(wrong.events, .kvc, "-[Employee setValue:forKey:]: value of type Int is not String for the key name.")
        let nilValue = recording { employee.guardedSetValue(nil, forKey: "age") }
        #expect(!nilValue.value && employee.age == 30)
        expectOne(nilValue.events, .kvc, "[<Employee \(objectAddress(employee))> setNilValueForKey]: could not set nil as the value for the key age.")
        #expect(Employee.keyedSetters.keys == ["age", "name", "nickname"])
    }
}
