import CrashIngest
import Foundation

/// The fields of a Sentry event (Sentry's developer documentation, "Event Payloads") that
/// become a report; everything else in the event is skipped unread.
///
/// Decoding is lenient below the top level, as Sentry's own ingest is: a field of an
/// unexpected type is treated as absent instead of losing the event. Only a payload that
/// is not a JSON object, or an `event_id` that is not a UUID, makes the event malformed.
struct SentryEvent: Decodable {
    var eventID: UUID?
    var timestamp: Timestamp?
    var exceptions: [Exception]
    var logentry: Message?
    var message: Message?
    var release: String?
    var environment: String?
    var userID: String?
    var appIdentifier: String?
    var osName: String?
    var osVersion: String?
    var deviceModel: String?
    var deviceID: String?
    var tags: [(key: String, value: String)]
    var fingerprint: [String]?
    /// `debug_meta.images` of type `macho` (Sentry Cocoa), in the event's order.
    var images: [DebugImage]

    /// An `event_id` that is present but not 32 hex digits (or a hyphenated UUID).
    struct InvalidEventID: Error {}

    /// The event's time: RFC 3339 text or Unix seconds.
    enum Timestamp: Decodable {
        case text(String)
        case seconds(Double)

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let seconds = try? container.decode(Double.self) {
                self = .seconds(seconds)
            } else {
                self = .text(try container.decode(String.self))
            }
        }
    }

    /// A message: a string, or an object with `formatted` and `message`.
    struct Message: Decodable {
        var formatted: String?
        var message: String?

        private enum CodingKeys: String, CodingKey { case formatted, message }

        init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                formatted = text
                return
            }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            formatted = container.lenient(String.self, .formatted)
            message = container.lenient(String.self, .message)
        }
    }

    struct Exception: Decodable {
        var type: String?
        var value: String?
        var frames: [Frame]
        var handled: Bool?

        private enum CodingKeys: String, CodingKey { case type, value, stacktrace, mechanism }
        private enum StacktraceKeys: String, CodingKey { case frames }
        private enum MechanismKeys: String, CodingKey { case handled }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            type = container.lenient(Scalar.self, .type)?.text
            value = container.lenient(Scalar.self, .value)?.text
            let stacktrace = try? container.nestedContainer(keyedBy: StacktraceKeys.self, forKey: .stacktrace)
            frames = (stacktrace?.lenient([Lenient<Frame>].self, .frames) ?? []).compactMap(\.value)
            let mechanism = try? container.nestedContainer(keyedBy: MechanismKeys.self, forKey: .mechanism)
            handled = mechanism?.lenient(Bool.self, .handled)
        }
    }

    struct Frame: Decodable {
        var function: String?
        var module: String?
        var filename: String?
        var package: String?
        var inApp: Bool?
        /// `instruction_addr`: where the frame is, as a `0x` hex text (or a number).
        var instructionAddress: UInt64?

        private enum CodingKeys: String, CodingKey {
            case function, module, filename, package
            case inApp = "in_app"
            case instructionAddress = "instruction_addr"
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            function = container.lenient(String.self, .function)
            module = container.lenient(String.self, .module)
            filename = container.lenient(String.self, .filename)
            package = container.lenient(String.self, .package)
            inApp = container.lenient(Bool.self, .inApp)
            instructionAddress = container.lenient(Address.self, .instructionAddress)?.value
        }
    }

    /// A Mach-O image of `debug_meta.images` (Sentry's "Mach-O Images"): its debug id (the
    /// `LC_UUID`), where it was loaded and how large it is, and its file.
    struct DebugImage: Decodable {
        var debugID: String
        var imageAddress: UInt64
        var imageSize: UInt64
        var imageVMAddress: UInt64?
        var codeFile: String
        var arch: String?

        /// Not an image of type `macho` with a debug id, a load address, a size and a file.
        struct NotMachO: Error {}

        private enum CodingKeys: String, CodingKey {
            case type, arch
            case debugID = "debug_id"
            case uuid
            case imageAddress = "image_addr"
            case imageSize = "image_size"
            case imageVMAddress = "image_vmaddr"
            case codeFile = "code_file"
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            guard container.lenient(String.self, .type) == "macho",
                let debugID = container.lenient(String.self, .debugID) ?? container.lenient(String.self, .uuid),
                let address = container.lenient(Address.self, .imageAddress)?.value,
                let size = container.lenient(Address.self, .imageSize)?.value, size > 0,
                let codeFile = container.lenient(String.self, .codeFile), !codeFile.isEmpty
            else { throw NotMachO() }
            self.debugID = debugID.lowercased()
            imageAddress = address
            imageSize = size
            imageVMAddress = container.lenient(Address.self, .imageVMAddress)?.value
            self.codeFile = codeFile
            arch = container.lenient(String.self, .arch)
        }

        /// The last path component of `code_file`, as Apple's frames name an image.
        var name: String { codeFile.split(separator: "/").last.map(String.init) ?? codeFile }

        func contains(_ address: UInt64) -> Bool { address >= imageAddress && address - imageAddress < imageSize }
    }

    /// An address: a `0x` hex text (Sentry's form), a decimal text or a JSON number.
    struct Address: Decodable {
        var value: UInt64

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let number = try? container.decode(UInt64.self) {
                value = number
                return
            }
            let text = try container.decode(String.self)
            let parsed =
                text.hasPrefix("0x") || text.hasPrefix("0X") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text)
            guard let parsed else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an address")
            }
            value = parsed
        }
    }

    private enum CodingKeys: String, CodingKey {
        case eventID = "event_id"
        case timestamp, exception, logentry, message, release, environment, user, contexts, tags, fingerprint
        case debugMeta = "debug_meta"
    }
    private enum DebugMetaKeys: String, CodingKey { case images }
    private enum ValuesKeys: String, CodingKey { case values }
    private enum UserKeys: String, CodingKey { case id }
    private enum ContextsKeys: String, CodingKey { case app, os, device }
    private enum AppKeys: String, CodingKey { case appIdentifier = "app_identifier" }
    private enum OSKeys: String, CodingKey { case name, version }
    private enum DeviceKeys: String, CodingKey { case model, id }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if let text = container.lenient(String.self, .eventID) {
            guard let id = UUIDText.parse(text, compact: true) else { throw InvalidEventID() }
            eventID = id
        } else if container.contains(.eventID), !((try? container.decodeNil(forKey: .eventID)) ?? false) {
            throw InvalidEventID()
        }
        timestamp = container.lenient(Timestamp.self, .timestamp)
        // `exception` is `{"values": [...]}`, or (older SDKs) the list itself.
        let values =
            (try? container.nestedContainer(keyedBy: ValuesKeys.self, forKey: .exception))?
            .lenient([Lenient<Exception>].self, .values)
            ?? container.lenient([Lenient<Exception>].self, .exception) ?? []
        exceptions = values.compactMap(\.value)
        logentry = container.lenient(Message.self, .logentry)
        message = container.lenient(Message.self, .message)
        release = container.lenient(Scalar.self, .release)?.text
        environment = container.lenient(Scalar.self, .environment)?.text
        userID = (try? container.nestedContainer(keyedBy: UserKeys.self, forKey: .user))?.lenient(Scalar.self, .id)?.text
        let contexts = try? container.nestedContainer(keyedBy: ContextsKeys.self, forKey: .contexts)
        appIdentifier = (try? contexts?.nestedContainer(keyedBy: AppKeys.self, forKey: .app))?
            .lenient(String.self, .appIdentifier)
        let os = try? contexts?.nestedContainer(keyedBy: OSKeys.self, forKey: .os)
        osName = os?.lenient(String.self, .name)
        osVersion = os?.lenient(String.self, .version)
        let device = try? contexts?.nestedContainer(keyedBy: DeviceKeys.self, forKey: .device)
        deviceModel = device?.lenient(String.self, .model)
        deviceID = device?.lenient(Scalar.self, .id)?.text
        // `tags` is an object, or a list of `[key, value]` pairs; only string values count.
        if let object = container.lenient([String: Lenient<String>].self, .tags) {
            tags = object.compactMap { key, value in value.value.map { (key, $0) } }
        } else if let pairs = container.lenient([Lenient<[Lenient<String>]>].self, .tags) {
            tags = pairs.compactMap { pair in
                guard let pair = pair.value, pair.count == 2, let key = pair[0].value, let value = pair[1].value else { return nil }
                return (key, value)
            }
        } else {
            tags = []
        }
        fingerprint = container.lenient([Lenient<Scalar>].self, .fingerprint).map { $0.compactMap { $0.value?.text } }
        images =
            ((try? container.nestedContainer(keyedBy: DebugMetaKeys.self, forKey: .debugMeta))?
            .lenient([Lenient<DebugImage>].self, .images) ?? []).compactMap(\.value)
    }

    /// Decodes one event payload; throws ``SentryEnvelope/Malformed`` for what is not an event.
    static func decode(_ payload: some Collection<UInt8>) throws -> SentryEvent {
        guard !payload.isEmpty else { throw SentryEnvelope.Malformed(description: "event is empty") }
        do {
            return try JSONDecoder().decode(SentryEvent.self, from: Data(payload))
        } catch is InvalidEventID {
            throw SentryEnvelope.Malformed(description: "event_id is not 32 hex digits")
        } catch {
            throw SentryEnvelope.Malformed(description: "event is not a JSON object")
        }
    }
}

/// A JSON string, number or boolean, as text: Sentry SDKs send ids and releases as either.
struct Scalar: Decodable {
    var text: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let string = try? container.decode(String.self) {
            text = string
        } else if let integer = try? container.decode(Int64.self) {
            text = String(integer)
        } else if let number = try? container.decode(Double.self) {
            text = String(number)
        } else {
            text = String(try container.decode(Bool.self))
        }
    }
}

/// A value that is nil instead of an error when it has another type.
struct Lenient<T: Decodable>: Decodable {
    var value: T?

    init(from decoder: any Decoder) throws {
        value = try? T(from: decoder)
    }
}

extension KeyedDecodingContainer {
    /// The value for `key`, or nil when it is absent, null or of another type.
    func lenient<T: Decodable>(_: T.Type, _ key: Key) -> T? {
        (try? decodeIfPresent(T.self, forKey: key)) ?? nil
    }
}
