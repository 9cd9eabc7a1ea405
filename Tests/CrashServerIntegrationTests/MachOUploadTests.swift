import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// `POST /v1/projects/{project}/debug-files` with Mach-O files, fat files and dSYM zips
/// (apple.md, "Debug files"), on the real binaries of Tests/Fixtures/apple/debug-files.
@Suite(.serialized) struct MachOUploadTests {
    func upload(
        _ client: some TestClientProtocol, _ project: ProjectCredentials, _ bytes: [UInt8], name: String = "Crashy"
    )
        async throws -> (HTTPResponse.Status, [String: Any])
    {
        let response = try await client.execute(
            uri: "/v1/projects/\(project.project)/debug-files?name=\(name)", method: .post,
            headers: [.authorization: "Bearer \(project.readToken)", .contentType: "application/octet-stream"],
            body: ByteBuffer(bytes: bytes))
        let json = (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any] ?? [:]
        return (response.status, json)
    }

    static func fixture(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: TestEnvironment.repoRoot.appendingPathComponent("Tests/Fixtures/apple/debug-files/\(name)")))
    }

    /// The LC_UUIDs of the fixtures (`llvm-dwarfdump --uuid`).
    static let arm64UUID = "4c4c4480-5555-3144-a123-46faaaed6c55"
    static let x86UUID = "4c4c449b-5555-3144-a1ad-85aa0dbff185"

    static func files(_ body: [String: Any]) -> [[String: Any]] { body["files"] as? [[String: Any]] ?? [] }

    @Test func fatFileIsOneDebugFilePerArchitecture() async throws {
        let project = try await makeProject()
        let fat = try Self.fixture("Crashy-fat")
        try await withApp { client in
            let (status, body) = try await upload(client, project, fat)
            #expect(status == .created)
            #expect(body["outcome"] as? String == "created")
            let files = Self.files(body)
            #expect(Set(files.compactMap { $0["debugId"] as? String }) == [Self.arm64UUID, Self.x86UUID])
            #expect(Set(files.compactMap { $0["arch"] as? String }) == ["arm64", "x86_64"])
            #expect(files.allSatisfy { $0["kind"] as? String == "macho" && $0["outcome"] as? String == "created" && $0["buildId"] == nil })
            #expect((body["file"] as? [String: Any])?["debugId"] as? String == files.first?["debugId"] as? String)
            // Each stored under its own UUID with the thin file's bytes.
            let arm = try Self.fixture("Crashy-arm64")
            let stored = files.first { $0["arch"] as? String == "arm64" }
            #expect(stored?["size"] as? Int == arm.count)
            // All known: 200 unchanged.
            let (again, repeated) = try await upload(client, project, fat)
            #expect(again == .ok)
            #expect(repeated["outcome"] as? String == "unchanged")
            let (thin, thinBody) = try await upload(client, project, arm)
            #expect(thin == .ok && thinBody["outcome"] as? String == "unchanged")
        }
    }

    /// DWARF over a symbol table over none: the dSYM replaces the executable, and the
    /// executable uploaded again leaves the dSYM.
    @Test func dsymZipReplacesTheExecutableNeverTheReverse() async throws {
        let project = try await makeProject()
        try await withApp { client in
            let (first, exe) = try await upload(client, project, try Self.fixture("Crashy-stripped"))
            #expect(first == .created)
            #expect(Self.files(exe).first?["hasDebugInfo"] as? Bool == false)
            let (status, dsym) = try await upload(client, project, try Self.fixture("Crashy.dSYM.zip"), name: "Crashy.dSYM.zip")
            #expect(status == .ok)
            #expect(dsym["outcome"] as? String == "replaced")
            let file = Self.files(dsym).first
            #expect(file?["debugId"] as? String == Self.arm64UUID)
            #expect(file?["hasDebugInfo"] as? Bool == true)
            #expect(file?["name"] as? String == "Crashy")
            let (back, again) = try await upload(client, project, try Self.fixture("Crashy-arm64"))
            #expect(back == .ok && again["outcome"] as? String == "unchanged")
            #expect(Self.files(again).first?["hasDebugInfo"] as? Bool == true)
        }
    }

    /// A stored zip entry, for hand-made archives.
    static func zip(_ entries: [(name: String, data: [UInt8], declared: Int?)]) -> [UInt8] {
        func le16(_ v: Int) -> [UInt8] { [UInt8(v & 0xff), UInt8(v >> 8 & 0xff)] }
        func le32(_ v: Int) -> [UInt8] { le16(v & 0xffff) + le16(v >> 16 & 0xffff) }
        var out: [UInt8] = []
        var central: [UInt8] = []
        for entry in entries {
            let name = Array(entry.name.utf8)
            let offset = out.count
            let sizes = le32(0) + le32(entry.data.count) + le32(entry.declared ?? entry.data.count)
            out += le32(0x0403_4b50) + le16(20) + le16(0) + le16(0) + le32(0) + sizes + le16(name.count) + le16(0) + name + entry.data
            central +=
                le32(0x0201_4b50) + le16(20) + le16(20) + le16(0) + le16(0) + le32(0) + sizes + le16(name.count)
                + le16(0) + le16(0) + le16(0) + le16(0) + le32(0) + le32(offset) + name
        }
        let start = out.count
        out += central
        out += le32(0x0605_4b50) + le16(0) + le16(0) + le16(entries.count) + le16(entries.count) + le32(central.count) + le32(start) + le16(0)
        return out
    }

    /// Every refusal of the page is a 400 naming the problem; another project's token is 404.
    @Test func refusals() async throws {
        let project = try await makeProject()
        let other = try await makeProject()
        let arm = try Self.fixture("Crashy-arm64")
        var noUUID = arm
        noUUID[16...19] = [0, 0, 0, 0]  // ncmds 0: no LC_UUID
        let cases: [(String, [UInt8], String)] = [
            ("text", Array("not a debug file".utf8), "not a Mach-O, ELF or dSYM zip file"),
            ("truncated", Array(arm.prefix(40)), "truncated"),
            ("no uuid", noUUID, "LC_UUID"),
            ("zip without dSYM", Self.zip([("Crashy.app/Crashy", arm, nil)]), "no dSYM"),
            ("zip entry size lie", Self.zip([("A.dSYM/Contents/Resources/DWARF/A", arm, arm.count + 1)]), "sizes disagree"),
            ("zip of junk", Self.zip([("A.dSYM/Contents/Resources/DWARF/A", Array("junk".utf8), nil)]), "not a Mach-O file"),
            ("truncated zip", Array(Self.zip([("A.dSYM/Contents/Resources/DWARF/A", arm, nil)]).dropLast(30)), "zip"),
        ]
        try await withApp { client in
            for (label, bytes, message) in cases {
                let response = try await client.execute(
                    uri: "/v1/projects/\(project.project)/debug-files?name=x", method: .post,
                    headers: [.authorization: "Bearer \(project.readToken)"], body: ByteBuffer(bytes: bytes))
                #expect(response.status == .badRequest, "\(label)")
                #expect(String(buffer: response.body).contains(message), "\(label): \(String(buffer: response.body))")
            }
            let response = try await client.execute(
                uri: "/v1/projects/\(project.project)/debug-files?name=x", method: .post,
                headers: [.authorization: "Bearer \(other.readToken)"], body: ByteBuffer(bytes: arm))
            #expect(response.status == .notFound)
            // A zip holding the DWARF stored (not deflated) is taken like the deflated one.
            let (status, body) = try await upload(client, project, Self.zip([("A.dSYM/Contents/Resources/DWARF/A", arm, nil)]))
            #expect(status == .created)
            #expect(Self.files(body).first?["name"] as? String == "A")
        }
    }
}
