/// The 202 body of `POST /v1/reports`: what became of each report sent.
///
/// `accepted + duplicates + rejected.count` always equals the number of reports sent.
public struct IngestResponse: Codable, Sendable, Hashable {
    /// Reports newly stored.
    public var accepted: Int
    /// Reports whose id was already stored (a retry).
    public var duplicates: Int
    /// Invalid reports, by index in the batch.
    public var rejected: [Rejection]

    /// One invalid report and why.
    public struct Rejection: Codable, Sendable, Hashable {
        /// Index in the `reports` array.
        public var index: Int
        /// What was wrong, naming the field.
        public var error: String

        /// Creates a rejection.
        public init(index: Int, error: String) {
            self.index = index
            self.error = error
        }
    }

    /// Creates a response.
    public init(accepted: Int, duplicates: Int, rejected: [Rejection]) {
        self.accepted = accepted
        self.duplicates = duplicates
        self.rejected = rejected
    }
}

/// Every error response's body: `{"error": "..."}`.
public struct ErrorBody: Codable, Sendable, Hashable {
    /// What was wrong.
    public var error: String

    /// Creates an error body.
    public init(error: String) { self.error = error }
}
