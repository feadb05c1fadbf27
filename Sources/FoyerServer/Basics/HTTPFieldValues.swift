import HTTPTypes

extension HTTPFields {
    /// What `self[name]` gives, without its copy: the subscript joins the values of every field so named into a
    /// new string even when there is one, which for a long value (a page's Content-Type) is an allocation each time.
    @inlinable public func value(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            if found != nil { return self[name] }
            found = field.value
        }
        return found
    }

    /// Whether any field is called `name`, without joining their values to find out.
    @inlinable public func has(_ name: HTTPField.Name) -> Bool {
        contains { $0.name == name }
    }
}
