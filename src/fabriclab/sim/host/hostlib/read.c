/* fabriclab's host library: read on a umad file, one message from the fabric server
 * (user_mad.c ib_umad_read), a long one reassembled from its frames. */
#include "hostlib.h"

/* Drops the pending message. */
static void msg_drop(struct ufd *u)
{
    free(u->msg);
    u->msg = NULL;
    u->msg_len = u->msg_have = 0;
    __atomic_store_n(&u->ready, 0, __ATOMIC_RELEASE);
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

/* Takes a message of `len` bytes whose first `n` came in `buf` (up to `count`) and the
 * scratch buffer as pending; 0, or -1 with errno. */
static int msg_keep(struct ufd *u, const uint8_t *buf, size_t count, size_t n, size_t len)
{
    if (len < n || !(u->msg = malloc(len)))
        return errno = len < n ? EPROTO : ENOMEM, -1;
    size_t head = n < count ? n : count;
    memcpy(u->msg, buf, head);
    memcpy(u->msg + head, u->scratch, n - head);
    u->msg_len = len;
    u->msg_have = n;
    return 0;
}

/* One message: the common case is one recvmsg straight into the caller's buffer (the
 * server fills the header as the kernel's receive path does); the part of a frame past
 * `count` lands in a scratch buffer and makes the message pending. */
static ssize_t umad_read(struct ufd *u, int fd, uint8_t *buf, size_t count)
{
    if (u->kind != FL_KIND_UMAD || count < UMAD_HDR_SIZE)
        return errno = EINVAL, -1;
    LOCK(&u->rlock);
    ssize_t r = -1;
    for (;;) {
        if (u->ready) {
            r = msg_deliver(u, buf, count);
            break;
        }
        ssize_t n;
        if (u->msg) { /* a long message's next piece: the kernel hands out whole messages
                       * only, so wait for it even under O_NONBLOCK (the server sends
                       * the pieces back to back) */
            n = recv(fd, u->msg + u->msg_have, u->msg_len - u->msg_have, 0);
            if (n < 0 && errno == EAGAIN) {
                struct pollfd pf = {fd, POLLIN, 0};
                int p = NEXT(poll)(&pf, 1, WAIT_MS);
                if (p > 0 || (p < 0 && errno == EINTR))
                    continue;
                msg_drop(u);
                errno = EIO;
                break;
            }
            if (n > 0 && (u->msg_have += (size_t)n) == u->msg_len)
                __atomic_store_n(&u->ready, 1, __ATOMIC_RELEASE);
        } else {
            if (!u->scratch && !(u->scratch = malloc(FL_FRAME_MAX))) {
                errno = ENOMEM;
                break;
            }
            struct iovec iov[2] = {{buf, count}, {u->scratch, FL_FRAME_MAX}};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
            n = recvmsg(fd, &m, 0);
            if (n > 0 && (size_t)n < UMAD_HDR_SIZE)
                continue; /* not a message: dropped */
            if (n > 0) {
                uint32_t status, length;
                memcpy(&status, buf + UMAD_STATUS_AT, 4);
                memcpy(&length, buf + UMAD_LENGTH_AT, 4);
                if (!(status & FL_MORE) && (size_t)n <= count) {
                    r = n; /* the common case */
                    break;
                }
                if (msg_keep(u, buf, count, (size_t)n, status & FL_MORE ? length : (size_t)n))
                    break;
                status &= ~FL_MORE;
                memcpy(u->msg + UMAD_STATUS_AT, &status, 4);
                if (u->msg_have == u->msg_len)
                    __atomic_store_n(&u->ready, 1, __ATOMIC_RELEASE);
            }
        }
        if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == ENOTCONN))) {
            msg_drop(u);
            server_gone();
            break;
        }
        if (n < 0)
            break; /* EAGAIN, EINTR: the pending state stays */
    }
    UNLOCK();
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
