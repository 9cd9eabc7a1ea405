import HTTPTypes

extension HTTPFields {
    /// `self[name]` (the values of every field named `name`, joined with ", "), without
    /// building a new string when the field was sent once, as it nearly always is: the join
    /// of swift-http-types was about 1 % of the server's CPU per single-report request, for
    /// four headers (docs/performance.md).
    func value(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            guard found == nil else { return self[name] }
            found = field.value
        }
        return found
    }
}
