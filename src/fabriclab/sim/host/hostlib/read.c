/* fabriclab's host library: read on a umad file, one message from the fabric server
 * (user_mad.c ib_umad_read), a long one reassembled from its frames, each frame held
 * to the sizes the protocol allows (hostwire.h: FL_FRAME_MAX, FL_MESSAGE_MAX). */
#include "hostlib.h"

static int said_lie; /* the server broke the protocol: said once per process */

/* Drops the pending message. */
static void msg_drop(struct ufd *u)
{
    free(u->msg);
    u->msg = NULL;
    u->msg_len = u->msg_have = 0;
    __atomic_store_n(&u->ready, 0, __ATOMIC_RELEASE);
}

/* The server sent a frame the protocol does not allow (`what`, printf-style): the
 * partial message goes and the device fails (device_dead: EIO from now on); -1. */
__attribute__((format(printf, 3, 4))) static int lied(struct ufd *u, int fd,
                                                      const char *what, ...)
{
    char how[160], text[320];
    va_list ap;
    va_start(ap, what);
    vsnprintf(how, sizeof how, what, ap);
    va_end(ap);
    snprintf(text, sizeof text, "the fabric server '%s' sent %s: the umad device fails",
             server_name, how);
    msg_drop(u);
    return device_dead(u, fd, &said_lie, text);
}

/* Hands the whole pending message to a reader with room `count` as copy_recv_mad does:
 * all of it; or, when it is longer than one MAD, the header and first MAD with ENOSPC
 * (hdr.length tells the size: libibumad's umad_recv reallocs and reads again); or
 * EINVAL.  Without room it stays pending, at the head of the queue. */
static ssize_t msg_deliver(struct ufd *u, uint8_t *buf, size_t count)
{
    size_t len = u->msg_len, first = UMAD_HDR_SIZE + UMAD_MAD_SIZE;
    if (len <= count) {
        memcpy(buf, u->msg, len);
        msg_drop(u);
        return (ssize_t)len;
    }
    if (len <= first || count < first)
        return errno = EINVAL, -1;
    memcpy(buf, u->msg, first);
    return errno = ENOSPC, -1;
}

/* Takes a message of `len` bytes (at most FL_MESSAGE_MAX) whose first `n` came in `buf`
 * (up to `count`) and the scratch buffer as pending; 0, or -1 (the device failed). */
static int msg_keep(struct ufd *u, int fd, const uint8_t *buf, size_t count, size_t n,
                    size_t len)
{
    if (!(u->msg = malloc(len))) /* its pieces would be read as messages of their own */
        return lied(u, fd, "a message of %zu bytes, more than this process can hold", len);
    size_t head = n < count ? n : count;
    memcpy(u->msg, buf, head);
    memcpy(u->msg + head, u->scratch, n - head);
    u->msg_len = len;
    u->msg_have = n;
    uint32_t status;
    memcpy(&status, u->msg + UMAD_STATUS_AT, 4);
    status &= ~FL_MORE;
    memcpy(u->msg + UMAD_STATUS_AT, &status, 4);
    if (n == len)
        __atomic_store_n(&u->ready, 1, __ATOMIC_RELEASE);
    return 0;
}

/* Milliseconds from now to `end` (CLOCK_MONOTONIC), 0 when past. */
static int ms_to(const struct timespec *end)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (end->tv_sec - now.tv_sec) * 1000 + (end->tv_nsec - now.tv_nsec) / 1000000;
    return ms < 0 ? 0 : (int)ms;
}

/* The next piece of the long message being reassembled, exactly FL_FRAME_MAX bytes or
 * the rest, whichever is less (hostwire).  The kernel hands out whole messages only,
 * so under O_NONBLOCK it is waited for up to WAIT_MS (the server sends the pieces back
 * to back); a stall past that is EAGAIN with the partial kept, as is EINTR on a blocking
 * read: the next read goes on with it.  1: a piece came; -1 with errno. */
static int msg_piece(struct ufd *u, int fd)
{
    size_t want = u->msg_len - u->msg_have;
    if (want > FL_FRAME_MAX)
        want = FL_FRAME_MAX;
    struct timespec end = {0, 0};
    for (;;) {
        struct iovec iov = {u->msg + u->msg_have, want};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t n = u->stream ? stream_recv(u, fd, &m) : recvmsg(fd, &m, 0);
        if (n > 0 && ((m.msg_flags & MSG_TRUNC) || (size_t)n != want))
            return lied(u, fd, "a piece of a %zu-byte message %s than the protocol's %zu",
                        u->msg_len, (m.msg_flags & MSG_TRUNC) ? "longer" : "shorter",
                        want);
        if (n > 0) {
            if ((u->msg_have += want) == u->msg_len)
                __atomic_store_n(&u->ready, 1, __ATOMIC_RELEASE);
            return 1;
        }
        if (n == 0 || errno == ECONNRESET || errno == ENOTCONN)
            return msg_drop(u), server_gone(u, fd);
        if (errno != EAGAIN)
            return -1; /* EINTR on a blocking read: the partial stays */
        if (!end.tv_sec) {
            clock_gettime(CLOCK_MONOTONIC, &end);
            end.tv_sec += WAIT_MS / 1000;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        int left = ms_to(&end);
        if (!left || (NEXT(poll)(&pf, 1, left) == 0 && !ms_to(&end)))
            return errno = EAGAIN, -1; /* a stall: the partial stays */
    }
}

/* A first frame of `n` bytes, its start in `buf` (up to `count`), the rest in scratch:
 * held to the protocol (hostwire.h).  Its length when it is a whole message that fits
 * the reader, 0 when it became pending, -1 when the device failed. */
static ssize_t first_frame(struct ufd *u, int fd, uint8_t *buf, size_t count, size_t n,
                           int truncated)
{
    if (truncated || n > FL_FRAME_MAX)
        return lied(u, fd, "a frame longer than %d bytes", FL_FRAME_MAX);
    if (n < UMAD_HDR_SIZE)
        return lied(u, fd, "a frame of %zu bytes, shorter than a umad header", n);
    uint32_t status, length;
    memcpy(&status, buf + UMAD_STATUS_AT, 4);
    memcpy(&length, buf + UMAD_LENGTH_AT, 4);
    if (!(status & FL_MORE)) {
        if (length != n)
            return lied(u, fd, "a %zu-byte frame whose header says %u bytes", n, length);
        if (n <= count)
            return (ssize_t)n; /* the common case */
    } else if (n != FL_FRAME_MAX || length <= n || length > FL_MESSAGE_MAX) {
        return lied(u, fd, "a long message's first frame of %zu bytes saying %u in all "
                    "(the protocol: %d, then at most %d in all)",
                    n, length, FL_FRAME_MAX, FL_MESSAGE_MAX);
    }
    return msg_keep(u, fd, buf, count, n, status & FL_MORE ? length : n);
}

/* A read of a failed device: EIO (ib_umad_read: agents_dead), at once the first time
 * and under O_NONBLOCK; a blocking read within DEAD_PACE_MS of the last one to say so
 * first waits out the rest (poll.c says why), or ends EINTR if a signal comes. */
static ssize_t dead_read(struct ufd *u, int fd)
{
    long last = __atomic_load_n(&u->dead_read, __ATOMIC_ACQUIRE);
    long left = last ? last + DEAD_PACE_MS - mono_ms() : 0;
    if (left > 0 && !(NEXT(fcntl)(fd, F_GETFL) & O_NONBLOCK)) {
        struct timespec ts = {left / 1000, (left % 1000) * 1000000L};
        if (nanosleep(&ts, NULL) < 0)
            return -1; /* EINTR */
    }
    __atomic_store_n(&u->dead_read, mono_ms(), __ATOMIC_RELEASE);
    return errno = EIO, -1;
}

/* One message: the common case is one recvmsg straight into the caller's buffer (the
 * server fills the header as the kernel's receive path does); the part of a frame past
 * `count` lands in a scratch buffer and makes the message pending. */
static ssize_t umad_read(struct ufd *u, int fd, uint8_t *buf, size_t count)
{
    if (u->kind != FL_KIND_UMAD || count < UMAD_HDR_SIZE)
        return errno = EINVAL, -1;
    if (__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE))
        return dead_read(u, fd); /* paced, without the lock */
    LOCK(&u->rlock);
    ssize_t r = -1;
    for (;;) {
        if (__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE)) {
            errno = EIO; /* ib_umad_read: agents_dead */
            break;
        }
        if (u->ready) {
            r = msg_deliver(u, buf, count);
            break;
        }
        if (u->msg) {
            if (msg_piece(u, fd) < 0)
                break;
            continue;
        }
        if (!u->scratch && !(u->scratch = malloc(FL_FRAME_MAX))) {
            errno = ENOMEM;
            break;
        }
        struct iovec iov[2] = {{buf, count}, {u->scratch, FL_FRAME_MAX}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        ssize_t n = u->stream ? stream_recv(u, fd, &m) : recvmsg(fd, &m, 0);
        if (n > 0) {
            ssize_t got = first_frame(u, fd, buf, count, (size_t)n, m.msg_flags & MSG_TRUNC);
            if (got > 0)
                r = got;
            if (got)
                break;
            continue;
        }
        if (n == 0 || errno == ECONNRESET || errno == ENOTCONN) {
            server_gone(u, fd);
            break;
        }
        break; /* EAGAIN, EINTR */
    }
    UNLOCK();
    if (r < 0 && errno == EIO && __atomic_load_n(&u->dead, __ATOMIC_ACQUIRE))
        __atomic_store_n(&u->dead_read, mono_ms(), __ATOMIC_RELEASE); /* said at once */
    return r;
}

ssize_t read(int fd, void *buf, size_t count)
{
    struct ufd *u HELD = ufd_get(fd);
    if (!u)
        return NEXT(read)(fd, buf, count);
    return umad_read(u, fd, buf, count);
}

/* The fortified read (glibc debug/read_chk.c) reaches libc's read internally. */
ssize_t __read_chk(int fd, void *buf, size_t count, size_t size);
ssize_t __read_chk(int fd, void *buf, size_t count, size_t size)
{
    struct ufd *u HELD = ufd_get(fd);
    if (!u)
        return NEXT(__read_chk)(fd, buf, count, size);
    if (count > size)
        abort(); /* __chk_fail */
    return umad_read(u, fd, buf, count);
}
