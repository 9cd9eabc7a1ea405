// An empty stand-in for swift-http-types: the server's IngestDecoding.swift imports it for
// `APIError.status.code`, which the fuzz package's APIError provides without it.
public enum FuzzHTTPTypesStandIn {}
