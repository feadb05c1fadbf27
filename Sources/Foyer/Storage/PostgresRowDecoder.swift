import Foundation
import PostgresNIO

extension PostgresRandomAccessRow {
    /// The row as a Decodable record, by column name: `camelCase` properties from `snake_case` columns, as GRDB
    /// reads the same records from SQLite. `prefix`: a join's columns renamed so they cannot clash
    /// (`PostgresUsers.columns(as:)`). A column that is absent or NULL decodes as nil for an optional property.
    func decode<Record: Decodable>(_ type: Record.Type, prefix: String = "") throws -> Record {
        try Record(from: RowDecoder(row: self, prefix: prefix))
    }
}

private struct RowDecoder: Decoder {
    let row: PostgresRandomAccessRow
    let prefix: String
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(RowColumns<Key>(row: row, prefix: prefix))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw unsupported("a list") }
    func singleValueContainer() throws -> any SingleValueDecodingContainer { throw unsupported("a single value") }

    private func unsupported(_ what: String) -> DecodingError {
        .typeMismatch(Any.self, .init(codingPath: [], debugDescription: "a PostgreSQL row decodes as a record, not as \(what)"))
    }
}

private struct RowColumns<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let row: PostgresRandomAccessRow
    let prefix: String
    var codingPath: [any CodingKey] { [] }
    var allKeys: [Key] { [] }

    func column(_ key: Key) -> String { prefix + Self.snakeCase(key.stringValue) }

    func contains(_ key: Key) -> Bool { row.contains(column(key)) }

    func decodeNil(forKey key: Key) throws -> Bool { !contains(key) || row[column(key)].bytes == nil }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard contains(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: [], debugDescription: "the row has no column \(column(key))"))
        }
        return try CellDecoder(cell: row[column(key)]).decode(type)
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decode(type as Bool.Type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decode(type as String.Type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decode(type as Double.Type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try decode(type as Float.Type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decode(type as Int.Type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try decode(type as Int8.Type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try decode(type as Int16.Type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decode(type as Int32.Type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decode(type as Int64.Type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try decode(type as UInt.Type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try decode(type as UInt8.Type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try decode(type as UInt16.Type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try decode(type as UInt32.Type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try decode(type as UInt64.Type, key) }

    /// The generic path, for the fixed-type requirements above.
    private func decode<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
        try decode(type, forKey: key)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        throw DecodingError.typeMismatch(type, .init(codingPath: [key], debugDescription: "a column holds no nested record"))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: [key], debugDescription: "a column holds no list"))
    }

    func superDecoder() throws -> any Decoder { throw DecodingError.typeMismatch(Any.self, .init(codingPath: [], debugDescription: "no super")) }
    func superDecoder(forKey key: Key) throws -> any Decoder { try superDecoder() }

    /// `accessExpiresAt` → `access_expires_at`, as GRDB's `convertToSnakeCase` spells columns.
    static func snakeCase(_ name: String) -> String {
        var column = ""
        for character in name {
            if character.isUppercase {
                if !column.isEmpty { column.append("_") }
                column.append(contentsOf: character.lowercased())
            } else {
                column.append(character)
            }
        }
        return column
    }
}

/// One column's value: PostgreSQL's own decoding for the types it knows (text, integers, timestamps, bytea…),
/// and a raw-value type (an enum stored as text) through its single value.
private struct CellDecoder: Decoder, SingleValueDecodingContainer {
    let cell: PostgresCell
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        throw DecodingError.typeMismatch(type, .init(codingPath: [], debugDescription: "column \(cell.columnName) holds no nested record"))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: [], debugDescription: "column \(cell.columnName) holds no list"))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func decodeNil() -> Bool { cell.bytes == nil }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        if type is any PostgresDecodable.Type { return try known(type) }
        return try T(from: self)
    }

    /// A type PostgresNIO decodes itself; any other basic type is not one a Foyer column holds.
    private func known<T>(_ type: T.Type) throws -> T {
        guard let known = type as? any PostgresDecodable.Type else {
            throw DecodingError.typeMismatch(type, .init(codingPath: [], debugDescription: "column \(cell.columnName) cannot be read as \(type)"))
        }
        return try decodeKnown(known) as! T
    }

    private func decodeKnown<Value: PostgresDecodable>(_ type: Value.Type) throws -> Value { try cell.decode(type) }

    func decode(_ type: Bool.Type) throws -> Bool { try known(type) }
    func decode(_ type: String.Type) throws -> String { try known(type) }
    func decode(_ type: Double.Type) throws -> Double { try known(type) }
    func decode(_ type: Float.Type) throws -> Float { try known(type) }
    func decode(_ type: Int.Type) throws -> Int { try known(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try known(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try known(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try known(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try known(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try known(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try known(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try known(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try known(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try known(type) }
}
