import Foundation

/// What the dashboard reads and writes: its sign-in sessions, and the query service its
/// crash pages are built from.
///
/// The lists, detail, reports and stats go through ``QueryService``, triage through
/// ``TriageService``, the ones the REST API answers with, so a page and `/v1/...` never disagree.
protocol DashboardStore: Sendable {
    associatedtype Queries: QueryStore
    associatedtype Triage: TriageStore

    /// The crash pages' queries.
    var queries: QueryService<Queries> { get }
    /// The crash pages' triage forms (the REST routes' ``TriageService``).
    var triage: TriageService<Triage, Queries> { get }
    /// Signs in: stores `session`, ending at `expires`, for the project `readToken` belongs
    /// to, bound to the token, and returns that project; nil (nothing stored) when the token
    /// belongs to no project.
    func startSession(_ session: DashboardSessions.Session, expires: Date, readToken: String) async throws -> ProjectRef?
    /// The project of a stored session that has not expired and whose project still has the
    /// read token it was started with; nil otherwise.
    func project(session: DashboardSessions.Session) async throws -> ProjectRef?
    /// Signs out: deletes the session, so no copy of its cookie opens a page again.
    func endSession(_ session: DashboardSessions.Session) async throws
    /// One page of the releases list, as `GET /v1/projects/{p}/releases` answers it.
    func releases(_ project: ProjectRef, _ request: ReleaseListRequest) async throws -> ReleaseListBody
    /// A release's detail, as `GET /v1/projects/{p}/releases/{version}` answers it.
    func release(_ project: ProjectRef, _ request: ReleaseDetailRequest) async throws -> ReleaseDetailBody
    /// The alert rules page's rules (the REST routes' store, DashboardController+alerts.swift).
    var alertRules: PostgresAlertRuleStore { get }
    /// The project's webhooks, which a rule's webhook actions name.
    var webhooks: PostgresWebhookStore { get }
}
