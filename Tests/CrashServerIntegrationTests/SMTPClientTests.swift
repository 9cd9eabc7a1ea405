import Foundation
import PostgresNIO
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// The SMTP client against servers that misbehave on purpose (alerts.md, "Email"), each a
/// ``ScriptedSMTPServer`` on a real socket: an attempt ends with the error that says why, at
/// once or at its deadline, and its outcome in the outbox is a retry unless the server refused
/// the recipient or the message with a 5xx.
@Suite("SMTP client against hostile servers")
struct SMTPClientTests {
    static let message = Array("Subject: x\r\n\r\nhi\r\n".utf8)

    static func client(_ url: String, timeout: Duration = .seconds(30)) throws -> SMTPClient {
        try SMTPClient(server: try SMTPServer(url: url), timeout: timeout, heloName: "crash.example.com")
    }

    /// One attempt; its error, nil when the message was accepted.
    static func send(_ client: SMTPClient) async -> SMTPError? {
        do {
            try await client.send(from: "alerts@example.com", to: "ana@example.com", message: message)
            return nil
        } catch {
            return error
        }
    }

    /// The greeting and `EHLO` of a server that offers `extensions`.
    static func hello(_ extensions: [String] = []) -> [ScriptedSMTPServer.Step] {
        let lines = ["mail.example.com"] + extensions
        let reply = lines.enumerated().map { "250\($0.offset == lines.count - 1 ? " " : "-")\($0.element)\r\n" }.joined()
        return [.send("220 mail.example.com ESMTP\r\n"), .read, .send(reply)]
    }

    @Test("a reply line that never ends fails as 'reply too long' once past the line limit, long before the deadline")
    func endlessReplyLine() async throws {
        let server = try ScriptedSMTPServer([.endlessLine])
        defer { server.stop() }
        let error = await Self.send(try Self.client(server.url(), timeout: .seconds(60)))
        #expect(error?.description == "reply too long")
        #expect(error?.isPermanent == false)
        // The client closed the connection; the server could not write on.
        #expect(try await server.finished().closedByClient)
    }

    @Test("a server that never answers is cut off at SMTP_TIMEOUT: 'timeout', and the connection is closed")
    func silentServer() async throws {
        let server = try ScriptedSMTPServer([.drain])
        defer { server.stop() }
        let error = await Self.send(try Self.client(server.url(), timeout: .milliseconds(300)))
        #expect(error?.description == "timeout")
        #expect(error?.isPermanent == false)
        let record = try await server.finished()
        #expect(record.closedByClient && record.lines.isEmpty)
    }

    @Test("a silent server after the greeting is cut off at the deadline too")
    func silentAfterGreeting() async throws {
        let server = try ScriptedSMTPServer([.send("220 mail.example.com ESMTP\r\n"), .drain])
        defer { server.stop() }
        let error = await Self.send(try Self.client(server.url(), timeout: .milliseconds(300)))
        #expect(error?.description == "timeout")
        #expect(try await server.finished().lines == ["EHLO crash.example.com"])
    }

    /// A project with one crash group, an e-mail sender over `url` and a queued delivery of
    /// that group: `attempt` runs one attempt and answers the row's state.
    struct Outbox {
        let database: CrashDatabase
        let sender: EmailSender
        let email: ClaimedEmail

        /// One attempt through the sender; the outbox row afterwards.
        func attempt(_ client: SMTPClient) async throws -> (state: String, attempts: Int32, status: Int32?, error: String?, due: Bool) {
            await sender.attempt(email, client)
            let rows = try await database.client.query(
                """
                SELECT state, attempts, last_status, last_error, next_attempt_at > now()
                FROM webhook_deliveries WHERE id = \(email.id)
                """, logger: database.logger)
            for try await row in rows.decode((String, Int32, Int32?, String?, Bool).self) {
                return (row.0, row.1, row.2, row.3, row.4)
            }
            throw TestFailure("delivery \(email.id) is gone")
        }

        /// Queues a fresh delivery of the group (as a rule's firing does) in `database`.
        static func make(_ database: CrashDatabase, project: ProjectCredentials) async throws -> Outbox {
            let rows = try await database.client.query(
                """
                SELECT p.id, g.id FROM projects p JOIN crash_groups g ON g.project_id = p.id WHERE p.slug = \(project.project)
                """, logger: database.logger)
            var ids: (Int64, Int64)?
            for try await row in rows.decode((Int64, Int64).self) { ids = row }
            let (projectID, groupID) = try #require(ids)
            let id = UUID()
            try await database.client.query(
                """
                INSERT INTO webhook_deliveries (id, group_id, event, email_to) VALUES (\(id), \(groupID), 'group.new', 'ana@example.com')
                """, logger: database.logger)
            var settings = EmailSettings()
            settings.smtpURL = "smtp://127.0.0.1:25"
            settings.from = "alerts@example.com"
            let sender = EmailSender(
                store: PostgresEmailOutboxStore(database: database), queries: PostgresQueryStore(database: database),
                schemaApplied: ReadyFlag(), settings: settings, schedule: WebhookSettings(), publicURL: "https://crash.example.com",
                metrics: ServerMetrics(), logger: TestEnvironment.logger)
            let email = ClaimedEmail(
                id: id, event: "group.new", groupID: groupID, release: nil, attempts: 0, createdAt: Date(), to: "ana@example.com",
                projectID: projectID, projectSlug: project.project, rule: nil, ruleSpec: nil)
            return Outbox(database: database, sender: sender, email: email)
        }
    }

    /// A project with one group, and `body` with its database.
    func withGroup(_ body: @escaping @Sendable (CrashDatabase, ProjectCredentials) async throws -> Void) async throws {
        let p = try await makeProject()
        try await withApp { client in
            try await client.send([queryReport("smtp hostile", at: Date().addingTimeInterval(-60))], key: p.ingestKey)
        }
        try await withTestDatabase { database in
            do {
                try await body(database, p)
            } catch {
                try await Self.deleteDeliveries(database, p)
                throw error
            }
            try await Self.deleteDeliveries(database, p)
        }
    }

    /// Leaves no pending e-mail of this test for another test's sender to claim.
    static func deleteDeliveries(_ database: CrashDatabase, _ p: ProjectCredentials) async throws {
        try await database.client.query(
            """
            DELETE FROM webhook_deliveries WHERE email_to IS NOT NULL
              AND group_id IN (SELECT g.id FROM crash_groups g JOIN projects p ON p.id = g.project_id WHERE p.slug = \(p.project))
            """, logger: database.logger)
    }

    /// STARTTLS offered and answered, then no TLS: (a) the server answers the handshake with
    /// plain text; (b) it sends a reply right behind its 220, before the handshake, as a
    /// machine in the middle would to answer the commands meant for inside TLS.
    @Test(
        "STARTTLS then a failed handshake, or plain text before it: nothing more is sent in plain text and the delivery stays in the outbox for a retry",
        arguments: [false, true])
    func failedSTARTTLS(injected: Bool) async throws {
        try await withGroup { database, p in
            let outbox = try await Outbox.make(database, project: p)
            let upgrade: [ScriptedSMTPServer.Step] =
                injected
                ? [.send("220 2.0.0 ready to start TLS\r\n250-mail.example.com\r\n250 AUTH PLAIN\r\n"), .drain]
                : [.send("220 2.0.0 ready to start TLS\r\n"), .readBytes, .send("250 not TLS at all\r\n"), .drain]
            let server = try ScriptedSMTPServer(Self.hello(["STARTTLS", "AUTH PLAIN LOGIN"]) + [.read] + upgrade)
            defer { server.stop() }
            let row = try await outbox.attempt(try Self.client(server.url(credentials: "crash:secret")))
            #expect(row.state == "pending" && row.attempts == 1 && row.due)
            #expect(
                row.error
                    == (injected ? "server sent data after its STARTTLS reply, before TLS" : "TLS handshake or certificate failed"))
            let record = try await server.finished()
            #expect(Array(record.lines.prefix(2)) == ["EHLO crash.example.com", "STARTTLS"])
            // After STARTTLS at most the TLS handshake's bytes: no command, no credentials, no message.
            let plain = record.lines.dropFirst(2).joined(separator: "\n")
            for word in [
                "EHLO", "AUTH", "MAIL FROM", "RCPT TO", "DATA", "Subject", "ana@example.com",
                Data("\0crash\0secret".utf8).base64EncodedString(),
            ] {
                #expect(!plain.contains(word), "\(word) went in plain text")
            }
        }
    }

    @Test("4xx to RCPT or to the message is retried, 5xx to either fails the delivery for good, 250 delivers")
    func refusalsInTheOutbox() async throws {
        let envelope: [ScriptedSMTPServer.Step] = Self.hello() + [.read, .send("250 2.1.0 ok\r\n"), .read]
        let message: [ScriptedSMTPServer.Step] = envelope + [.send("250 2.1.5 ok\r\n"), .read, .send("354 go ahead\r\n"), .readData]
        let cases: [(name: String, script: [ScriptedSMTPServer.Step], state: String, status: Int32?, error: String?)] = [
            ("RCPT 451", envelope + [.send("451 4.3.0 try later\r\n"), .drain], "pending", 451, "RCPT TO: 451 4.3.0 try later"),
            ("RCPT 550", envelope + [.send("550 5.1.1 no such user\r\n"), .drain], "failed", 550, "RCPT TO: 550 5.1.1 no such user"),
            ("DATA 452", message + [.send("452 4.3.1 out of storage\r\n"), .drain], "pending", 452, "DATA: 452 4.3.1 out of storage"),
            ("DATA 554", message + [.send("554 5.6.0 refused\r\n"), .drain], "failed", 554, "DATA: 554 5.6.0 refused"),
            ("DATA 250", message + [.send("250 2.0.0 queued\r\n"), .read, .send("221 bye\r\n")], "delivered", nil, nil),
        ]
        try await withGroup { database, p in
            for test in cases {
                let outbox = try await Outbox.make(database, project: p)
                let server = try ScriptedSMTPServer(test.script)
                defer { server.stop() }
                let row = try await outbox.attempt(try Self.client(server.url()))
                #expect(row.state == test.state, "\(test.name)")
                #expect(row.status == test.status && row.error == test.error, "\(test.name): \(row)")
                #expect(row.attempts == 1 && row.due == (test.state == "pending"), "\(test.name): \(row)")
                let record = try await server.finished()
                #expect(record.lines.first == "EHLO crash.example.com", "\(test.name)")
                #expect(record.lines.contains("RCPT TO:<ana@example.com>"), "\(test.name)")
            }
        }
    }
}
