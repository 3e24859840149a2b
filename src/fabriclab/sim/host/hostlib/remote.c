/* fabriclab's host library: the host protocol over TCP (FABRICLAB_HOST_ADDR), for a
 * tray in another network namespace, container or machine.  Each packet of the unix
 * protocol goes on the stream as a u32 little-endian length N (1 <= N <= FL_FRAME_MAX)
 * then its N bytes; a connection starts with AUTH (the token of
 * FABRICLAB_HOST_TOKEN_FILE) and the HELLO in one write, and the server's REPLY.  The
 * connect, the send and every read wait at most WAIT_MS (a non-blocking socket and
 * poll); the server's lengths are all checked before anything is read or allocated.
 *
 * What hello() hands back is what it hands back on the unix socket: a umad or issm
 * device is the stream itself, whose packets read.c and write.c take and send through
 * stream.c as they do a SOCK_SEQPACKET socket's; TREE's archive (REPLY value =
 * its size, then packets) is unpacked into a private directory whose path is the
 * REPLY's text (unpack.c), so tree.c reads it as the directory the server names; a
 * process's first TREE takes the tree an ancestor fetched a moment ago, when there is
 * one (privdir.c), without a connection.  Names
 * are resolved with getaddrinfo, whose own timeouts (resolv.conf) apply to a name. */
#include "hostlib.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/* Milliseconds of the monotonic clock. */
static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until `fd` has `events` or `deadline` passes (EINTR waits on): 1 ready, 0 the
 * deadline (errno ETIMEDOUT), -1 with errno. */
static int wait_for(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return errno = ETIMEDOUT, 0;
        struct pollfd pf = {fd, events, 0};
        int r = NEXT(poll)(&pf, 1, (int)left);
        if (r > 0)
            return 1;
        if (r == 0)
            return errno = ETIMEDOUT, 0;
        if (errno != EINTR)
            return -1;
    }
}

/* A connected, non-blocking TCP socket to the server, trying each of its addresses
 * until `deadline`; -1 with errno and what went wrong in `text`. */
static int tcp_connect(long long deadline, char *text)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *list = NULL;
    int g = getaddrinfo(remote_host, remote_port, &hints, &list);
    if (g) {
        snprintf(text, FL_TEXT_MAX, "cannot find the fabric server '%s' at %s: %s",
                 server_name, remote_host,
                 g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        errno = EHOSTUNREACH;
        return -1;
    }
    int s = -1, err = ECONNREFUSED;
    for (struct addrinfo *a = list; a && s < 0; a = a->ai_next) {
        s = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0) {
            err = errno;
            continue;
        }
        int r = connect(s, a->ai_addr, a->ai_addrlen);
        if (r < 0 && (errno == EINPROGRESS || errno == EINTR)) {
            socklen_t len = sizeof err;
            if (wait_for(s, POLLOUT, deadline) <= 0)
                err = errno; /* ETIMEDOUT: the deadline passed */
            else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
            r = err ? -1 : 0;
        } else if (r < 0) {
            err = errno;
        }
        if (r < 0) {
            NEXT(close)(s);
            s = -1;
        }
    }
    freeaddrinfo(list);
    if (s < 0) {
        snprintf(text, FL_TEXT_MAX, "cannot reach the fabric server '%s' at %s:%s: %s",
                 server_name, remote_host, remote_port, strerror(err));
        errno = err;
    }
    return s;
}

/* Sends all `n` bytes before `deadline`; 0, or -1 with errno. */
static int send_all(int s, const uint8_t *buf, size_t n, long long deadline)
{
    while (n) {
        ssize_t w = send(s, buf, n, MSG_NOSIGNAL);
        if (w > 0) {
            buf += w, n -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            return -1;
        } else if (wait_for(s, POLLOUT, deadline) <= 0) {
            return -1;
        }
    }
    return 0;
}

/* Reads exactly `n` bytes before `deadline`; 0, or -1 with errno (ECONNRESET: the
 * server closed). */
static int recv_all(int s, uint8_t *buf, size_t n, long long deadline)
{
    while (n) {
        ssize_t r = recv(s, buf, n, 0);
        if (r > 0) {
            buf += r, n -= (size_t)r;
        } else if (r == 0) {
            return errno = ECONNRESET, -1;
        } else if (errno != EAGAIN && errno != EINTR) {
            return -1;
        } else if (wait_for(s, POLLIN, deadline) <= 0) {
            return -1;
        }
    }
    return 0;
}

/* One packet of at most `max` bytes into buf, its length in *len, waiting at most
 * WAIT_MS; 0, or -1 with errno and a line in `text` (EPROTO: a length the protocol does
 * not allow, said as such). */
static int recv_packet(int s, uint8_t *buf, size_t max, size_t *len, char *text)
{
    long long deadline = now_ms() + WAIT_MS;
    uint8_t head[FL_LENGTH_SIZE];
    int r = recv_all(s, head, sizeof head, deadline);
    uint32_t n = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 |
                 (uint32_t)head[3] << 24;
    if (!r && (n < 1 || n > max)) {
        snprintf(text, FL_TEXT_MAX,
                 "the fabric server '%s' sent a packet of %u bytes where at most %zu were "
                 "due: not the host protocol",
                 server_name, n, max);
        return errno = EPROTO, -1;
    }
    if (!r)
        r = recv_all(s, buf, n, deadline);
    if (r) {
        int err = errno;
        if (err == ETIMEDOUT)
            snprintf(text, FL_TEXT_MAX, "the fabric server '%s' did not answer", server_name);
        else
            snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up without an answer%s%s",
                     server_name, err == ECONNRESET ? "" : ": ",
                     err == ECONNRESET ? "" : strerror(err));
        return errno = err, -1;
    }
    *len = n;
    return 0;
}

/* TREE's archive after its REPLY (`size` bytes in packets), unpacked; 0 with the
 * directory in `text`, or -1 with errno and `text`. */
static int fetch_tree(int s, uint32_t size, char *text)
{
    if (size > FL_TREE_MAX) {
        snprintf(text, FL_TEXT_MAX,
                 "the fabric server '%s' announced a tree of %u bytes (at most %d)",
                 server_name, size, FL_TREE_MAX);
        return errno = EPROTO, -1;
    }
    uint8_t *archive = malloc(size ? size : 1);
    if (!archive) {
        snprintf(text, FL_TEXT_MAX, "no memory for the tray's tree (%u bytes)", size);
        return errno = ENOMEM, -1;
    }
    size_t have = 0, n = 0;
    int r = 0;
    while (!r && have < size) {
        size_t left = size - have;
        r = recv_packet(s, archive + have, left < FL_FRAME_MAX ? left : FL_FRAME_MAX, &n,
                        text);
        have += r ? 0 : n;
    }
    if (!r)
        r = unpack_tree(archive, size, text);
    int err = errno;
    free(archive);
    errno = err;
    return r;
}

/* hello() over TCP: AUTH and HELLO (and `extra`), the REPLY; a device is the stream, a
 * TREE's archive unpacked.  As hello(): the descriptor to use, or -1 with errno and
 * what went wrong in `text`. */
int remote_hello(int kind, unsigned index, uint32_t *token, const void *extra, size_t n,
                 int cloexec, char *text)
{
    if (config_problem[0]) {
        snprintf(text, FL_TEXT_MAX, "%s", config_problem);
        return errno = EINVAL, -1;
    }
    size_t tray = strlen(tray_name);
    if (tray >= FL_TRAY_MAX) {
        snprintf(text, FL_TEXT_MAX, "FABRICLAB_TRAY '%s' is longer than %d bytes", tray_name,
                 FL_TRAY_MAX - 1);
        return errno = EINVAL, -1;
    }
    if (n > UMAD_REG_REQ2_SIZE)
        n = UMAD_REG_REQ2_SIZE;
    /* AUTH then HELLO, each behind its length (little-endian, as on amd64) */
    uint8_t out[2 * FL_LENGTH_SIZE + FL_TOKEN_SIZE + FL_HELLO_SIZE + UMAD_REG_REQ2_SIZE] = {0};
    uint32_t len = FL_TOKEN_SIZE;
    memcpy(out, &len, FL_LENGTH_SIZE);
    memcpy(out + FL_LENGTH_SIZE, remote_token, FL_TOKEN_SIZE);
    uint8_t *frame = out + 2 * FL_LENGTH_SIZE + FL_TOKEN_SIZE;
    len = (uint32_t)(FL_HELLO_SIZE + n);
    memcpy(frame - FL_LENGTH_SIZE, &len, FL_LENGTH_SIZE);
    struct fl_hello h = {.magic = FL_MAGIC, .version = FL_VERSION, .kind = (uint16_t)kind};
    h.pid = (uint32_t)getpid();
    h.index = index;
    h.token = *token;
    memcpy(h.tray, tray_name, tray);
    memcpy(frame, &h, sizeof h);
    if (n)
        memcpy(frame + FL_HELLO_SIZE, extra, n);

    static int asked; /* a TREE was asked for: a second one fetches a fresh tree */
    if (kind == FL_KIND_TREE && !__atomic_exchange_n(&asked, 1, __ATOMIC_ACQ_REL) &&
        !inherit_tree(text)) {
        int fd = NEXT(open)(text, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* tree.c closes it */
        if (fd >= 0)
            return fd;
    }
    int s = tcp_connect(now_ms() + WAIT_MS, text);
    if (s < 0)
        return -1;
    int one = 1; /* each MAD goes at once (a request and its answer are small) */
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* a server machine that vanishes without a reset (a cut network) is found dead as a
     * server that exits is: probes after 10 s idle, 3 unanswered 5 s apart; data
     * unacknowledged for 30 s (tcp(7): TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT,
     * TCP_USER_TIMEOUT) */
    int idle = 10, intvl = 5, cnt = 3, user_ms = 30000;
    setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(s, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(s, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(s, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms);
    uint8_t reply[FL_REPLY_SIZE + FL_TEXT_MAX];
    size_t got = 0;
    int err;
    if (send_all(s, out, (size_t)(frame - out) + len, now_ms() + WAIT_MS) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up: %s", server_name,
                 strerror(err));
    } else if (recv_packet(s, reply, sizeof reply, &got, text) < 0) {
        err = errno;
    } else if (got < FL_REPLY_SIZE || ((struct fl_reply *)reply)->magic != FL_MAGIC) {
        err = EPROTO;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' answered with no REPLY",
                 server_name);
    } else {
        struct fl_reply r;
        memcpy(&r, reply, sizeof r);
        size_t tlen = got - FL_REPLY_SIZE;
        while (tlen && reply[FL_REPLY_SIZE + tlen - 1] == '\n')
            tlen--;
        for (size_t i = 0; i < tlen; i++) /* one line, whatever the server sent (hello.c) */
            text[i] = reply[FL_REPLY_SIZE + i] < 0x20 || reply[FL_REPLY_SIZE + i] == 0x7f
                          ? ' '
                          : (char)reply[FL_REPLY_SIZE + i];
        text[tlen] = '\0';
        *token = r.token;
        /* over TCP a TREE's value is its archive's size, not how long the server keeps
         * the tree fresh: tree.c asks again after its default */
        err = r.err < 0 || r.err > 4095 ? EPROTO : r.err; /* an errno (MAX_ERRNO) */
        if (err) {
            if (!tlen)
                snprintf(text, FL_TEXT_MAX, "the fabric server refused: %s", strerror(err));
        } else if (kind == FL_KIND_TREE) {
            if (!fetch_tree(s, r.value, text))
                return s;
            err = errno;
        } else if (kind == FL_KIND_UMAD || kind == FL_KIND_ISSM) {
            /* the device's fd is the stream (stream.c), blocking as the unix one is */
            if (fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) == 0 &&
                (cloexec || fcntl(s, F_SETFD, 0) == 0))
                return s;
            err = errno;
            snprintf(text, FL_TEXT_MAX, "cannot set up the device's stream: %s",
                     strerror(err));
        } else {
            return s;
        }
    }
    NEXT(close)(s);
    errno = err;
    return -1;
}
