/* fabriclab's host library: a umad or issm device over TCP, whose fd is the TCP stream
 * itself (remote.c; struct ufd's `stream`).  Each packet goes on the stream behind its
 * u32 little-endian length N (1 <= N <= FL_FRAME_MAX); read.c and write.c call these
 * where a unix connection's SOCK_SEQPACKET socket takes recvmsg and sendmsg, and get
 * the same answers: one whole packet per call.
 *
 * Reading: the length, then exactly the packet (never past it, so that what poll,
 * select and epoll see on the stream is the next packet's bytes, as on the unix
 * socket).  A packet arrives whole (the server writes each in one send), so once part
 * of it is here the rest is waited for up to WAIT_MS even under O_NONBLOCK, as read.c
 * waits for a long message's next piece; a stall past that, or a signal, keeps the part
 * for the next read.  A length outside 1..FL_FRAME_MAX is a lie: one line, and the
 * device fails (device_dead).  Writing: the length and the packet in one sendmsg; when
 * the stream takes only part of them, the rest follows within SEND_WAIT_MS, or the
 * device fails (the stream would be out of step).  Both run under the ufd's rlock or
 * wlock, so packets never interleave.
 *
 * fork and exec need nothing of their own: a child shares the stream as it would a
 * kernel umad fd (the same open file).  Unlike the kernel's, whose read hands out a
 * whole message, a packet here is read in two calls: a parent and a child reading the
 * same device at the same time could each get part of one (no traced program does). */
#include "hostlib.h"

static int said_lie, said_stuck; /* each said once per process */

static long left_ms(long end) { return end - mono_ms(); }

/* A stream that failed as a connection fails is the server gone: ECONNRESET, which
 * read.c and write.c take for "went away" (TCP_USER_TIMEOUT and keepalive end it
 * ETIMEDOUT, an ICMP error EHOSTUNREACH and the like: tcp(7)); any other errno (EAGAIN,
 * EINTR, EBADF of an fd closed meanwhile) is the caller's as it is. */
static ssize_t stream_errno(void)
{
    switch (errno) {
    case ETIMEDOUT: case EHOSTUNREACH: case ENETUNREACH: case EHOSTDOWN: case ENETDOWN:
    case ECONNABORTED: case EPIPE:
        errno = ECONNRESET;
    }
    return -1;
}

/* Hands the whole packet in u->in to `m` (MSG_TRUNC when it is longer); its length. */
static ssize_t hand_over(struct ufd *u, struct msghdr *m, size_t n)
{
    const uint8_t *at = u->in + FL_LENGTH_SIZE;
    size_t left = n;
    for (size_t i = 0; i < m->msg_iovlen && left; i++) {
        size_t k = m->msg_iov[i].iov_len < left ? m->msg_iov[i].iov_len : left;
        memcpy(m->msg_iov[i].iov_base, at, k);
        at += k, left -= k;
    }
    m->msg_flags = left ? MSG_TRUNC : 0;
    u->in_have = 0;
    return (ssize_t)(n - left);
}

ssize_t stream_recv(struct ufd *u, int fd, struct msghdr *m)
{
    if (!u->in && !(u->in = malloc(FL_LENGTH_SIZE + FL_FRAME_MAX)))
        return errno = ENOMEM, -1;
    long end = 0;
    for (;;) {
        size_t want = FL_LENGTH_SIZE, n = 0;
        if (u->in_have >= FL_LENGTH_SIZE) {
            uint32_t len;
            memcpy(&len, u->in, sizeof len); /* little-endian, as on amd64 */
            n = len;
            if (n < 1 || n > FL_FRAME_MAX) {
                char text[256];
                snprintf(text, sizeof text,
                         "the fabric server '%s' sent a packet of %zu bytes (the protocol "
                         "allows 1 to %d): its device is closed",
                         server_name, n, FL_FRAME_MAX);
                u->in_have = 0;
                return device_dead(u, fd, &said_lie, text);
            }
            want += n;
            if (u->in_have == want)
                return hand_over(u, m, n);
        }
        /* the first byte as the fd's mode says; the rest of a packet without waiting */
        ssize_t r = recv(fd, u->in + u->in_have, want - u->in_have,
                         u->in_have ? MSG_DONTWAIT : 0);
        if (r > 0) {
            u->in_have += (size_t)r;
            continue;
        }
        if (r == 0) { /* the end of the stream: a part of a packet goes with it */
            u->in_have = 0;
            return 0;
        }
        if (errno != EAGAIN || !u->in_have)
            return stream_errno();
        if (!end)
            end = mono_ms() + WAIT_MS;
        struct pollfd pf = {fd, POLLIN, 0};
        long left = left_ms(end);
        int p = left > 0 ? NEXT(poll)(&pf, 1, (int)left) : 0;
        if (p < 0) /* EINTR: the part stays */
            return errno == EINTR ? -1 : stream_errno();
        if (p == 0 && left_ms(end) <= 0)
            return errno = EAGAIN, -1; /* a stall: the part stays */
    }
}

/* Sends the rest of a packet the stream took only part of (`m`, past `sent` bytes)
 * within `ms`; 0, or -1 with the device failed. */
static int finish(struct ufd *u, int fd, struct msghdr *m, size_t sent, long ms)
{
    long end = mono_ms() + ms;
    for (;;) {
        while (m->msg_iovlen && sent >= m->msg_iov->iov_len) {
            sent -= m->msg_iov->iov_len;
            m->msg_iov++, m->msg_iovlen--;
        }
        if (!m->msg_iovlen)
            return 0;
        m->msg_iov->iov_base = (uint8_t *)m->msg_iov->iov_base + sent;
        m->msg_iov->iov_len -= sent;
        ssize_t w = sendmsg(fd, m, MSG_NOSIGNAL | MSG_DONTWAIT);
        sent = w > 0 ? (size_t)w : 0;
        if (w >= 0 || errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return server_gone(u, fd);
        struct pollfd pf = {fd, POLLOUT, 0};
        long left = left_ms(end);
        if (left > 0)
            NEXT(poll)(&pf, 1, (int)left); /* EINTR: tried again within the time */
        if (left <= 0 || left_ms(end) <= 0) {
            char text[256];
            snprintf(text, sizeof text,
                     "the fabric server '%s' took no more of a packet for %ld ms: its "
                     "device is closed", server_name, ms);
            return device_dead(u, fd, &said_stuck, text);
        }
    }
}

ssize_t stream_send(struct ufd *u, int fd, const struct msghdr *m, long ms)
{
    struct iovec iov[4];
    size_t total = 0;
    if (m->msg_iovlen > 3)
        return errno = EINVAL, -1;
    for (size_t i = 0; i < m->msg_iovlen; i++)
        total += m->msg_iov[i].iov_len;
    if (total < 1 || total > FL_FRAME_MAX)
        return errno = EINVAL, -1;
    uint32_t len = (uint32_t)total; /* little-endian, as on amd64 */
    iov[0] = (struct iovec){&len, sizeof len};
    memcpy(iov + 1, m->msg_iov, m->msg_iovlen * sizeof *iov);
    struct msghdr out = {.msg_iov = iov, .msg_iovlen = m->msg_iovlen + 1};
    ssize_t w = sendmsg(fd, &out, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0)
        return stream_errno(); /* nothing went: the caller may wait and try again */
    if ((size_t)w < sizeof len + total && finish(u, fd, &out, (size_t)w, ms) < 0)
        return -1;
    return (ssize_t)total;
}
