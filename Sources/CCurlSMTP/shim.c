#include "CCurlSMTP.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t global_init_once = PTHREAD_ONCE_INIT;

static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

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
    pthread_once(&global_init_once, global_init);
    CURL *curl = curl_easy_init();
    if (!curl) {
        result.curl_code = CURLE_FAILED_INIT;
        snprintf(result.error, sizeof result.error, "curl_easy_init failed");
        return result;
    }
    char error[CURL_ERROR_SIZE] = {0};
    upload body = {message, message_length, 0};
    struct curl_slist *recipients = curl_slist_append(NULL, recipient);

    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    // smtp://: STARTTLS whenever the server offers it (required when asked); smtps:// is TLS from the start.
    curl_easy_setopt(curl, CURLOPT_USE_SSL, require_tls ? (long)CURLUSESSL_ALL : (long)CURLUSESSL_TRY);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca_file) curl_easy_setopt(curl, CURLOPT_CAINFO, ca_file);
    if (username) curl_easy_setopt(curl, CURLOPT_USERNAME, username);
    if (password) curl_easy_setopt(curl, CURLOPT_PASSWORD, password);
    curl_easy_setopt(curl, CURLOPT_MAIL_FROM, from);
    curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, recipients);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, read_message);
    curl_easy_setopt(curl, CURLOPT_READDATA, &body);
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, timeout_seconds);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout_seconds);

    CURLcode code = curl_easy_perform(curl);
    result.curl_code = (int)code;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.smtp_code);
    if (code != CURLE_OK) {
        snprintf(result.error, sizeof result.error, "%s", error[0] ? error : curl_easy_strerror(code));
    }
    curl_slist_free_all(recipients);
    curl_easy_cleanup(curl);
    return result;
}
