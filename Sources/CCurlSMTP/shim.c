#include "CCurlSMTP.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
// curl_easy_setopt as the function it is, not the type-checking macro: it is called through a pointer below.
#define CURL_DISABLE_TYPECHECK
#include <curl/curl.h>

// libcurl and the thirty libraries it needs (OpenSSL, GnuTLS, Kerberos, LDAP…) are loaded at the first mail, not
// when Foyer starts: an instance that sends none never maps them. Every function of it used below goes through
// `lib`, filled by `load`.
#define CURL_FUNCTIONS(X) \
    X(curl_global_init) \
    X(curl_easy_init) \
    X(curl_slist_append) \
    X(curl_easy_setopt) \
    X(curl_easy_perform) \
    X(curl_easy_getinfo) \
    X(curl_easy_strerror) \
    X(curl_slist_free_all) \
    X(curl_easy_cleanup)

static struct {
#define FIELD(name) __typeof__(name) *name;
    CURL_FUNCTIONS(FIELD)
#undef FIELD
} lib;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void) {
    void *handle = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        snprintf(load_error, sizeof load_error, "%s", dlerror());
        return;
    }
#define LOAD(name) \
    if (!(lib.name = dlsym(handle, #name))) { \
        snprintf(load_error, sizeof load_error, "libcurl has no %s", #name); \
        return; \
    }
    CURL_FUNCTIONS(LOAD)
#undef LOAD
    lib.curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct {
    const char *bytes;
    size_t length;
    size_t sent;
} upload;

static size_t read_message(char *buffer, size_t size, size_t count, void *context) {
    upload *message = context;
    size_t room = size * count, left = message->length - message->sent;
    size_t n = left < room ? left : room;
    memcpy(buffer, message->bytes + message->sent, n);
    message->sent += n;
    return n;
}

foyer_smtp_result foyer_smtp_send(
    const char *url, const char *username, const char *password, const char *ca_file, int require_tls,
    const char *from, const char *recipient, const char *message, size_t message_length, long timeout_seconds
) {
    foyer_smtp_result result = {0, 0, {0}};
    pthread_once(&load_once, load);
    if (load_error[0]) {
        result.curl_code = CURLE_FAILED_INIT;
        snprintf(result.error, sizeof result.error, "libcurl could not be loaded: %s", load_error);
        return result;
    }
    CURL *curl = lib.curl_easy_init();
    if (!curl) {
        result.curl_code = CURLE_FAILED_INIT;
        snprintf(result.error, sizeof result.error, "curl_easy_init failed");
        return result;
    }
    char error[CURL_ERROR_SIZE] = {0};
    upload body = {message, message_length, 0};
    struct curl_slist *recipients = lib.curl_slist_append(NULL, recipient);

    lib.curl_easy_setopt(curl, CURLOPT_URL, url);
    lib.curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
    lib.curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    // smtp://: STARTTLS whenever the server offers it (required when asked); smtps:// is TLS from the start.
    lib.curl_easy_setopt(curl, CURLOPT_USE_SSL, require_tls ? (long)CURLUSESSL_ALL : (long)CURLUSESSL_TRY);
    lib.curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    lib.curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca_file) lib.curl_easy_setopt(curl, CURLOPT_CAINFO, ca_file);
    if (username) lib.curl_easy_setopt(curl, CURLOPT_USERNAME, username);
    if (password) lib.curl_easy_setopt(curl, CURLOPT_PASSWORD, password);
    lib.curl_easy_setopt(curl, CURLOPT_MAIL_FROM, from);
    lib.curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, recipients);
    lib.curl_easy_setopt(curl, CURLOPT_READFUNCTION, read_message);
    lib.curl_easy_setopt(curl, CURLOPT_READDATA, &body);
    lib.curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    lib.curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, timeout_seconds);
    lib.curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout_seconds);

    CURLcode code = lib.curl_easy_perform(curl);
    result.curl_code = (int)code;
    lib.curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.smtp_code);
    if (code != CURLE_OK) {
        snprintf(result.error, sizeof result.error, "%s", error[0] ? error : lib.curl_easy_strerror(code));
    }
    lib.curl_slist_free_all(recipients);
    lib.curl_easy_cleanup(curl);
    return result;
}
