import Mustache
import NIOCore

/// The dashboard's templates and stylesheet, embedded in the binary (SwiftPM
/// `embedInCode` resources, so a container needs no files beside it).
struct DashboardPages: Sendable {
    let library: MustacheLibrary
    let stylesheet: ByteBuffer

    init() throws {
        let templates: [(String, [UInt8])] = [
            ("header", PackageResources.header_mustache), ("footer", PackageResources.footer_mustache),
            ("signin", PackageResources.signin_mustache), ("error", PackageResources.error_mustache),
            ("overview", PackageResources.overview_mustache), ("crashes", PackageResources.crashes_mustache),
            ("crash", PackageResources.crash_mustache), ("grouptable_new", PackageResources.grouptable_new_mustache),
            ("grouptable_regressed", PackageResources.grouptable_regressed_mustache),
            ("releases", PackageResources.releases_mustache), ("release", PackageResources.release_mustache),
            ("setup", PackageResources.setup_mustache), ("projects", PackageResources.projects_mustache),
            ("members", PackageResources.members_mustache), ("tokens", PackageResources.tokens_mustache),
            ("triagepanel", PackageResources.triagepanel_mustache), ("bulk", PackageResources.bulk_mustache),
            ("alerts", PackageResources.alerts_mustache),
        ]
        HTMLEscaping.register()
        var library = MustacheLibrary()
        for (name, bytes) in templates {
            try library.register(HTMLEscaping.selectingScalarEscaping(String(decoding: bytes, as: UTF8.self)), named: name)
        }
        self.library = library
        stylesheet = ByteBuffer(bytes: PackageResources.dashboard_css)
    }

    /// `view` rendered with the template `name`; every `{{value}}` HTML-escaped per Unicode
    /// scalar (``HTMLEscaping``).
    func render(_ view: Any, _ name: String) throws -> String {
        guard let text = library.render(view, withTemplate: name) else { throw DashboardTemplateMissing(name: name) }
        return text
    }
}

struct DashboardTemplateMissing: Error, CustomStringConvertible {
    var name: String
    var description: String { "no dashboard template '\(name)'" }
}
