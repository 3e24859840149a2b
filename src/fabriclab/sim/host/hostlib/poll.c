/* fabriclab's host library: poll and ppoll, where a umad file with a whole message
 * pending reads at once and one whose server went away is POLLERR. */
#include "hostlib.h"

/* How many of `fds` are umad files that answer at once: a whole message waiting
 * (POLLIN), or a device that failed (POLLERR, which poll always reports). */
static int pending_in(struct pollfd *fds, nfds_t n)
{
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
        struct ufd *u HELD = ufd_get(fds[i].fd);
        k += u && ((__atomic_load_n(&u->ready, __ATOMIC_ACQUIRE) &&
                    (fds[i].events & (POLLIN | POLLRDNORM))) ||
                   __atomic_load_n(&u->dead, __ATOMIC_ACQUIRE));
    }
    return k;
}

/* After libc's poll `r`: each umad file's revents as ib_umad_poll gives them
 * (user_mad.c): POLLIN for a whole pending message; for a device whose server went
 * away (its socket hung up) or that failed, POLLERR alone, as for a port that went away
 * (agents_dead; kernel commit def4cd43f522), never POLLHUP; the new count. */
static int umad_revents(struct pollfd *fds, nfds_t n, int r)
{
    if (r < 0)
        return r;
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
        struct ufd *u HELD = ufd_get(fds[i].fd);
        if (u && u->kind == FL_KIND_UMAD) {
            if (__atomic_load_n(&u->ready, __ATOMIC_ACQUIRE))
                fds[i].revents |= fds[i].events & (POLLIN | POLLRDNORM);
            if ((fds[i].revents & (POLLHUP | POLLRDHUP)) &&
                !__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE)) {
                int err = errno;
                server_gone(u, fds[i].fd);
                errno = err;
            }
            if (__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE))
                fds[i].revents = POLLERR;
        }
        k += fds[i].revents != 0;
    }
    return k;
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED))
        return NEXT(poll)(fds, n, timeout);
    return umad_revents(fds, n, NEXT(poll)(fds, n, pending_in(fds, n) ? 0 : timeout));
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
    static const struct timespec zero;
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED))
        return NEXT(ppoll)(fds, n, t, mask);
    return umad_revents(fds, n, NEXT(ppoll)(fds, n, pending_in(fds, n) ? &zero : t, mask));
}

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size)
{
    if (n > size / sizeof *fds)
        abort(); /* __chk_fail */
    return poll(fds, n, timeout);
}
