import Foundation
import NIOSSL

/// How alert e-mail is sent; part of ``ServerConfiguration``, whose
/// ``ServerConfiguration/settings`` name, read and check these. Delivery's polling, retries
/// and their backoff are the webhooks' (``WebhookSettings``): one outbox, one schedule.
public struct EmailSettings: Sendable, Equatable {
    /// `smtp://[user:password@]host[:port]` or `smtps://...`; empty: no e-mail.
    public var smtpURL = ""
    /// The sender address (`From` and `MAIL FROM`).
    public var from = ""
    /// How long one attempt may take, connection to the last reply.
    public var timeout: Duration = .seconds(30)
    /// PEM certificates trusted for the SMTP server besides the system's (a relay with a
    /// private CA); empty: the system's trust store only.
    public var caFile = ""

    /// The defaults.
    public init() {}

    /// Whether the server sends e-mail.
    var enabled: Bool { !smtpURL.isEmpty }

    /// Messages sent at once by one server.
    static let concurrency = 4

    /// How long a claimed delivery stays invisible to other senders: past the attempt's
    /// timeout, so a sender that died mid-attempt has its deliveries sent again by another.
    var lease: Duration { timeout + .seconds(5) }

    /// ``smtpURL``'s problem, nil when it is empty or fine.
    static func urlProblem(_ text: String) -> String? {
        guard !text.isEmpty else { return nil }
        do throws(ConfigurationError) {
            _ = try SMTPServer(url: text)
            return nil
        } catch {
            return error.description
        }
    }

    /// The settings' joint problem: a server without a sender, or a CA file that cannot be read.
    var problem: String? {
        guard enabled else { return nil }
        guard EmailAddress.isPlain(from) else {
            return "CRASHGUARD_EMAIL_FROM: a plain sender address (local@domain) is required with CRASHGUARD_SMTP_URL"
        }
        if !caFile.isEmpty, (try? NIOSSLCertificate.fromPEMFile(caFile))?.isEmpty != false {
            return "CRASHGUARD_SMTP_CA_FILE: '\(caFile)' is not a readable file of PEM certificates"
        }
        return nil
    }
}
