/* fabriclab's host library: poll and ppoll, where a umad file with a whole message
 * pending reads at once and one whose server went away is POLLERR, reported again at
 * most every DEAD_PACE_MS.
 *
 * Where this departs from the kernel: a kernel umad file whose port went away
 * (user_mad.c ib_umad_kill_port) is EPOLLERR to every poll at once, for ever.  On a host
 * that happens when an HCA is unplugged and the SM goes with it; here the server dies
 * under a running SM, whose receiver (OpenSM's libvendor/osm_vendor_ibumad.c
 * umad_receiver: umad_recv with no timeout, then "ERR 5404" and again) would then spin
 * and flood its log.  So the first report is at once (a tool waiting with a timeout ends
 * with the library's "went away" line as before) and later ones are paced: a poll that
 * would return only because of a failed device already reported waits, on its other
 * fds and within its own timeout, until DEAD_PACE_MS have passed since that report. */
#include "hostlib.h"

long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

long dead_due_in(struct ufd *u)
{
    if (!__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE))
        return -1;
    long last = __atomic_load_n(&u->dead_polled, __ATOMIC_ACQUIRE);
    long left = last ? last + DEAD_PACE_MS - mono_ms() : 0;
    return left > 0 ? left : 0;
}

/* How many of `fds` are umad files that answer at once: a whole message waiting
 * (POLLIN), or a device that failed and is due to be reported (POLLERR, which poll
 * always reports). */
static int pending_in(struct pollfd *fds, nfds_t n)
{
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
        struct ufd *u HELD = ufd_peek(fds[i].fd);
        k += u &&
             ((__atomic_load_n(&u->ready, __ATOMIC_ACQUIRE) &&
               (fds[i].events & (POLLIN | POLLRDNORM))) ||
              dead_due_in(u) == 0) &&
             ufd_still(fds[i].fd, u);
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
        struct ufd *u HELD = ufd_peek(fds[i].fd);
        /* something to say: a pending message, a hang-up, a failure (then checked) */
        if (u && u->kind == FL_KIND_UMAD &&
            (__atomic_load_n(&u->ready, __ATOMIC_ACQUIRE) ||
             (fds[i].revents & (POLLHUP | POLLRDHUP)) ||
             __atomic_load_n(&u->dead, __ATOMIC_ACQUIRE)) &&
            ufd_still(fds[i].fd, u)) {
            if (__atomic_load_n(&u->ready, __ATOMIC_ACQUIRE))
                fds[i].revents |= fds[i].events & (POLLIN | POLLRDNORM);
            if ((fds[i].revents & (POLLHUP | POLLRDHUP)) &&
                !__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE)) {
                int err = errno;
                server_gone(u, fds[i].fd);
                errno = err;
            }
            if (__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE)) {
                fds[i].revents = POLLERR;
                __atomic_store_n(&u->dead_polled, mono_ms(), __ATOMIC_RELEASE);
            }
        }
        k += fds[i].revents != 0;
    }
    return k;
}

/* The ms until the first failed umad file of `fds` reported within the pace is due
 * again, or -1 when there is none such. */
static long paced_in(struct pollfd *fds, nfds_t n)
{
    long first = -1;
    for (nfds_t i = 0; i < n; i++) {
        struct ufd *u HELD = ufd_peek(fds[i].fd);
        long due = u ? dead_due_in(u) : -1;
        if (due > 0 && !ufd_still(fds[i].fd, u))
            due = -1;
        if (due > 0 && (first < 0 || due < first))
            first = due;
    }
    return first;
}

static void free_held(struct pollfd **p) { free(*p); }

/* poll and ppoll when a failed umad file of `fds` is not due (paced_in): the wait runs
 * on a copy without it (poll skips a negative fd), for at most `t` (NULL: no bound) and
 * until it is due, then again; each of its calls is libc's ppoll with `mask`. */
static int paced_poll(struct pollfd *fds, nfds_t n, const struct timespec *t,
                      const sigset_t *mask)
{
    struct pollfd small[16];
    struct pollfd *q __attribute__((cleanup(free_held))) = NULL;
    if (n > sizeof small / sizeof *small && !(q = malloc(n * sizeof *q)))
        return errno = ENOMEM, -1;
    struct pollfd *w = q ? q : small;
    long end = t ? mono_ms() + t->tv_sec * 1000L + (t->tv_nsec + 999999) / 1000000 : 0;
    for (int round = 0;; round++) {
        long due = paced_in(fds, n);
        for (nfds_t i = 0; i < n; i++) {
            struct ufd *u HELD = ufd_peek(fds[i].fd);
            w[i] = fds[i];
            w[i].revents = 0;
            if (u && dead_due_in(u) > 0 && ufd_still(fds[i].fd, u))
                w[i].fd = -1;
        }
        long left = t ? end - mono_ms() : -1;
        if (t && left < 0)
            left = 0;
        long wait = due >= 0 && (left < 0 || due < left) ? due : left;
        if (pending_in(w, n) || round >= 64) /* bounded: each round waits its part */
            wait = 0;
        struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
        int r = umad_revents(w, n, NEXT(ppoll)(w, n, wait < 0 ? NULL : &ts, mask));
        for (nfds_t i = 0; r >= 0 && i < n; i++)
            fds[i].revents = w[i].revents;
        if (r != 0 || due < 0 || (t && mono_ms() >= end) || wait == 0)
            return r;
    }
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED))
        return NEXT(poll)(fds, n, timeout);
    if (paced_in(fds, n) >= 0) {
        struct timespec t = {timeout / 1000, (timeout % 1000) * 1000000L};
        return paced_poll(fds, n, timeout < 0 ? NULL : &t, NULL);
    }
    return umad_revents(fds, n, NEXT(poll)(fds, n, pending_in(fds, n) ? 0 : timeout));
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
    static const struct timespec zero;
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED))
        return NEXT(ppoll)(fds, n, t, mask);
    if (paced_in(fds, n) >= 0)
        return paced_poll(fds, n, t, mask);
    return umad_revents(fds, n, NEXT(ppoll)(fds, n, pending_in(fds, n) ? &zero : t, mask));
}

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size)
{
    if (n > size / sizeof *fds)
        abort(); /* __chk_fail */
    return poll(fds, n, timeout);
}
