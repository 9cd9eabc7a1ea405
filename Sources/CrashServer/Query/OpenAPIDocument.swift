/// The OpenAPI 3.1 document of the whole API (docs/openapi.json, compiled in by SwiftPM's
/// `.embedInCode`), served at `GET /openapi.json`.
enum OpenAPIDocument {
    static let json = String(decoding: PackageResources.openapi_json, as: UTF8.self)
}
