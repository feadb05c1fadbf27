import HTTPTypes
import Hummingbird
import NIOCore
import Testing

@testable import Foyer

@Suite struct RequestFactsTests {
    private func request(contentType: String?) -> Request {
        var fields = HTTPFields()
        if let contentType { fields[.contentType] = contentType }
        let head = HTTPRequest(method: .post, scheme: "http", authority: "foyer.test", path: "/posts/1", headerFields: fields)
        return Request(head: head, body: .init(buffer: ByteBuffer()))
    }

    @Test(arguments: [
        ("application/x-www-form-urlencoded", true),
        ("Application/X-WWW-Form-URLEncoded; charset=utf-8", true),
        ("multipart/form-data; boundary=abc", true),
        ("Multipart/Form-Data; boundary=\"abc\"", true),
        // A multipart type without a boundary cannot be read as a form.
        ("multipart/form-data", false),
        ("multipart/mixed; boundary=abc", false),
        ("application/json", false),
        ("application/x-www-form-urlencode", false),
        ("", false),
    ])
    func aFormIsToldByItsContentTypeInAnyCase(contentType: String, isForm: Bool) {
        #expect(request(contentType: contentType).isForm == isForm)
    }

    @Test func noContentTypeIsNoForm() {
        #expect(!request(contentType: nil).isForm)
    }

    @Test func aPrefixIsComparedWholeAndInAnyCase() {
        #expect(Request.startsIgnoringCase("Multipart/FORM-data", with: "multipart/form-data"))
        #expect(Request.startsIgnoringCase("multipart/form-data", with: "multipart/form-data"))
        // One byte short, and one byte off.
        #expect(!Request.startsIgnoringCase("multipart/form-dat", with: "multipart/form-data"))
        #expect(!Request.startsIgnoringCase("multipart/form_data", with: "multipart/form-data"))
        #expect(!Request.startsIgnoringCase(nil, with: "multipart/form-data"))
    }

    /// Read as Hummingbird's `cookies[name]` reads them: the first pair called so, across every Cookie field.
    @Test func aCookieIsFoundByItsWholeNameInAnyCookieField() {
        func cookie(_ fields: [String], _ name: String = "foyer_session") -> String? {
            let head = HTTPRequest(
                method: .get, scheme: "http", authority: "foyer.test", path: "/posts",
                headerFields: HTTPFields(fields.map { HTTPField(name: .cookie, value: $0) })
            )
            return Request(head: head, body: .init(buffer: ByteBuffer())).cookie(named: name)
        }
        #expect(cookie(["foyer_session=abc"]) == "abc")
        #expect(cookie(["theme=dark;  foyer_session=abc; other=1"]) == "abc")
        #expect(cookie(["old_foyer_session=x; foyer_session_old=y; foyer_session=z"]) == "z", "a name is matched whole")
        #expect(cookie(["foyer_session=first; foyer_session=second"]) == "first")
        #expect(cookie(["theme=dark", "foyer_session=abc"]) == "abc", "in a second Cookie field")
        #expect(cookie(["foyer_session=a=b"]) == "a=b", "the value runs to the next ;")
        #expect(cookie(["foyer_session="]) == "")
        #expect(cookie(["foyer_session; theme=dark"]) == nil, "a name without = names no cookie")
        #expect(cookie(["FOYER_SESSION=abc"]) == nil, "names are matched with their case")
        #expect(cookie([]) == nil)
        #expect(cookie(["foyer_session=abc"], "foyer_sessio") == nil)
    }

    @Test func aFieldsValueIsTheSubscriptsWithoutItsCopy() {
        let fields = HTTPFields([
            HTTPField(name: .contentType, value: "text/html; charset=utf-8"), HTTPField(name: .vary, value: "Origin"),
            HTTPField(name: .vary, value: "Cookie"), HTTPField(name: .cookie, value: "a=1"), HTTPField(name: .cookie, value: "b=2"),
        ])
        for name in [HTTPField.Name.contentType, .vary, .cookie, .eTag] {
            #expect(fields.value(name) == fields[name], "\(name)")
            #expect(fields.has(name) == (fields[name] != nil), "\(name)")
        }
        #expect(fields.value(.vary) == "Origin, Cookie")
        #expect(fields.value(.cookie) == "a=1; b=2")
        #expect(fields.value(.eTag) == nil)
    }
}
