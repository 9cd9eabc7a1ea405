import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An IPv4 or IPv6 address, and whether a webhook may be delivered to it.
///
/// The refused ranges are the contract's (hardening.md, "Webhooks: where deliveries may go"):
/// everything that reaches the server itself, its network or the cloud's metadata service
/// rather than a receiver on the internet.
struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 (IPv6), in network order.
    let bytes: [UInt8]

    init(v4 a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) { bytes = [a, b, c, d] }

    /// From 4 or 16 bytes in network order.
    init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// A dotted-quad IPv4 address (`203.0.113.7`) or an IPv6 address without brackets
    /// (`2001:db8::1`, `::ffff:127.0.0.1`), as `inet_pton` reads them: the forms the HTTP client
    /// connects to directly. Nil for anything else, also for the other numeric forms that
    /// `getaddrinfo` would accept (`127.1`, `2130706433`, `0x7f.0.0.1`).
    init?(literal text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: &v6) { Array($0) }
            return
        }
        return nil
    }

    var isIPv4: Bool { bytes.count == 4 }

    /// The text `inet_ntop` writes (IPv6 without brackets).
    var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = isIPv4 ? AF_INET : AF_INET6
        let written = bytes.withUnsafeBytes { raw in
            inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count))
        }
        guard written != nil else { return bytes.map(String.init).joined(separator: ".") }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// True when no webhook may be delivered to this address (unless its host is on the allow
    /// list): loopback, unspecified, private, link-local (the metadata service
    /// `169.254.169.254` included), CGNAT, multicast, broadcast, and the IPv4-mapped
    /// (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) forms of any of these.
    var isRefused: Bool {
        if isIPv4 { return Self.refusesIPv4(bytes[0], bytes[1], bytes[2], bytes[3]) }
        let b = bytes
        // ::/96 (IPv4-compatible, with :: and ::1 in it) and ::ffff:0:0/96 (IPv4-mapped):
        // judged by the IPv4 address they carry (:: is 0.0.0.0 and ::1 is 0.0.0.1, both in 0/8).
        if b[0..<10].allSatisfy({ $0 == 0 }) && (b[10..<12].allSatisfy { $0 == 0 } || b[10..<12].allSatisfy { $0 == 0xff }) {
            return Self.refusesIPv4(b[12], b[13], b[14], b[15])
        }
        if b[0] & 0xfe == 0xfc { return true }  // fc00::/7, unique local
        if b[0] == 0xfe && b[1] & 0xc0 == 0x80 { return true }  // fe80::/10, link-local
        if b[0] == 0xff { return true }  // ff00::/8, multicast
        return false
    }

    private static func refusesIPv4(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) -> Bool {
        switch a {
        case 0, 10, 127: return true  // unspecified ("this network"), private, loopback
        case 100: return b & 0xc0 == 64  // 100.64/10, CGNAT
        case 169: return b == 254  // 169.254/16, link-local and the metadata service
        case 172: return b & 0xf0 == 16  // 172.16/12, private
        case 192: return b == 168  // 192.168/16, private
        case 224...239: return true  // 224/4, multicast
        case 255: return b == 255 && c == 255 && d == 255  // broadcast
        default: return false
        }
    }
}

/// Where a webhook URL points, as the HTTP client will read it: its scheme, host and port.
///
/// The host is `URL(string:)`'s, brackets trimmed: exactly the string AsyncHTTPClient
/// connects to and the key of its DNS override, so what is checked is what is connected to.
struct WebhookTarget: Sendable, Equatable {
    /// `http` or `https`.
    var scheme: String
    /// The host as the URL writes it (percent-decoded, IPv6 without brackets, case kept).
    var host: String
    /// The URL's port, else the scheme's.
    var port: Int
    /// The host's address when it is an IP literal; nil for a name.
    var literal: IPAddress?

    /// Why a URL is refused, for the `url: ...` message of a 400; at delivery every refusal is
    /// `"address not allowed"`.
    struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        let description: String
    }

    /// Parses `url` (already checked to be an absolute http(s) URL) into its target; throws
    /// when the host is refused by its form alone: an IP literal in a refused range,
    /// `localhost` or a name under `.localhost`, a number in a form other than dotted-quad
    /// IPv4 or bracketed IPv6, or characters no host name has (an IPv6 zone among them).
    /// Names are not resolved here: that happens at each delivery.
    static func parse(_ url: String) throws(Refusal) -> WebhookTarget {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), scheme == "http" || scheme == "https",
            var host = parsed.host, !host.isEmpty
        else { throw Refusal(description: "must be an absolute http:// or https:// URL with a host") }
        // Checked as decoded (`%6c%6fcalhost` is `localhost`): the form the client connects to.
        let bracketed = host.hasPrefix("[") || URLComponents(string: url)?.percentEncodedHost?.hasPrefix("[") == true
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = parsed.port ?? (scheme == "https" ? 443 : 80)
        guard (1...65535).contains(port) else { throw Refusal(description: "port must be 1...65535") }
        if let address = IPAddress(literal: host) {
            guard bracketed == !address.isIPv4 else {
                throw Refusal(description: "host '\(host)' must be dotted-quad IPv4 or bracketed IPv6")
            }
            if address.isRefused {
                throw Refusal(
                    description: "host \(host) is a loopback, private, link-local, CGNAT, multicast or broadcast address,"
                        + " which webhooks may not reach (CRASHGUARD_WEBHOOK_ALLOW_HOSTS lists allowed receivers)")
            }
            return WebhookTarget(scheme: scheme, host: host, port: port, literal: address)
        }
        guard !bracketed else { throw Refusal(description: "host '\(host.prefix(64))' is not an IPv6 address") }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.".utf8)
        guard host.utf8.allSatisfy(allowed.contains) else {
            throw Refusal(description: "host has characters a host name cannot have")
        }
        var name = host.lowercased()
        while name.hasSuffix(".") { name.removeLast() }
        if Self.isNumeric(name) {
            throw Refusal(description: "host '\(host)' is a number in a form other than dotted-quad IPv4 (like 192.0.2.1)")
        }
        if name == "localhost" || name.hasSuffix(".localhost") {
            throw Refusal(
                description: "host \(host) is this machine, which webhooks may not reach"
                    + " (CRASHGUARD_WEBHOOK_ALLOW_HOSTS lists allowed receivers)")
        }
        return WebhookTarget(scheme: scheme, host: host, port: port, literal: nil)
    }

    /// True when a name ends in a number (its last label is decimal, or hex after `0x`): URL
    /// parsers and `getaddrinfo` read such a host as an IPv4 address (`127.1`, `2130706433`,
    /// `0x7f.0.0.1`, `10.0.0.1.`), and no registered name ends that way.
    static func isNumeric(_ name: String) -> Bool {
        let last = name.split(separator: ".", omittingEmptySubsequences: false).last.map(String.init) ?? name
        if !last.isEmpty && last.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) { return true }
        if last.hasPrefix("0x") { return last.dropFirst(2).allSatisfy(\.isHexDigit) }
        return false
    }
}

/// `CRASHGUARD_WEBHOOK_ALLOW_HOSTS`: receivers on the premises that webhooks may reach although
/// their host is refused. Matched against the URL's host as written (case-insensitive), never
/// against what a name resolves to; an entry with a port matches only that port.
struct WebhookAllowList: Sendable, Equatable {
    struct Entry: Sendable, Equatable {
        /// Lowercased, IPv6 without brackets.
        var host: String
        var port: Int?
    }

    var entries: [Entry] = []

    init(entries: [Entry] = []) { self.entries = entries }

    /// Parses a comma-separated list of `host`, `host:port`, `[v6]` or `[v6]:port`; blanks
    /// around entries are ignored.
    init(parsing text: String) throws(ConfigurationError) {
        for raw in text.split(separator: ",") {
            let item = raw.trimmingCharacters(in: .whitespaces)
            if item.isEmpty { continue }
            var host = Substring(item)
            var port: Substring?
            if item.hasPrefix("[") {
                guard let close = item.firstIndex(of: "]") else {
                    throw ConfigurationError("CRASHGUARD_WEBHOOK_ALLOW_HOSTS: '\(item)' has no closing ']'")
                }
                host = item[item.index(after: item.startIndex)..<close]
                let rest = item[item.index(after: close)...]
                if !rest.isEmpty {
                    guard rest.hasPrefix(":") else {
                        throw ConfigurationError("CRASHGUARD_WEBHOOK_ALLOW_HOSTS: '\(item)' is not [host] or [host]:port")
                    }
                    port = rest.dropFirst()
                }
            } else if item.filter({ $0 == ":" }).count == 1, let colon = item.firstIndex(of: ":") {
                host = item[..<colon]
                port = item[item.index(after: colon)...]
            }
            var entry = Entry(host: host.lowercased(), port: nil)
            if let port {
                guard let number = Int(port), (1...65535).contains(number) else {
                    throw ConfigurationError("CRASHGUARD_WEBHOOK_ALLOW_HOSTS: '\(item)' has no port 1...65535 after ':'")
                }
                entry.port = number
            }
            guard !entry.host.isEmpty, !entry.host.contains(where: { $0 == "/" || $0 == "@" || $0.isWhitespace }) else {
                throw ConfigurationError("CRASHGUARD_WEBHOOK_ALLOW_HOSTS: '\(item)' is not a host or host:port")
            }
            entries.append(entry)
        }
    }

    /// True when `url`'s host (as written, any case) and port are listed.
    func allows(_ url: String) -> Bool {
        guard !entries.isEmpty, let parsed = URL(string: url), var host = parsed.host?.lowercased() else { return false }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = parsed.port ?? (parsed.scheme?.lowercased() == "https" ? 443 : 80)
        return entries.contains { $0.host == host && ($0.port == nil || $0.port == port) }
    }
}
