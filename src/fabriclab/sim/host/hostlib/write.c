/* fabriclab's host library: write on a umad file, one MAD to the fabric server
 * (user_mad.c ib_umad_write), in frames when it is longer than one. */
#include "hostlib.h"

#define SEND_WAIT_MS 10000  /* how long a write waits for room before it fails */

/* Whether a MAD is a response (ib_mad.h ib_response_mad): the R bit, TrapRepress, or a
 * BM MAD with the response bit in its attribute modifier. */
static int is_response(const uint8_t *mad)
{
    return (mad[3] & 0x80) || mad[3] == 0x07 || (mad[1] == 0x05 && (mad[23] & 1));
}

/* Sends one frame, waiting for room up to SEND_WAIT_MS even on a blocking fd (the
 * kernel's write never drops a MAD, nor waits on a peer that does not read; EINTR is
 * retried within that time); 0, or -1 with errno (EIO: no room in time). */
static int send_frame(struct ufd *u, int fd, struct iovec *iov, int n)
{
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += SEND_WAIT_MS / 1000;
    for (;;) {
        if ((u->stream ? stream_send(u, fd, &m, SEND_WAIT_MS)
                       : sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT)) >= 0)
            return 0;
        if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
            return server_gone(u, fd);
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -1;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = (end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
        if (left <= 0)
            return errno = EIO, -1;
        struct pollfd pf = {fd, POLLOUT, 0};
        NEXT(poll)(&pf, 1, (int)left); /* EINTR: tried again within the time */
    }
}

/* The kernel's checks of a write, the request's TID (hi_tid = the agent), then the
 * message in frames of at most FL_FRAME_MAX (hostwire: the first marked MORE). */
static ssize_t umad_write(struct ufd *u, int fd, const uint8_t *buf, size_t count)
{
    if (u->kind != FL_KIND_UMAD || count < UMAD_MIN_WRITE)
        return errno = EINVAL, -1;
    if (__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE))
        return errno = EIO, -1; /* ib_umad_write: no agent once agents_dead */
    uint8_t head[UMAD_HDR_SIZE + UMAD_MAD_HDR];
    memcpy(head, buf, sizeof head);
    uint8_t *mad = head + UMAD_HDR_SIZE;
    uint32_t id;
    memcpy(&id, head, sizeof id);
    pthread_mutex_lock(&u->lock);
    int used = id < UMAD_MAX_AGENTS && u->agent[id].used;
    int krmpp = used && u->agent[id].kernel_rmpp;
    pthread_mutex_unlock(&u->lock);
    if (!used)
        return errno = EINVAL, -1;
    /* ib_create_send_mad: only an active RMPP message of a kernel-RMPP agent may be
     * longer than one MAD */
    int rmpp = krmpp && rmpp_class(mad[1]) &&
               (buf[UMAD_HDR_SIZE + UMAD_RMPP_FLAGS_AT] & UMAD_RMPP_ACTIVE);
    if (!rmpp && count > UMAD_HDR_SIZE + UMAD_MAD_SIZE)
        return errno = EINVAL, -1;
    if (count > FL_MESSAGE_MAX) /* more than the protocol carries (hostwire.h) */
        return errno = EINVAL, -1;
    if (!is_response(mad)) { /* TID bits 32-63 = hi_tid (user_mad.c) */
        mad[8] = mad[9] = 0;
        mad[10] = (uint8_t)(id >> 8);
        mad[11] = (uint8_t)id;
    }
    uint32_t status = count > FL_FRAME_MAX ? FL_MORE : 0, length = (uint32_t)count;
    memcpy(head + UMAD_STATUS_AT, &status, 4);
    memcpy(head + UMAD_LENGTH_AT, &length, 4);
    size_t first = count > FL_FRAME_MAX ? FL_FRAME_MAX : count;
    struct iovec iov[2] = {{head, sizeof head},
                           {(void *)(buf + sizeof head), first - sizeof head}};
    LOCK(&u->wlock);
    int r = send_frame(u, fd, iov, 2);
    for (size_t at = first; !r && at < count; at += FL_FRAME_MAX) {
        size_t n = count - at < FL_FRAME_MAX ? count - at : FL_FRAME_MAX;
        struct iovec piece = {(void *)(buf + at), n};
        r = send_frame(u, fd, &piece, 1);
    }
    UNLOCK();
    return r < 0 ? -1 : (ssize_t)count;
}

ssize_t write(int fd, const void *buf, size_t count)
{
    struct ufd *u HELD = ufd_get(fd);
    if (!u)
        return NEXT(write)(fd, buf, count);
    return umad_write(u, fd, buf, count);
}
