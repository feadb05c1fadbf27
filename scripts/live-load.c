// Load client for scripts/bench-live: holds N live subscribers on one Foyer (server-sent events on a task stream,
// or graphql-transport-ws subscriptions to taskAdded), makes a series of task changes through POST /graphql, and
// times each change from the write's acknowledgement until the last subscriber received it. `nchan` does the same
// against nginx's nchan module, for comparison: EventSource subscribers on STREAM_PATH, each change a message of
// the size of a Foyer task event POSTed to /pub. `posts`: subscribers of the public posts stream, signed out, each
// change a post written through POST /api/v1/posts by TOKEN's account; with BLOCKER_TOKEN and BLOCKING, that many
// of the subscribers are signed in as an account that blocked the writer: delivery is timed to the others, and
// whatever reaches a blocking subscriber is counted (blocked_events, 0 is right).
//
//   live-load sse|ws|nchan|posts PORT STREAM_PATH TOKEN SUBSCRIBERS CHANGES PIDS [BLOCKER_TOKEN BLOCKING]
//
// PIDS: the server's process ids, comma-separated (nginx's master and workers); their resident memory is summed.
// Prints key=value lines: resident memory before and after subscribing, and per-change delivery times.
// Loopback only; every wait is bounded, and it exits by itself.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { SSE, WS, NCHAN, POSTS };
enum { MAX_CHANGES = 1000 };

typedef struct { const char *text; int length; int matched; } Matcher;

typedef struct {
    int fd;
    int ready;           // subscribed: SSE opening seen, or WS subscribe sent after connection_ack
    int events;          // events received so far
    int blocking;        // posts: signed in as the account that blocked the writer
    Matcher event_start; // SSE: "\nid: " begins an event; WS: the 101 response's end
    Matcher opening;     // SSE: "retry:" — the stream is open
    // WebSocket frame parsing
    int in_frames;
    unsigned char header[14];
    int header_length, header_needed;
    unsigned long long payload_left;
    int opcode;
    char prefix[32];
    int prefix_length;
} Subscriber;

static int mode, port, subscriber_count, change_count;
static const char *stream_path, *token, *blocker_token;
// Subscribers that blocked the writer (posts), and so the number each change must reach.
static int blocking_count, expected_count;
static atomic_int blocked_events;
static Subscriber *subscribers;
static int epoll_fd;
static double acknowledged_at[MAX_CHANGES + 1];
static double sent_at[MAX_CHANGES + 1];
static double last_arrival[MAX_CHANGES + 1];
static atomic_int arrivals[MAX_CHANGES + 1];
static atomic_int acknowledged;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int match(Matcher *m, unsigned char c) {
    if (c == (unsigned char)m->text[m->matched]) {
        if (++m->matched == m->length) { m->matched = 0; return 1; }
    } else {
        m->matched = c == (unsigned char)m->text[0] ? 1 : 0;
    }
    return 0;
}

static long resident_kib_of(int pid);

// The sum over every process in a comma-separated list.
static long resident_kib(const char *pids) {
    long total = 0;
    for (const char *at = pids; *at;) {
        long kib = resident_kib_of(atoi(at));
        if (kib < 0) return -1;
        total += kib;
        const char *comma = strchr(at, ',');
        if (!comma) break;
        at = comma + 1;
    }
    return total;
}

static long resident_kib_of(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *file = fopen(path, "r");
    if (!file) return -1;
    long kib = -1;
    while (fgets(line, sizeof line, file))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(file);
    return kib;
}

static int connect_loopback(int nonblocking) {
    int fd = socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0) { perror("socket"); exit(2); }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0 && errno != EINPROGRESS) { perror("connect"); exit(2); }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const void *data, size_t length) {
    const char *bytes = data;
    double deadline = now() + 10;
    while (length > 0) {
        ssize_t sent = send(fd, bytes, length, MSG_NOSIGNAL);
        if (sent < 0 && (errno == EAGAIN || errno == EINPROGRESS || errno == ENOTCONN)) {
            if (now() > deadline) { fprintf(stderr, "send timed out\n"); exit(2); }
            usleep(1000);
            continue;
        }
        if (sent <= 0) { perror("send"); exit(2); }
        bytes += sent;
        length -= sent;
    }
}

// A client-to-server text frame, masked with a zero key (allowed: XOR with zero leaves the payload as it is).
static void send_ws_text(int fd, const char *text) {
    size_t length = strlen(text);
    unsigned char frame[16 + 4096];
    int header = 0;
    frame[header++] = 0x81;
    if (length < 126) {
        frame[header++] = 0x80 | length;
    } else {
        frame[header++] = 0x80 | 126;
        frame[header++] = length >> 8;
        frame[header++] = length & 0xff;
    }
    memset(frame + header, 0, 4);
    header += 4;
    memcpy(frame + header, text, length);
    send_all(fd, frame, header + length);
}

static void received_event(Subscriber *s) {
    if (s->blocking) {
        atomic_fetch_add(&blocked_events, 1);
        return;
    }
    s->events++;
    if (s->events <= MAX_CHANGES) {
        last_arrival[s->events] = now();
        atomic_fetch_add(&arrivals[s->events], 1);
    }
}

static void subscribe_ws(Subscriber *s) {
    char message[512];
    snprintf(message, sizeof message,
             "{\"type\":\"subscribe\",\"id\":\"1\",\"payload\":{\"query\":\"subscription { taskAdded { id title status version } }\"}}");
    send_ws_text(s->fd, message);
    s->ready = 1;
}

static void on_ws_frame_complete(Subscriber *s) {
    if (s->opcode == 0x1) {
        if (s->prefix_length >= 24 && strncmp(s->prefix, "{\"type\":\"connection_ack\"", 24) == 0) subscribe_ws(s);
        else if (s->prefix_length >= 14 && strncmp(s->prefix, "{\"type\":\"next\"", 14) == 0) received_event(s);
    }
}

static void feed_ws(Subscriber *s, const unsigned char *data, ssize_t length) {
    for (ssize_t i = 0; i < length; i++) {
        unsigned char c = data[i];
        if (!s->in_frames) {
            if (match(&s->event_start, c)) { s->in_frames = 1; s->header_length = 0; s->header_needed = 2; }
            continue;
        }
        if (s->header_length < s->header_needed) {
            s->header[s->header_length++] = c;
            if (s->header_length == 2) {
                int short_length = s->header[1] & 0x7f;
                s->header_needed = 2 + (short_length == 126 ? 2 : short_length == 127 ? 8 : 0);
            }
            if (s->header_length == s->header_needed) {
                int short_length = s->header[1] & 0x7f;
                unsigned long long payload = short_length;
                if (short_length == 126) payload = (s->header[2] << 8) | s->header[3];
                if (short_length == 127) { payload = 0; for (int b = 2; b < 10; b++) payload = (payload << 8) | s->header[b]; }
                s->opcode = s->header[0] & 0x0f;
                s->payload_left = payload;
                s->prefix_length = 0;
                if (payload == 0) { on_ws_frame_complete(s); s->header_length = 0; s->header_needed = 2; }
            }
            continue;
        }
        if (s->prefix_length < (int)sizeof s->prefix) s->prefix[s->prefix_length++] = c;
        if (--s->payload_left == 0) {
            if (s->opcode == 0x9) {  // ping: answer pong with the same payload
                unsigned char pong[6 + 32] = {0x8a, 0x80 | (unsigned char)s->prefix_length, 0, 0, 0, 0};
                memcpy(pong + 6, s->prefix, s->prefix_length);
                send_all(s->fd, pong, 6 + s->prefix_length);
            }
            on_ws_frame_complete(s);
            s->header_length = 0;
            s->header_needed = 2;
        }
    }
}

// Counts "\nid: " lines with memmem (the client shares the 2 cores with the server: scanning every byte of 10,000
// copies of each event one by one would weigh on what is measured). The last 4 bytes of a read are kept to find
// a line split across two reads.
static void feed_sse(Subscriber *s, const unsigned char *data, ssize_t length) {
    static const char pattern[] = "\nid: ";
    if (!s->ready) {
        for (ssize_t i = 0; i < length; i++)
            if (match(&s->opening, data[i])) { s->ready = 1; break; }
    }
    unsigned char seam[8];
    int carried = s->prefix_length, head = length < 4 ? (int)length : 4;
    memcpy(seam, s->prefix, carried);
    memcpy(seam + carried, data, head);
    for (int start = 0; start < carried; start++)
        if (start + 5 <= carried + head && memcmp(seam + start, pattern, 5) == 0) received_event(s);
    const unsigned char *at = data, *end = data + length;
    while ((at = memmem(at, end - at, pattern, 5)) != NULL) {
        received_event(s);
        at += 5;
    }
    int keep = length < 4 ? (int)length : 4;
    if (length < 4) {
        int total = carried + (int)length;
        int drop = total > 4 ? total - 4 : 0;
        memmove(s->prefix, seam + drop, total - drop);
        s->prefix_length = total - drop;
    } else {
        memcpy(s->prefix, data + length - keep, keep);
        s->prefix_length = keep;
    }
}

static int poll_once(int timeout_ms) {
    static unsigned char buffer[1 << 16];
    struct epoll_event events[512];
    int count = epoll_wait(epoll_fd, events, 512, timeout_ms);
    for (int e = 0; e < count; e++) {
        Subscriber *s = events[e].data.ptr;
        for (;;) {
            ssize_t got = recv(s->fd, buffer, sizeof buffer, 0);
            if (got > 0) {
                if (mode == WS) feed_ws(s, buffer, got); else feed_sse(s, buffer, got);
                if (got < (ssize_t)sizeof buffer) break;
                continue;
            }
            if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                fprintf(stderr, "subscriber %ld lost its connection\n", (long)(s - subscribers));
                epoll_ctl(epoll_fd, EPOLL_CTL_DEL, s->fd, NULL);
            }
            break;
        }
    }
    return count;
}

static void open_subscriber(Subscriber *s) {
    memset(s, 0, sizeof *s);
    s->fd = connect_loopback(1);
    char request[1024];
    if (mode == NCHAN) {
        // nchan opens an EventSource stream with the comment ": hi".
        s->opening = (Matcher){": hi", 4, 0};
        snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n", stream_path);
    } else if (mode == SSE) {
        s->event_start = (Matcher){"\nid: ", 5, 0};
        s->opening = (Matcher){"retry:", 6, 0};
        snprintf(request, sizeof request,
                 "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n", stream_path, token);
    } else if (mode == POSTS) {
        s->opening = (Matcher){"retry:", 6, 0};
        s->blocking = (int)(s - subscribers) < blocking_count;
        if (s->blocking)
            snprintf(request, sizeof request,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n", stream_path,
                     blocker_token);
        else
            snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n", stream_path);
    } else {
        s->event_start = (Matcher){"\r\n\r\n", 4, 0};
        snprintf(request, sizeof request,
                 "GET /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                 "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n");
    }
    send_all(s->fd, request, strlen(request));
    if (mode == WS) {
        char init[512];
        snprintf(init, sizeof init, "{\"type\":\"connection_init\",\"payload\":{\"Authorization\":\"Bearer %s\"}}", token);
        // Sent at once after the upgrade request; the server reads it once the upgrade is done.
        send_ws_text(s->fd, init);
    }
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = s};
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, s->fd, &event);
}

// What nchan publishes for a change: the size of a Foyer task event (a turbo-stream replacing one task's row).
static void nchan_message(char *body, size_t size, int number) {
    int length = snprintf(body, size,
        "<turbo-stream action=\"replace\" target=\"task_%d\"><template><li id=\"task_%d\" class=\"task\">"
        "<a href=\"/tasks/%d\">bench change %d</a><span class=\"status status-open\">Open</span>"
        "<form action=\"/tasks/%d/status\" method=\"post\"><button name=\"status\" value=\"ASSIGNED\">Assign</button></form>",
        number, number, number, number, number);
    while (length < 400) body[length++] = ' ';
    snprintf(body + length, size - length, "</li></template></turbo-stream>");
}

// One change: a task created through POST /graphql (or a message published to nchan) on its own connection;
// acknowledged when the reply is read.
static void make_change(int number) {
    char body[1024], request[2048], reply[4096];
    if (mode == NCHAN) {
        nchan_message(body, sizeof body, number);
        snprintf(request, sizeof request,
                 "POST /pub HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                 strlen(body), body);
    } else if (mode == POSTS) {
        snprintf(body, sizeof body, "{\"title\":\"bench change %d\",\"content\":\"live\"}", number);
        snprintf(request, sizeof request,
                 "POST /api/v1/posts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\n"
                 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s", token, strlen(body), body);
    } else {
        snprintf(body, sizeof body,
                 "{\"query\":\"mutation { createTask(title: \\\"bench change %d\\\", description: \\\"live\\\") { id } }\"}", number);
        snprintf(request, sizeof request,
                 "POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\n"
                 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s", token, strlen(body), body);
    }
    int fd = connect_loopback(0);
    sent_at[number] = now();
    struct timeval timeout = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    send_all(fd, request, strlen(request));
    size_t total = 0;
    ssize_t got;
    while ((got = recv(fd, reply + total, sizeof reply - 1 - total, 0)) > 0) total += got;
    reply[total] = 0;
    acknowledged_at[number] = now();
    close(fd);
    // Foyer: 200 (a post: 201); nchan: 201 (or 202 with no subscriber).
    if (strncmp(reply, "HTTP/1.1 20", 11) != 0) { fprintf(stderr, "change %d failed: %s\n", number, reply); exit(2); }
}

static void *writer(void *unused) {
    (void)unused;
    for (int number = 1; number <= change_count; number++) {
        // One change at a time: wait (bounded) until the previous one reached everyone, then a short pause.
        double deadline = now() + 5;
        while (number > 1 && atomic_load(&arrivals[number - 1]) < expected_count && now() < deadline) usleep(1000);
        usleep(100000);
        make_change(number);
        atomic_store(&acknowledged, number);
    }
    return NULL;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 8 && argc != 10) {
        fprintf(stderr, "usage: live-load sse|ws|nchan|posts PORT STREAM_PATH TOKEN SUBSCRIBERS CHANGES PIDS [BLOCKER_TOKEN BLOCKING]\n");
        return 2;
    }
    mode = strcmp(argv[1], "ws") == 0 ? WS : strcmp(argv[1], "nchan") == 0 ? NCHAN : strcmp(argv[1], "posts") == 0 ? POSTS : SSE;
    port = atoi(argv[2]);
    stream_path = argv[3];
    token = argv[4];
    subscriber_count = atoi(argv[5]);
    change_count = atoi(argv[6]);
    const char *server_pids = argv[7];
    if (change_count > MAX_CHANGES) change_count = MAX_CHANGES;
    if (argc == 10) {
        blocker_token = argv[8];
        blocking_count = atoi(argv[9]);
        if (mode != POSTS || blocking_count < 0 || blocking_count >= subscriber_count) {
            fprintf(stderr, "BLOCKING: posts only, fewer than SUBSCRIBERS\n");
            return 2;
        }
    }
    expected_count = subscriber_count - blocking_count;

    struct rlimit files;
    getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);

    epoll_fd = epoll_create1(0);
    subscribers = calloc(subscriber_count, sizeof *subscribers);
    long before = resident_kib(server_pids);
    double started = now();

    // Connect in batches so the listen backlog never overflows; a batch is done once every one is subscribed.
    for (int opened = 0; opened < subscriber_count;) {
        int batch = subscriber_count - opened < 200 ? subscriber_count - opened : 200;
        for (int i = 0; i < batch; i++) open_subscriber(&subscribers[opened + i]);
        opened += batch;
        double deadline = now() + 30;
        for (;;) {
            int ready = 0;
            for (int i = 0; i < opened; i++) ready += subscribers[i].ready;
            if (ready == opened) break;
            if (now() > deadline) { fprintf(stderr, "only %d of %d subscribers ready after 30 s\n", ready, opened); return 1; }
            poll_once(50);
        }
    }
    double subscribed = now();
    // Let the last subscriptions settle (a WS subscribe has no acknowledgement), then weigh the server.
    for (double until = now() + 2; now() < until;) poll_once(50);
    long after = resident_kib(server_pids);

    // No changes: only open them (scripts/bench-live's bursts), and close them all by exiting.
    if (change_count > 0) {
        pthread_t writer_thread;
        pthread_create(&writer_thread, NULL, writer, NULL);
        double deadline = now() + change_count * 6.0 + 10;
        while (atomic_load(&arrivals[change_count]) < expected_count && now() < deadline) poll_once(20);
        pthread_join(writer_thread, NULL);
        // What a blocking subscriber would get comes with the others': a moment more to see it if it comes.
        for (double until = now() + 0.5; now() < until;) poll_once(20);
    }

    // After the acknowledgement (0 when every subscriber had it before the reply), and after the write was sent.
    double delays[MAX_CHANGES], from_send[MAX_CHANGES];
    int complete = 0;
    for (int number = 1; number <= change_count; number++) {
        if (atomic_load(&arrivals[number]) < expected_count) continue;
        double delay = last_arrival[number] - acknowledged_at[number];
        from_send[complete] = last_arrival[number] - sent_at[number];
        delays[complete++] = delay > 0 ? delay : 0;
    }
    qsort(delays, complete, sizeof delays[0], compare);
    qsort(from_send, complete, sizeof from_send[0], compare);
    const char *name = mode == SSE ? "sse" : mode == WS ? "ws" : mode == NCHAN ? "nchan" : blocking_count > 0 ? "blocks" : "posts";
    printf("mode=%s\nsubscribers=%d\nsubscribe_seconds=%.2f\nrss_before_kib=%ld\nrss_after_kib=%ld\n", name, subscriber_count,
           subscribed - started, before, after);
    if (mode == POSTS) printf("blocking=%d\nblocked_events=%d\n", blocking_count, atomic_load(&blocked_events));
    printf("changes=%d\ncomplete_changes=%d\n", change_count, complete);
    if (complete > 0) {
        printf("p50_ms=%.1f\np99_ms=%.1f\nmax_ms=%.1f\n", delays[complete / 2] * 1000,
               delays[(int)((complete - 1) * 0.99)] * 1000, delays[complete - 1] * 1000);
        printf("send_p50_ms=%.1f\nsend_p99_ms=%.1f\nsend_max_ms=%.1f\n", from_send[complete / 2] * 1000,
               from_send[(int)((complete - 1) * 0.99)] * 1000, from_send[complete - 1] * 1000);
    }
    return complete == change_count && atomic_load(&blocked_events) == 0 ? 0 : 1;
}
