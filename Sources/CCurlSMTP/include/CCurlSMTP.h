#ifndef FOYER_CCURLSMTP_H
#define FOYER_CCURLSMTP_H

#include <stddef.h>

// One mail handed to an SMTP server by libcurl. curl_easy_setopt is variadic, which Swift cannot call: this shim
// sets the options and runs the transfer. Every string is NUL-terminated UTF-8; `username`, `password` and
// `ca_file` may be NULL.
typedef struct {
    // curl's CURLcode: 0 when the server accepted the mail.
    int curl_code;
    // The last SMTP reply code the server sent (e.g. 250, 421, 550); 0 when none came.
    long smtp_code;
    // What went wrong, in curl's words.
    char error[256];
} foyer_smtp_result;

foyer_smtp_result foyer_smtp_send(
    const char *url, const char *username, const char *password, const char *ca_file, int require_tls,
    const char *from, const char *recipient, const char *message, size_t message_length, long timeout_seconds
);

#endif
