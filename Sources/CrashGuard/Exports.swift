// `import CrashGuard` gives the wire types (`Report`, `ReportKind`, `AppInfo`, `DeviceInfo`)
// its API and its examples use, without a second import.
@_exported import CrashWire
