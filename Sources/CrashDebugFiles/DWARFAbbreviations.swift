/// DWARF abbreviation tables (`.debug_abbrev`, Mach-O's `__debug_abbrev`), read for what
/// would make a symbolizer open another file.
enum DWARFAbbreviations {
    /// Appends a patch for each split-DWARF attribute (`DW_AT_dwo_name`, `DW_AT_GNU_dwo_name`:
    /// the path of a `.dwo` file) of the tables in the `size` bytes at `offset` of `data`,
    /// renaming it to 0x75, which no DWARF version defines, in as many bytes; false when the
    /// tables cannot be read to their end (the caller then hides the whole section).
    static func splitDWARFAttributes(
        in data: UnsafeRawBufferPointer, offset: UInt64, size: UInt64, into patches: inout [ELFDebugFile.Patch]
    ) -> Bool {
        guard offset < UInt64(data.count), size <= UInt64(data.count) - offset else { return false }
        var at = Int(offset)
        let end = Int(offset + size)
        /// An unsigned LEB128 number and its length; nil past the end or over 10 bytes.
        func leb() -> (value: UInt64, length: Int)? {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            let start = at
            while at < end, at - start < 10 {
                let byte = data[at]
                at += 1
                if shift < 64 { value |= UInt64(byte & 0x7f) << shift }
                shift += 7
                if byte & 0x80 == 0 { return (value, at - start) }
            }
            return nil
        }
        while at < end {
            guard let code = leb() else { return false }
            guard code.value != 0 else { continue }  // the end of one table; another may follow
            guard leb() != nil, at < end else { return false }  // tag, then the children flag
            at += 1
            while true {
                let start = at
                guard let attribute = leb(), let form = leb() else { return false }
                if attribute.value == 0, form.value == 0 { break }
                if form.value == 0x21 {  // DW_FORM_implicit_const: a signed LEB128 value follows
                    guard leb() != nil else { return false }
                }
                if attribute.value == 0x76 || attribute.value == 0x2130 {  // DW_AT_dwo_name, DW_AT_GNU_dwo_name
                    // 0x75, which no DWARF version defines, in as many bytes as before.
                    var bytes = [UInt8](repeating: 0x80, count: attribute.length)
                    bytes[0] = attribute.length == 1 ? 0x75 : 0xf5
                    bytes[attribute.length - 1] &= 0x7f
                    patches.append(ELFDebugFile.Patch(offset: start, bytes: bytes))
                }
            }
        }
        return true
    }
}
