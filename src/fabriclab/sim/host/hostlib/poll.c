/* fabriclab's host library: poll and ppoll, where a umad file with a whole message
 * pending reads at once. */
#include "hostlib.h"

/* How many of `fds` are umad files with a whole message waiting (POLLIN now). */
static int pending_in(struct pollfd *fds, nfds_t n)
{
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
        k += ufd_pending(fds[i].fd) && (fds[i].events & (POLLIN | POLLRDNORM));
    }
    return k;
}

/* After a zero-timeout poll `r`: the pending messages' POLLIN added; the new count. */
static int with_pending(struct pollfd *fds, nfds_t n, int r)
{
    if (r < 0)
        return r;
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
        if (ufd_pending(fds[i].fd))
            fds[i].revents |= fds[i].events & (POLLIN | POLLRDNORM);
        k += fds[i].revents != 0;
    }
    return k;
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED) || !pending_in(fds, n))
        return NEXT(poll)(fds, n, timeout);
    return with_pending(fds, n, NEXT(poll)(fds, n, 0));
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
    static const struct timespec zero;
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED) || !pending_in(fds, n))
        return NEXT(ppoll)(fds, n, t, mask);
    return with_pending(fds, n, NEXT(ppoll)(fds, n, &zero, mask));
}

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size)
{
    if (n > size / sizeof *fds)
        abort(); /* __chk_fail */
    return poll(fds, n, timeout);
}
