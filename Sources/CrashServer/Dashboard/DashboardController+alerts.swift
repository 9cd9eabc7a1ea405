import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// The project's alert rules page (`/projects/{project}/alerts`): the rules with their
/// trigger, filters, actions, throttle and last firing; a form that creates a rule, the same
/// form filled in to edit one (`/projects/{project}/alerts/{id}`), and buttons that enable,
/// disable or delete. Plain HTML forms with the CSRF token, answered with a redirect, so no
/// JavaScript is needed. A form becomes the JSON object of the REST routes and is checked by
/// ``AlertRule/parse(_:context:)``, so the page refuses what `POST .../alert-rules` refuses,
/// with the same message. Changing rules takes the admin role (a read-token session may, as
/// the read token may through the API).
extension DashboardController {
    func addAlertRoutes(to group: some RouterMethods<CrashRequestContext>) {
        group.get("/projects/:project/alerts", use: alertsPage)
        group.get("/projects/:project/alerts/:id", use: alertRulePage)
        group.post("/projects/:project/alerts", use: changeAlertRules)
    }

    @Sendable func alertsPage(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let notice = DashboardQuery.formFields(request.uri.query ?? "").first { $0.0 == "changed" }?.1
        return try await alertsView(project, session, form: AlertRuleForm(), editing: nil, notice: notice, error: nil)
    }

    @Sendable func alertRulePage(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        let id = try Self.ruleID(context.parameters.get("id"), project)
        guard let stored = try await store.alertRules.rule(project: project.id, id: id) else {
            throw APIError.notFound("no alert rule \(id) in project '\(project.slug)'")
        }
        return try await alertsView(project, session, form: AlertRuleForm(stored.rule), editing: id, notice: nil, error: nil)
    }

    /// `action` = create, update (`id`), enable, disable or delete (`id`).
    @Sendable func changeAlertRules(request: Request, context: CrashRequestContext) async throws -> Response {
        let (session, project) = try await signedIn(request, context)
        if let user = context.user, try await userProject(user, request, context).1 < .admin {
            throw AccountError.forbidden("changing alert rules takes the admin role on \(project.slug)")
        }
        let form = try await Self.form(request, as: AlertRuleForm.self)
        guard DashboardSessions.equal(sessions.csrfToken(for: session), form.csrf ?? "") else { throw DashboardError.forbidden }
        let rules = store.alertRules
        let ruleContext = AlertRule.Context(webhooks: try await rules.webhookIDs(project: project.id), email: people.email)
        let action = form.action ?? ""
        var target: Int64?
        switch action {
        case "create", "update":
            let rule: AlertRule
            do {
                rule = try AlertRule.parse(object: form.object, context: ruleContext)
            } catch let error as APIError {
                let editing = action == "update" ? try Self.ruleID(form.id, project) : nil
                return try await alertsView(project, session, form: form, editing: editing, notice: nil, error: error.message, status: error.status)
            }
            if action == "create" {
                guard let stored = try await rules.create(project: project.id, rule) else {
                    throw APIError.badRequest("name: the project already has \(AlertRule.maxPerProject) rules; delete one first")
                }
                target = stored.id
            } else {
                let id = try Self.ruleID(form.id, project)
                guard try await rules.update(project: project.id, id: id, rule) != nil else {
                    throw APIError.notFound("no alert rule \(id) in project '\(project.slug)'")
                }
                target = id
            }
        case "enable", "disable":
            let id = try Self.ruleID(form.id, project)
            guard var stored = try await rules.rule(project: project.id, id: id) else {
                throw APIError.notFound("no alert rule \(id) in project '\(project.slug)'")
            }
            stored.rule.enabled = action == "enable"
            stored.rule.json["enabled"] = .bool(stored.rule.enabled)
            _ = try await rules.update(project: project.id, id: id, stored.rule)
            target = id
        case "delete":
            let id = try Self.ruleID(form.id, project)
            guard try await rules.delete(project: project.id, id: id) else {
                throw APIError.notFound("no alert rule \(id) in project '\(project.slug)'")
            }
            target = id
        default: throw APIError.badRequest("action: must be create, update, enable, disable or delete")
        }
        let auditAction = action == "create" ? "alert-rule.create" : action == "delete" ? "alert-rule.delete" : "alert-rule.update"
        await people.audit.record(
            auditAction, by: context.principal, project: project, target: target.map(String.init), address: context.clientAddress)
        logger.info("dashboard alert rule \(action)", metadata: ["project.slug": "\(project.slug)", "rule.id": "\(target ?? 0)"])
        return DashboardResponse.redirect("/projects/\(project.slug)/alerts?changed=\(action)")
    }

    private static func ruleID(_ text: String?, _ project: ProjectRef) throws -> Int64 {
        guard let id = Int64(text ?? ""), id > 0 else {
            throw APIError.notFound("no alert rule '\((text ?? "").prefix(64))' in project '\(project.slug)'")
        }
        return id
    }

    private func alertsView(
        _ project: ProjectRef, _ session: DashboardSessions.Session, form: AlertRuleForm, editing: Int64?, notice: String?,
        error: String?, status: HTTPResponse.Status = .ok
    ) async throws -> Response {
        let stored = try await store.alertRules.list(project: project.id)
        let hooks = try await store.webhooks.list(project: project.id)
        var nav = nav(project, session)
        nav.alerts = true
        let csrf = sessions.csrfToken(for: session)
        let checked = Set(form.webhook ?? [])
        let view = AlertRulesView(
            pageTitle: "Alert rules", nav: nav, project: project.slug, csrf: csrf,
            notice: notice.map { "Rule \($0 == "create" ? "created" : $0 == "delete" ? "deleted" : "saved")." }, error: error,
            hasRules: !stored.isEmpty,
            rules: stored.map { AlertRuleRowView($0, hooks: hooks, project: project.slug, csrf: csrf) },
            form: AlertRuleFormView(
                editing: editing.map(String.init), values: form,
                triggers: AlertRuleFormView.triggerNames.map { .init(value: $0.0, label: $0.1, selected: $0.0 == (form.type ?? "group.new")) },
                fatal: [("", "any"), ("true", "fatal"), ("false", "not fatal")].map {
                    .init(value: $0.0, label: $0.1, selected: $0.0 == (form.fatal ?? ""))
                },
                webhooks: hooks.map { .init(id: $0.id, url: $0.url, checked: checked.contains($0.id)) }, hasWebhooks: !hooks.isEmpty,
                email: people.email, enabled: form.enabled != nil || form.action == nil))
        return try html(view, "alerts", status: status)
    }
}

/// The rule form's fields (also the enable, disable and delete buttons').
struct AlertRuleForm: Decodable {
    var action: String?
    var id: String?
    var csrf: String?
    var name: String?
    var type: String?
    var count: String?
    var windowMinutes: String?
    var below: String?
    var release: String?
    var minSessions: String?
    var environment: String?
    var version: String?
    var kind: String?
    var os: String?
    var fatal: String?
    var webhook: [String]?
    var email: String?
    var throttleMinutes: String?
    var enabled: String?

    init() {}

    /// A stored rule's fields, to fill in the form.
    init(_ rule: AlertRule) {
        name = rule.name
        type = rule.when.type
        switch rule.when {
        case .frequency(let n, let w), .devices(let n, let w):
            count = String(n)
            windowMinutes = String(w)
        case .crashFreeSessions(let r, let v, let m, let w):
            below = String(r)
            release = v
            minSessions = String(m)
            windowMinutes = String(w)
        default: break
        }
        let f = rule.filters
        environment = f.environment.joinedList
        version = f.version.joinedList
        kind = f.kind.joinedList
        os = f.os.joinedList
        fatal = f.fatal.map { $0 ? "true" : "false" }
        webhook = rule.webhookIDs.map(String.init)
        email = rule.emailAddresses.joined(separator: ", ")
        throttleMinutes = String(rule.throttleMinutes)
        enabled = rule.enabled ? "on" : nil
    }

    /// The rule as the REST routes' JSON object: a field left empty is not sent, a number
    /// field that is not a number is sent as text (so the check names it), lists are split
    /// at commas.
    var object: [String: JSONValue] {
        func number(_ text: String?) -> JSONValue? {
            let t = (text ?? "").trimmingCharacters(in: .whitespaces)
            if t.isEmpty { return nil }
            return Double(t).map(JSONValue.number) ?? .string(t)
        }
        func list(_ text: String?) -> JSONValue? {
            let items = (text ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            return items.isEmpty ? nil : .array(items.map(JSONValue.string))
        }
        var when: [String: JSONValue] = ["type": .string(type ?? "")]
        switch type {
        case "frequency", "devices":
            when["count"] = number(count)
            when["windowMinutes"] = number(windowMinutes)
        case "crashFreeSessions":
            when["below"] = number(below)
            when["minSessions"] = number(minSessions)
            when["windowMinutes"] = number(windowMinutes)
            let v = (release ?? "").trimmingCharacters(in: .whitespaces)
            if !v.isEmpty { when["release"] = .string(v) }
        default: break
        }
        var filters: [String: JSONValue] = [:]
        filters["environment"] = list(environment)
        filters["version"] = list(version)
        filters["kind"] = list(kind)
        filters["os"] = list(os)
        if let fatal, !fatal.isEmpty { filters["fatal"] = .bool(fatal == "true") }
        var actions: [JSONValue] = (webhook ?? []).map { .object(["type": .string("webhook"), "webhook": .string($0)]) }
        if case .array(let to)? = list(email?.replacingOccurrences(of: " ", with: ",")) {
            actions.append(.object(["type": .string("email"), "to": .array(to)]))
        }
        var object: [String: JSONValue] = [
            "name": .string((name ?? "").trimmingCharacters(in: .whitespaces)), "when": .object(when), "filters": .object(filters),
            "actions": .array(actions), "enabled": .bool(enabled != nil),
        ]
        object["throttleMinutes"] = number(throttleMinutes)
        return object
    }
}

extension Optional where Wrapped == [String] {
    fileprivate var joinedList: String? { self?.joined(separator: ", ") }
}

extension PostgresDashboardStore {
    var alertRules: PostgresAlertRuleStore { PostgresAlertRuleStore(database: database) }
    var webhooks: PostgresWebhookStore { PostgresWebhookStore(database: database) }
}

struct AlertRulesView: Sendable {
    var pageTitle: String
    var nav: NavView
    var project: String
    var csrf: String
    var notice: String?
    var error: String?
    var hasRules: Bool
    var rules: [AlertRuleRowView]
    var form: AlertRuleFormView
}

/// One rule of the list.
struct AlertRuleRowView: Sendable {
    var id: String
    var name: String
    var trigger: String
    var filters: String
    var actions: String
    var throttle: String
    var enabled: Bool
    var lastFired: String
    var project: String
    var csrf: String

    init(_ stored: StoredAlertRule, hooks: [WebhookBody], project: String, csrf: String) {
        let rule = stored.rule
        id = String(stored.id)
        name = rule.name
        switch rule.when {
        case .frequency(let n, let w): trigger = "\(n) reports in \(w) minutes"
        case .devices(let n, let w): trigger = "\(n) devices in \(w) minutes"
        case .crashFreeSessions(let r, let v, let m, let w):
            trigger = "crash-free sessions below \(WebhookPayload.percent(r)) (\(v ?? "each version"), at least \(m) sessions in \(w) minutes)"
        default: trigger = AlertEventWords.words(rule.when.event)
        }
        let f = rule.filters
        var parts: [String] = []
        for (label, values) in [("environment", f.environment), ("version", f.version), ("kind", f.kind), ("os", f.os)] {
            if let values { parts.append("\(label) \(values.joined(separator: ", "))") }
        }
        if let fatal = f.fatal { parts.append(fatal ? "fatal" : "not fatal") }
        if let context = f.context { parts.append(context.keys.sorted().map { "\($0)=\(context[$0]!)" }.joined(separator: ", ")) }
        filters = parts.isEmpty ? "every report" : parts.joined(separator: "; ")
        let urls = Dictionary(hooks.map { ($0.id, $0.url) }, uniquingKeysWith: { a, _ in a })
        var actionParts = rule.webhookIDs.map { "webhook \(urls[String($0)] ?? "#\($0)")" }
        if !rule.emailAddresses.isEmpty { actionParts.append("e-mail \(rule.emailAddresses.joined(separator: ", "))") }
        actions = actionParts.joined(separator: "; ")
        throttle = "\(rule.throttleMinutes) min"
        enabled = rule.enabled
        if let at = stored.lastFiredAt {
            let what = stored.lastFiredRelease.map { "version \($0)" } ?? stored.lastFiredGroup.map { "#\($0)" } ?? ""
            lastFired = "\(DashboardFormat.exact(at)) \(what)"
        } else {
            lastFired = "never"
        }
        self.project = project
        self.csrf = csrf
    }
}

/// The create or edit form, filled in.
struct AlertRuleFormView: Sendable {
    struct Option: Sendable {
        var value: String
        var label: String
        var selected: Bool
    }
    struct Hook: Sendable {
        var id: String
        var url: String
        var checked: Bool
    }
    static let triggerNames: [(String, String)] = [
        ("group.new", "New crash"), ("group.regressed", "Regressed crash"), ("group.reappeared", "Reappeared crash"),
        ("frequency", "Reports in a window"), ("devices", "Devices in a window"), ("spike", "Crash spike"),
        ("crashFreeSessions", "Crash-free sessions of a release"),
    ]
    /// The id of the rule being edited; nil on the create form.
    var editing: String?
    var name: String
    var count: String
    var windowMinutes: String
    var below: String
    var release: String
    var minSessions: String
    var environment: String
    var version: String
    var kind: String
    var os: String
    var emailTo: String
    var throttleMinutes: String
    var triggers: [Option]
    var fatal: [Option]
    var webhooks: [Hook]
    var hasWebhooks: Bool
    /// The server sends e-mail: the addresses field is shown.
    var email: Bool
    var enabled: Bool

    init(
        editing: String?, values f: AlertRuleForm, triggers: [Option], fatal: [Option], webhooks: [Hook], hasWebhooks: Bool, email: Bool,
        enabled: Bool
    ) {
        self.editing = editing
        name = f.name ?? ""
        count = f.count ?? ""
        windowMinutes = f.windowMinutes ?? ""
        below = f.below ?? ""
        release = f.release ?? ""
        minSessions = f.minSessions ?? ""
        environment = f.environment ?? ""
        version = f.version ?? ""
        kind = f.kind ?? ""
        os = f.os ?? ""
        emailTo = f.email ?? ""
        throttleMinutes = f.throttleMinutes ?? ""
        self.triggers = triggers
        self.fatal = fatal
        self.webhooks = webhooks
        self.hasWebhooks = hasWebhooks
        self.email = email
        self.enabled = enabled
    }
}
