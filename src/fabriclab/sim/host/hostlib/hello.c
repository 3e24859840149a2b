/* fabriclab's host library: a connection to the fabric server, opened with a HELLO
 * and answered by a REPLY (fabriclab.ib.hostwire). */
#include "hostlib.h"

/* Milliseconds from now to `end` (CLOCK_MONOTONIC), 0 when past. */
static int ms_left(const struct timespec *end)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (end->tv_sec - now.tv_sec) * 1000 + (end->tv_nsec - now.tv_nsec) / 1000000;
    return ms < 0 ? 0 : (int)ms;
}

/* Connects the non-blocking socket `s` to the server by `end`: 0, or an errno
 * (ETIMEDOUT: not taken in time).  A Unix socket whose listener's backlog is full says
 * EAGAIN at once instead of waiting (net/unix/af_unix.c unix_stream_connect without a
 * timeout), so the connect is tried again every few milliseconds; a connection in
 * progress (EINPROGRESS, a network socket) is waited for with poll.  EINTR is retried
 * within the time. */
static int connect_by(int s, const struct timespec *end)
{
    long nap_ms = 1;
    for (;;) {
        if (connect(s, (struct sockaddr *)&server_addr, server_len) == 0)
            return 0;
        int err = errno;
        if (err == EINPROGRESS || err == EALREADY) {
            struct pollfd pf = {s, POLLOUT, 0};
            int p = NEXT(poll)(&pf, 1, ms_left(end));
            if (p < 0 && errno == EINTR)
                continue;
            if (p <= 0)
                return p < 0 ? errno : ETIMEDOUT;
            socklen_t len = sizeof err;
            if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                return errno;
            return err;
        }
        if (err != EAGAIN && err != EINTR)
            return err;
        int left = ms_left(end);
        if (!left)
            return ETIMEDOUT;
        if (err == EAGAIN) {
            long ms = nap_ms < left ? nap_ms : left;
            struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            nap_ms = nap_ms < 50 ? nap_ms * 2 : 50;
        }
    }
}

/* Waits up to WAIT_MS for the REPLY and takes it into `reply` (FL_REPLY_SIZE +
 * FL_TEXT_MAX bytes); EINTR is retried within the time.  Its size, or -1 with errno
 * (ETIMEDOUT: no answer in time; EPROTO: longer than the protocol allows). */
static ssize_t reply_in_time(int s, unsigned char *reply)
{
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += WAIT_MS / 1000;
    for (;;) {
        struct pollfd pf = {s, POLLIN, 0};
        int p = NEXT(poll)(&pf, 1, ms_left(&end));
        if (p < 0 && errno == EINTR)
            continue;
        if (p <= 0)
            return errno = p < 0 ? errno : ETIMEDOUT, -1;
        struct iovec iov = {reply, FL_REPLY_SIZE + FL_TEXT_MAX};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t got = recvmsg(s, &m, MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got > 0 && (m.msg_flags & MSG_TRUNC))
            return errno = EPROTO, -1;
        return got;
    }
}

/* A socket hello() made, closed when its block ends unless handed out (-1): connect,
 * send and poll are cancellation points (pthreads(7)) and OpenSM cancels threads, so a
 * thread cancelled in a registration's round trip closes it as it unwinds (hostlib.h:
 * what a cancelled thread leaves behind), as on any other way out. */
static void close_socket(int *s)
{
    if (*s < 0)
        return;
    int err = errno;
    NEXT(close)(*s);
    errno = err;
}

/* Opens a connection of `kind` (only as the fabric's owner or root, and only to a
 * server running as one of them: SO_PEERCRED) and says HELLO (index, token, then
 * `extra` in the same frame, as hostlink.py reads a REGISTER); waits at most WAIT_MS
 * for the server to take the connection and as long again for the REPLY.  The
 * connected, blocking socket, or -1 with errno and what went wrong in `text`, one line
 * (the server's own when it refused).  REPLY's token goes to *token. */
int hello(int kind, unsigned index, uint32_t *token, const void *extra, size_t n,
          int cloexec, char *text)
{
    if (remote)
        return remote_hello(kind, index, token, extra, n, cloexec, text);
    if (config_problem[0]) {
        snprintf(text, FL_TEXT_MAX, "%s", config_problem);
        errno = EINVAL;
        return -1;
    }
    uid_t me = geteuid();
    if (me != server_owner && me != 0) {
        /* its socket and trees are in the owner's 0700 state directory */
        snprintf(text, FL_TEXT_MAX,
                 "the host library serves the fabric '%s' to its owner (uid %u) only, not "
                 "to uid %u: a user admitted with up --allow-user attaches through "
                 "libumad2sim (fabriclab exec --via umad2sim)",
                 server_name, (unsigned)server_owner, (unsigned)me);
        errno = EACCES;
        return -1;
    }
    if (strlen(tray_name) >= FL_TRAY_MAX) {
        snprintf(text, FL_TEXT_MAX, "FABRICLAB_TRAY '%s' is longer than %d bytes", tray_name,
                 FL_TRAY_MAX - 1);
        errno = EINVAL;
        return -1;
    }
    /* non-blocking until connected: connect_by */
    int s __attribute__((cleanup(close_socket))) =
        socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | (cloexec ? SOCK_CLOEXEC : 0), 0);
    if (s < 0) {
        snprintf(text, FL_TEXT_MAX, "cannot make a socket: %s", strerror(errno));
        return -1;
    }
    unsigned char frame[FL_HELLO_SIZE + UMAD_REG_REQ2_SIZE] = {0};
    struct fl_hello *h = (struct fl_hello *)frame;
    h->magic = FL_MAGIC;
    h->version = FL_VERSION;
    h->kind = (uint16_t)kind;
    h->pid = (uint32_t)getpid();
    h->index = index;
    h->token = *token;
    memcpy(h->tray, tray_name, strlen(tray_name));
    if (n > sizeof frame - FL_HELLO_SIZE)
        n = sizeof frame - FL_HELLO_SIZE;
    if (n)
        memcpy(frame + FL_HELLO_SIZE, extra, n);
    unsigned char reply[FL_REPLY_SIZE + FL_TEXT_MAX];
    ssize_t got;
    int err;
    struct ucred peer;
    socklen_t peer_len = sizeof peer;
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += WAIT_MS / 1000;
    if ((err = connect_by(s, &end)) == ETIMEDOUT) {
        snprintf(text, FL_TEXT_MAX,
                 "the fabric server '%s' at %s did not take the connection within %d s "
                 "(its backlog is full: is it stopped?)",
                 server_name, server_addr.sun_path, WAIT_MS / 1000);
    } else if (err) {
        snprintf(text, FL_TEXT_MAX, "cannot reach the fabric server '%s' at %s: %s%s",
                 server_name, server_addr.sun_path, strerror(err),
                 err == EACCES ? " (it serves its owner and root only: a user admitted with "
                                 "up --allow-user attaches through libumad2sim)"
                               : "");
    } else if (fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) < 0 ||
               getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "cannot tell whose the fabric server '%s' is: %s",
                 server_name, strerror(err));
    } else if (peer.uid != server_owner && peer.uid != 0) {
        /* not the fabric's server: someone else's socket where it should be */
        err = EACCES;
        snprintf(text, FL_TEXT_MAX,
                 "%s is held by uid %u (pid %d), not by the fabric's owner (uid %u) or "
                 "root: refusing to talk to it",
                 server_addr.sun_path, (unsigned)peer.uid, (int)peer.pid,
                 (unsigned)server_owner);
    } else if (send(s, frame, FL_HELLO_SIZE + n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up: %s", server_name,
                 strerror(err));
    } else if ((got = reply_in_time(s, reply)) < 0 && errno == ETIMEDOUT) {
        err = ETIMEDOUT;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' did not answer", server_name);
    } else if (got < 0 && errno == EPROTO) {
        err = EPROTO;
        snprintf(text, FL_TEXT_MAX,
                 "the fabric server '%s' answered with more than the %d bytes of text the "
                 "protocol allows",
                 server_name, FL_TEXT_MAX);
    } else if (got < FL_REPLY_SIZE || ((struct fl_reply *)reply)->magic != FL_MAGIC) {
        err = got < 0 ? errno : EPROTO;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up without an answer",
                 server_name);
    } else {
        struct fl_reply *r = (struct fl_reply *)reply;
        size_t len = (size_t)got - FL_REPLY_SIZE;
        memcpy(text, reply + FL_REPLY_SIZE, len);
        while (len && text[len - 1] == '\n')
            len--;
        text[len] = '\0';
        for (size_t i = 0; i < len; i++) /* one line, whatever the server said */
            if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f)
                text[i] = ' ';
        *token = r->token;
        if (!r->err) {
            int ok = s;
            s = -1; /* handed out */
            return ok;
        }
        err = r->err;
        if (!len)
            snprintf(text, FL_TEXT_MAX, "the fabric server refused: %s", strerror(err));
    }
    errno = err; /* close_socket closes s, errno kept */
    return -1;
}
