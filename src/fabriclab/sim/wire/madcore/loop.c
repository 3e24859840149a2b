/* The server loop's wait, native: epoll_wait on the loop's epoll descriptor, and the
 * datagrams of the clients Python asked it to serve (watch()) answered here, one per
 * ready client per round (as ibsim's loop: a wait, a read, a write), until something
 * needs Python (another descriptor ready, a datagram the core leaves to Python) or the
 * time is up.  The wait itself runs without the GIL.
 *
 * The wait first polls for a while (``spin_us``) after the last thing it found, before
 * it sleeps: a tool keeps one or two MADs in flight and sends the next within
 * microseconds of an answer, and a server found awake saves both sides the kernel's
 * wake-up, which is most of what an exchange costs (docs/benchmarks.md, "Polling before
 * sleeping"); Linux's busy polling of sockets (SO_BUSY_POLL) does the same for network
 * devices.  It costs at most ``spin_us`` of CPU after the last MAD of a burst.  A poll
 * that finds nothing costs CPU a busy client needs (an SM's threads, on a machine of
 * two cores): after one, the next 2 waits sleep at once, after another the next 4, up
 * to 2^SPIN_BACKOFF_MAX, until a poll finds something again. */
#include <sys/epoll.h>
#include <time.h>

#include "madcore.h"

enum { EVENTS = 64 };

/* watch(fd, src_row, client_id): serve fd's datagrams as the client's at row src_row;
 * src_row -1: no longer. */
PyObject *Core_watch(Core *c, PyObject *const *args, Py_ssize_t nargs)
{
    long a[3];
    if (args_row(args, nargs, 3, a) < 0)
        return NULL;
    if (a[0] < 0 || a[0] >= FD_MAX)
        Py_RETURN_FALSE; /* not served here: Python's loop takes it */
    if (c->reg_row == NULL) {
        c->reg_row = PyMem_Calloc(FD_MAX, sizeof *c->reg_row);
        c->reg_cid = PyMem_Calloc(FD_MAX, sizeof *c->reg_cid);
        if (c->reg_row == NULL || c->reg_cid == NULL)
            return PyErr_NoMemory();
    }
    if (a[1] < 0 || a[1] >= c->rows || a[2] < 0 || a[2] > UINT32_MAX) {
        c->reg_row[a[0]] = 0;
        Py_RETURN_FALSE;
    }
    c->reg_row[a[0]] = (int32_t)a[1] + 1;
    c->reg_cid[a[0]] = (uint32_t)a[2];
    Py_RETURN_TRUE;
}

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* (pending, events): ``events`` the (fd, mask) pairs for Python, as epoll.poll gives
 * them; ``pending`` None, or (fd, code) of a watched client whose datagram the core left
 * in the buffer for Python (pump_step's code), to be handled first. */
static PyObject *result(PyObject *pending, struct epoll_event *ev, int n, const uint8_t *done)
{
    PyObject *events = PyList_New(0);
    if (events == NULL) {
        Py_XDECREF(pending);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        PyObject *pair = Py_BuildValue("(iI)", ev[i].data.fd, (unsigned)ev[i].events);
        if (pair == NULL || PyList_Append(events, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(events);
            Py_XDECREF(pending);
            return NULL;
        }
        Py_DECREF(pair);
    }
    if (pending == NULL) {
        Py_INCREF(Py_None);
        pending = Py_None;
    }
    return Py_BuildValue("(NN)", pending, events);
}

PyObject *Core_serve(Core *c, PyObject *const *args, Py_ssize_t nargs)
{
    long a[3];
    if (args_row(args, nargs, 3, a) < 0)
        return NULL;
    if (a[2] < 0 || a[2] > SPIN_US_MAX) {
        PyErr_Format(PyExc_ValueError, "spin_us must be 0 to %d", SPIN_US_MAX);
        return NULL;
    }
    long timeout = a[1] < 0 ? -1 : a[1], spin_ns = timeout == 0 ? 0 : a[2] * 1000;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct epoll_event ev[EVENTS];
    uint8_t done[EVENTS];
    for (;;) {
        long left = timeout < 0 ? -1 : timeout - ms_since(&t0);
        if (left < 0 && timeout >= 0)
            left = 0;
        int n = 0, fd = (int)a[0];
        long last = c->last_ns, spin = spin_ns;
        if (left >= 0 && spin > left * 1000000L)
            spin = left * 1000000L; /* never past the time Python asked for */
        int polled = spin > 0 && last != 0 && c->spin_skip == 0;
        if (spin > 0 && last != 0 && c->spin_skip > 0)
            c->spin_skip--;
        Py_BEGIN_ALLOW_THREADS
        if (polled) /* poll a while after the last thing found */
            while ((n = epoll_wait(fd, ev, EVENTS, 0)) == 0 && now_ns() - last < spin)
                ;
        if (n == 0)
            n = epoll_wait(fd, ev, EVENTS, (int)(left > INT32_MAX ? INT32_MAX : left));
        Py_END_ALLOW_THREADS
        if (polled && n == 0) { /* in vain: the next waits sleep at once, more each time */
            c->spin_fails = c->spin_fails < SPIN_BACKOFF_MAX ? c->spin_fails + 1 : SPIN_BACKOFF_MAX;
            c->spin_skip = 1 << c->spin_fails;
        } else if (polled) {
            c->spin_fails = 0;
        }
        if (n > 0)
            c->last_ns = now_ns();
        if (n < 0) {
            if (errno != EINTR)
                return PyErr_SetFromErrno(PyExc_OSError);
            if (PyErr_CheckSignals() < 0) /* a handler raised */
                return NULL;
            return result(NULL, ev, 0, done); /* the loop looks at what the handler did */
        }
        if (n == 0)
            return result(NULL, ev, 0, done);
        int python = 0;
        PyObject *pending = NULL;
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;
            done[i] = 0;
            int32_t r1 = (c->reg_row != NULL && fd >= 0 && fd < FD_MAX) ? c->reg_row[fd] : 0;
            if (r1 == 0 || pending != NULL || (ev[i].events & ~(uint32_t)EPOLLIN)) {
                python = 1; /* not ours, the buffer taken, or an error or hang-up */
                continue;
            }
            long code = pump_step(c, fd, r1 - 1, c->reg_cid[fd]);
            if (code == PUMP_ERROR)
                return NULL;
            done[i] = 1;
            if (code == -1 || code == -3)
                continue; /* nothing there after all; or answered and sent */
            pending = Py_BuildValue("(il)", fd, code);
            if (pending == NULL)
                return NULL;
        }
        if (python || pending != NULL)
            return result(pending, ev, n, done);
        if (timeout >= 0 && ms_since(&t0) >= timeout)
            return result(NULL, ev, 0, done);
    }
}
