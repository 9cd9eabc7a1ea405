import AsyncHTTPClient
import Foundation
import HTTPTypes
import HummingbirdTesting
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The contract's "Webhooks: where deliveries may go" (hardening.md): which hosts a webhook
/// URL may name, checked at creation by form and at delivery by every resolved address,
/// and the allow list for receivers on the premises. Pure checks, plus the create route.
@Suite("Webhook addresses")
struct WebhookAddressTests {
    /// Hosts a webhook may not name: every refused range as an IP literal (IPv4-mapped and
    /// -compatible IPv6 forms included), `localhost` and names under it, and IPv4 addresses
    /// written in a form other than dotted-quad.
    static let refused = [
        "http://127.0.0.1/hook", "http://127.255.255.254:8080/", "http://[::1]/", "http://0.0.0.0/", "http://[::]/",
        "http://10.0.0.1/", "http://172.16.0.1/", "http://172.31.255.255/", "http://192.168.1.1/", "http://[fc00::1]/",
        "http://[fd12:3456::1]/", "http://169.254.169.254/latest/meta-data/", "http://169.254.0.1/", "http://[fe80::1]/",
        "http://100.64.0.1/", "http://100.127.255.254/", "http://224.0.0.1/", "http://239.255.255.250/",
        "http://[ff02::1]/", "http://255.255.255.255/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:a9fe:a9fe]/",
        "http://[::127.0.0.1]/", "http://[::ffff:10.0.0.1]/", "http://[0:0:0:0:0:ffff:7f00:1]/",
        "http://localhost/", "http://LOCALHOST./", "https://localhost:8443/x", "http://api.localhost/",
        "http://Foo.LocalHost./", "http://%6c%6fcalhost/", "http://2130706433/", "http://127.1/", "http://0x7f.0.0.1/",
        "http://0177.0.0.1/", "http://127.0.0.1./", "https://0x7f000001/", "http://10.1/", "http://0/",
        "http://[fe80::1%25eth0]/",
    ]

    /// Hosts on the internet, or names (resolved and checked at delivery, not here).
    static let accepted = [
        "https://hooks.slack.com/services/T000/B000/XXXX", "http://203.0.113.7/", "http://8.8.8.8:8080/x",
        "http://[2001:db8::1]/", "http://[::ffff:8.8.8.8]/", "http://172.32.0.1/", "http://172.15.255.255/",
        "http://100.128.0.1/", "http://100.63.255.255/", "http://192.169.0.1/", "http://169.253.0.1/",
        "http://223.255.255.255/", "http://255.255.255.254/", "http://localhost.example.com/", "http://mylocalhost/",
        "http://example.com./", "http://1.2.3.4.nip.io/", "http://xn--bcher-kva.example/", "http://compose-db/",
    ]

    @Test("refused hosts are a 400 naming url", arguments: refused)
    func refusedHost(url: String) {
        do {
            try WebhookRequest.checkURL(url)
            Issue.record("\(url) was accepted")
        } catch let error as APIError {
            #expect(error.message.hasPrefix("url: "), "\(error.message)")
        } catch {
            Issue.record("\(url): \(error)")
        }
    }

    @Test("hosts on the internet and names are accepted", arguments: accepted)
    func acceptedHost(url: String) throws {
        try WebhookRequest.checkURL(url)
    }

    @Test("POST /webhooks refuses every refused host with 400 naming url, and stores none of them")
    func refusedByTheRoute() async throws {
        let p = try await makeProject()
        try await withApp(TestEnvironment.configuration()) { client in
            let path = "/v1/projects/\(p.project)/webhooks"
            for url in Self.refused {
                let body = String(
                    decoding: try JSONSerialization.data(withJSONObject: ["url": url, "events": ["group.new"]]), as: UTF8.self)
                let response = try await client.query(path, token: p.readToken, method: .post, body: body)
                #expect(response.status == .badRequest, "\(url)")
                #expect(response.json.error.hasPrefix("url: "), "\(url): \(response.json.error)")
            }
            let list = try await client.query(path, token: p.readToken).json
            #expect((list["webhooks"] as? [Any])?.isEmpty == true)
        }
    }

    @Test("the allow list lets listed hosts through as written: any case, and only the listed port")
    func allowListAtCreation() async throws {
        let p = try await makeProject()
        let configuration = TestEnvironment.configuration {
            $0.webhooks.allowHosts = ["127.0.0.1:8080", "Receiver.Local", "[::1]", "LOCALHOST:9000"]
        }
        try await withApp(configuration) { client in
            let path = "/v1/projects/\(p.project)/webhooks"
            let cases: [(String, HTTPResponse.Status)] = [
                ("http://127.0.0.1:8080/hook", .created), ("http://127.0.0.1:8081/hook", .badRequest),
                ("http://127.0.0.1/hook", .badRequest), ("http://[::1]:7/hook", .created),
                ("http://localhost:9000/", .created), ("http://localhost:9001/", .badRequest),
                ("https://RECEIVER.local/x", .created), ("http://10.0.0.1/", .badRequest),
            ]
            for (url, status) in cases {
                let body = String(
                    decoding: try JSONSerialization.data(withJSONObject: ["url": url, "events": ["group.new"]]), as: UTF8.self)
                let response = try await client.query(path, token: p.readToken, method: .post, body: body)
                #expect(response.status == status, "\(url): \(response.json)")
            }
        }
    }

    @Test("CRASHGUARD_WEBHOOK_ALLOW_HOSTS is read, and a bad entry stops the start naming it")
    func allowListSetting() throws {
        let config = try ServerConfiguration(environment: [
            "DATABASE_URL": TestEnvironment.databaseURL, "CRASHGUARD_WEBHOOK_ALLOW_HOSTS": " hooks.internal , 10.0.0.5:8443,[fd00::1]:80",
        ])
        #expect(config.webhooks.allowHosts == ["hooks.internal", "10.0.0.5:8443", "[fd00::1]:80"])
        let list = config.webhooks.allowList
        #expect(list.allows("http://HOOKS.internal:1234/x"))
        #expect(list.allows("https://10.0.0.5:8443/"))
        #expect(!list.allows("https://10.0.0.5/"))
        #expect(list.allows("http://[fd00::1]/"))
        #expect(!list.allows("http://[fd00::1]:81/"))
        #expect(!list.allows("http://other.internal/"))
        for bad in ["host:0", "host:http", "[::1", "a/b", "[::1]x"] {
            #expect(throws: ConfigurationError.self, "\(bad)") {
                _ = try ServerConfiguration(environment: [
                    "DATABASE_URL": TestEnvironment.databaseURL, "CRASHGUARD_WEBHOOK_ALLOW_HOSTS": bad,
                ])
            }
        }
    }

    @Test("the refused ranges, at their edges")
    func ranges() throws {
        let refused = [
            "0.0.0.0", "0.255.255.255", "10.255.255.255", "100.64.0.0", "100.127.255.255", "127.0.0.0", "169.254.169.254",
            "172.16.0.0", "172.31.255.255", "192.168.0.0", "192.168.255.255", "224.0.0.0", "239.255.255.255",
            "255.255.255.255", "::", "::1", "fc00::", "fdff:ffff::1", "fe80::", "febf:ffff::1", "ff00::", "ffff::1",
            "::ffff:169.254.169.254", "::ffff:0.0.0.0", "::10.0.0.1",
        ]
        let allowed = [
            "1.0.0.0", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255", "128.0.0.0",
            "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.167.255.255", "192.169.0.0",
            "223.255.255.255", "240.0.0.1", "255.255.255.254", "2001:db8::1", "fbff::1", "fec0::1", "fe7f::1",
            "::ffff:8.8.8.8", "::8.8.8.8", "64:ff9b::808:808",
        ]
        for text in refused { #expect(try #require(IPAddress(literal: text)).isRefused, "\(text)") }
        for text in allowed { #expect(try !#require(IPAddress(literal: text)).isRefused, "\(text)") }
        // Only the forms the HTTP client itself connects to are literals.
        for text in ["127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "[::1]", "fe80::1%eth0", ""] {
            #expect(IPAddress(literal: text) == nil, "\(text)")
        }
        #expect(IPAddress(literal: "::ffff:7f00:1")?.description == "::ffff:127.0.0.1")
        #expect(IPAddress(v4: 127, 0, 0, 1).description == "127.0.0.1")
    }

    /// The names a test resolver was asked for.
    final class Lookups: Sendable {
        let names = Mutex<[String]>([])
    }

    /// A transport whose lookups answer `addresses` and are logged in `lookups`.
    private static func transport(
        _ addresses: @escaping @Sendable (String) throws -> [IPAddress], lookups: Lookups, allowHosts: [String] = []
    ) throws -> WebhookTransport {
        WebhookTransport(
            timeout: .seconds(2), allowList: try WebhookAllowList(parsing: allowHosts.joined(separator: ",")),
            resolver: WebhookResolver { name in
                lookups.names.withLock { $0.append(name) }
                return try addresses(name)
            }, eventLoopGroup: HTTPClient.defaultEventLoopGroup)
    }

    @Test("a name is resolved at delivery: every address checked, the connection pinned to the first")
    func routeByResolvedAddresses() async throws {
        let lookups = Lookups()
        let public1 = IPAddress(v4: 203, 0, 113, 7), public2 = try #require(IPAddress(literal: "2001:db8::7"))
        let transport = try Self.transport(
            { name in
                switch name.lowercased() {
                case "public.example": [public1, public2]
                case "mixed.example": [public1, IPAddress(v4: 10, 0, 0, 7)]
                case "metadata.example": [try #require(IPAddress(literal: "::ffff:169.254.169.254"))]
                case "empty.example": []
                default: throw WebhookResolver.LookupFailed()
                }
            }, lookups: lookups, allowHosts: ["allowed.internal"])
        #expect(try await transport.route("https://public.example/x") == ["public.example": "203.0.113.7"])
        #expect(try await transport.route("https://Public.Example/x") == ["Public.Example": "203.0.113.7"])
        for (url, error) in [
            ("http://mixed.example/", WebhookDeliveryError.addressNotAllowed),
            ("http://metadata.example/", .addressNotAllowed),
            ("http://empty.example/", .connectionFailed), ("http://nxdomain.example/", .connectionFailed),
            ("http://localhost/", .addressNotAllowed), ("http://127.0.0.1/", .addressNotAllowed),
        ] {
            await #expect(throws: error, "\(url)") { try await transport.route(url) }
        }
        // IP literals and allow-listed hosts are connected to as written, without a lookup.
        lookups.names.withLock { $0.removeAll() }
        #expect(try await transport.route("http://203.0.113.9:8080/") == [:])
        #expect(try await transport.route("http://allowed.internal/") == [:])
        #expect(lookups.names.withLock { $0 }.isEmpty)
    }

    @Test("the system resolver reads /etc/hosts: localhost is loopback, so refused")
    func systemResolver() async throws {
        let addresses = try WebhookResolver.addresses(of: "localhost")
        #expect(!addresses.isEmpty)
        #expect(addresses.allSatisfy { $0.isRefused }, "\(addresses)")
        #expect(throws: (any Error).self) { try WebhookResolver.addresses(of: "no-such-host.invalid") }
    }
}
