/* fabriclab's native MAD core: the common SMP Gets received, routed, counted, answered
 * and sent in C, from the fabric's flat state (fabriclab.sim.fabric.flat), which the
 * Python side owns and changes.  Everything else - and anything this code cannot answer
 * exactly as the Python reference path (fabriclab.sim.wire.dispatch) would, a failing
 * route included - is handed back to Python untouched: no counter, buffer byte or
 * statistic is changed before the core knows it answers.
 *
 * Formats: ibsim's struct sim_request (ibsim include/ibsim.h: dlid, slid, dqp, sqp,
 * status, length, then the 256-byte MAD); the MAD header (IBA Vol. 1, 13.4.2), a
 * directed-route SMP's fields (14.2.1.2), the SMA attributes (14.2.5).  The routing
 * rules are fabriclab.sim.fabric.router's (IBA Vol. 1, 14.2.2; LID-routed SMPs travel on
 * VL15 and need only physically up links).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

enum {
    REQ_SIZE = 288,      /* sizeof(struct sim_request) */
    MAD_AT = 32,         /* the MAD within it */
    ATTR = 64,           /* an SMP's attribute data */
    SMP_DATA = 64,       /* where it lies in the MAD (14.2.1.1, 14.2.1.2) */
    DR_INITIAL = 128,    /* a directed route's initial path ... */
    DR_RETURN = 192,     /* ... and return path, 64 bytes each */
    MAX_HOPS = 64,       /* router.MAX_HOPS: switches a LID-routed packet may cross */
    MAX_DR_HOPS = 63,    /* HopCount's largest value (14.2.1.2) */
    HOPS_MAX = MAX_HOPS + 2,
    CLASS_SMI = 0x01,
    CLASS_SMI_DR = 0x81,
    METHOD_GET = 0x01,
    METHOD_SET = 0x02,
    METHOD_GET_RESP = 0x81,
    PERMISSIVE = 0xFFFF,
    LINKUP = 5,          /* PortPhysicalState LinkUp (14.2.5.6) */
    /* SMA attribute ids (14.2.5, Table 145) */
    A_NODE_DESC = 0x0010,
    A_NODE_INFO = 0x0011,
    A_SWITCH_INFO = 0x0012,
    A_PORT_INFO = 0x0015,
    A_PKEY_TABLE = 0x0016,
    A_LINEAR_FDB = 0x0019,
};

/* What the core reads: each array of the flat state, by the buffer it exports. */
enum {
    F_NODE, F_NUM, F_PRESENT, F_PEER, F_PHYS, F_LID, F_LMC, F_ENDPORT, F_IN, F_OUT,
    F_PI, F_PI_VALID, F_NI, F_NI_VALID, F_IS_SWITCH, F_FIRST, F_NPORTS, F_NODE_DESC,
    F_LFT_TOP, F_LFT_CAP, F_SI, F_SI_VALID, F_COUNT
};
static const struct { const char *name; Py_ssize_t itemsize; int per_node; Py_ssize_t width; } FIELDS[F_COUNT] = {
    {"node", 4, 0, 1}, {"num", 2, 0, 1}, {"present", 1, 0, 1}, {"peer", 4, 0, 1},
    {"phys", 1, 0, 1}, {"lid", 4, 0, 1}, {"lmc", 1, 0, 1}, {"is_endport", 1, 0, 1},
    {"mad_in", 8, 0, 1}, {"mad_out", 8, 0, 1}, {"pi", 1, 0, ATTR}, {"pi_valid", 1, 0, 1},
    {"ni", 1, 0, ATTR}, {"ni_valid", 1, 0, 1}, {"is_switch", 1, 1, 1}, {"first", 4, 1, 1},
    {"nports", 4, 1, 1}, {"node_desc", 1, 1, ATTR}, {"lft_top", 4, 1, 1},
    {"lft_cap", 4, 1, 1}, {"si", 1, 1, ATTR}, {"si_valid", 1, 1, 1},
};

typedef struct {
    PyObject_HEAD
    Py_buffer views[F_COUNT];
    int nviews;
    Py_buffer bufview;
    int has_buf;
    PyObject *lfts, *pkeys, *stats, *drops, *sma;
    int32_t routed; /* the row answer() routed a MAD to, for Python's SMA (2) */
    Py_ssize_t rows, nodes;
    int pi_local_at; /* PortInfo's LocalPortNum byte */
    /* the arrays, typed */
    const int32_t *node, *peer;
    const uint16_t *num;
    const uint8_t *present, *phys, *lmc, *endport, *pi, *pi_valid, *ni, *ni_valid;
    const uint8_t *is_switch, *node_desc, *si, *si_valid;
    const uint32_t *lid, *first, *nports, *lft_top, *lft_cap;
    uint64_t *mad_in, *mad_out;
    uint8_t *buf;
    Py_ssize_t buflen;
} Core;

/* A walk: the (egress, ingress) rows of the links crossed. */
typedef struct {
    int n;
    int32_t eg[HOPS_MAX], in[HOPS_MAX];
} Hops;

static PyObject *s_mads, *s_answered, *s_classes, *s_one;

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* Port ``num`` of node ``n``: its row, or -1 when the node has no such port. */
static int32_t port_of(const Core *c, int32_t n, uint32_t num)
{
    if (n < 0 || n >= c->nodes || num >= c->nports[n])
        return -1;
    uint64_t r = (uint64_t)c->first[n] + num;
    if (r >= (uint64_t)c->rows || !c->present[r])
        return -1;
    return (int32_t)r;
}

static int32_t node_of(const Core *c, int32_t r)
{
    int32_t n = c->node[r];
    return (n >= 0 && n < c->nodes) ? n : -1;
}

/* SimPort.has_lid: an end port whose base LID and LMC cover ``lid``. */
static int has_lid(const Core *c, int32_t r, uint32_t lid)
{
    uint64_t base = c->lid[r];
    unsigned lmc = c->lmc[r];
    if (!c->endport[r] || base == 0 || lid < base)
        return 0;
    return lmc >= 32 || (uint64_t)lid < base + ((uint64_t)1 << lmc);
}

/* router._cross for an SMP: the row the packet arrives at, or -1 (lost). */
static int32_t cross(const Core *c, int32_t egress, Hops *h)
{
    int32_t in = c->peer[egress];
    if (in < 0 || in >= c->rows || c->phys[egress] != LINKUP || c->phys[in] != LINKUP)
        return -1;
    if (h->n >= HOPS_MAX)
        return -1;
    h->eg[h->n] = egress;
    h->in[h->n] = in;
    h->n++;
    return in;
}

/* SimSwitch.out_port: 0..255, 0xFF (not routed), or -1 (doubt: not a bytearray). */
static int out_port(const Core *c, int32_t n, uint32_t lid)
{
    if (!PyList_Check(c->lfts) || n >= PyList_GET_SIZE(c->lfts))
        return -1;
    PyObject *lft = PyList_GET_ITEM(c->lfts, n);
    if (!PyByteArray_Check(lft))
        return -1;
    if (lid > c->lft_top[n] || (Py_ssize_t)lid >= PyByteArray_GET_SIZE(lft))
        return 0xFF;
    return (uint8_t)PyByteArray_AS_STRING(lft)[lid];
}

/* router.lid_route for an SMP: the end port reached (row), or -1. */
static int32_t lid_route(const Core *c, int32_t src, uint32_t dlid, Hops *h)
{
    h->n = 0;
    if (has_lid(c, src, dlid))
        return src;
    int32_t port = src;
    int32_t n = node_of(c, src);
    if (n < 0)
        return -1;
    if (!c->is_switch[n])
        port = cross(c, src, h);
    for (int i = 0; i < MAX_HOPS; i++) {
        if (port < 0 || (n = node_of(c, port)) < 0)
            return -1;
        if (!c->is_switch[n])
            return has_lid(c, port, dlid) ? port : -1;
        int out = out_port(c, n, dlid);
        if (out < 0)
            return -1;
        if (out == 0) {
            int32_t p0 = port_of(c, n, 0);
            return (p0 >= 0 && has_lid(c, p0, dlid)) ? p0 : -1;
        }
        int32_t egress = out != 0xFF ? port_of(c, n, (uint32_t)out) : -1;
        if (egress < 0)
            return -1; /* a relay error: Python counts it */
        port = cross(c, egress, h);
    }
    return -1;
}

/* router.dr_out: the row a directed route's initial path ends at, or -1; ``rpath``
 * gets the return path. */
static int32_t dr_out(const Core *c, int32_t src, const uint8_t *path, unsigned hops,
                      uint8_t *rpath, Hops *h)
{
    int32_t port = src;
    h->n = 0;
    memset(rpath, 0, 64);
    for (unsigned ptr = 1; ptr <= hops; ptr++) {
        int32_t n = node_of(c, port);
        if (n < 0)
            return -1;
        unsigned num = path[ptr];
        int32_t egress = num > 0 ? port_of(c, n, num) : -1;
        if (egress < 0)
            return -1;
        if (!c->is_switch[n] && (ptr > 1 || egress != port))
            return -1; /* a CA sends only through its own port, forwards nothing */
        rpath[ptr - 1] = (uint8_t)(ptr == 1 ? num : c->num[port]);
        port = cross(c, egress, h);
        if (port < 0)
            return -1;
    }
    rpath[hops] = (uint8_t)c->num[port];
    return port;
}

/* The attribute a Get reads at row ``d`` (the port the SMP reached), into ``out``:
 * 1, or 0 when Python must answer (not cached, an invalid modifier, ...). */
static int get_attr(const Core *c, int32_t d, unsigned attr, uint32_t mod, uint8_t *out)
{
    int32_t n = node_of(c, d);
    if (n < 0)
        return 0;
    switch (attr) {
    case A_NODE_DESC:
        memcpy(out, c->node_desc + (size_t)n * ATTR, ATTR);
        return 1;
    case A_NODE_INFO:
        if (!c->ni_valid[d])
            return 0;
        memcpy(out, c->ni + (size_t)d * ATTR, ATTR);
        return 1;
    case A_SWITCH_INFO:
        if (!c->is_switch[n] || !c->si_valid[n])
            return 0;
        memcpy(out, c->si + (size_t)n * ATTR, ATTR);
        return 1;
    case A_PORT_INFO: { /* sma.port_info, _target_port */
        uint32_t num = mod & 0xFF;
        int32_t t = (!c->is_switch[n] && (num == 0 || num == c->num[d])) ? d : port_of(c, n, num);
        if (t < 0 || !c->pi_valid[t])
            return 0;
        memcpy(out, c->pi + (size_t)t * ATTR, ATTR);
        out[c->pi_local_at] = (uint8_t)c->num[d];
        return 1;
    }
    case A_PKEY_TABLE: { /* sma.pkey_table */
        int32_t t = c->is_switch[n] ? port_of(c, n, mod >> 16) : d;
        uint64_t at = (uint64_t)(mod & 0xFFFF) * 64;
        if (t < 0 || !PyList_Check(c->pkeys) || t >= PyList_GET_SIZE(c->pkeys))
            return 0;
        PyObject *table = PyList_GET_ITEM(c->pkeys, t);
        if (!PyByteArray_Check(table))
            return 0;
        uint64_t size = (uint64_t)PyByteArray_GET_SIZE(table);
        if (at >= size)
            return 0;
        uint64_t k = size - at < 64 ? size - at : 64;
        memset(out, 0, ATTR);
        memcpy(out, PyByteArray_AS_STRING(table) + at, (size_t)k);
        return 1;
    }
    case A_LINEAR_FDB: { /* sma.linear_fdb, SimSwitch.lft_block */
        if (!c->is_switch[n] || mod >= c->lft_cap[n] / 64)
            return 0;
        if (!PyList_Check(c->lfts) || n >= PyList_GET_SIZE(c->lfts))
            return 0;
        PyObject *lft = PyList_GET_ITEM(c->lfts, n);
        if (!PyByteArray_Check(lft))
            return 0;
        uint64_t size = (uint64_t)PyByteArray_GET_SIZE(lft), at = (uint64_t)mod * 64;
        memset(out, 0xFF, ATTR);
        if (at < size)
            memcpy(out, PyByteArray_AS_STRING(lft) + at, (size_t)(size - at < 64 ? size - at : 64));
        return 1;
    }
    }
    return 0;
}

static int bump(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    PyObject *w = PyNumber_Add(v, s_one);
    Py_DECREF(v);
    if (w == NULL)
        return -1;
    int r = PyObject_SetAttr(obj, name, w);
    Py_DECREF(w);
    return r;
}

/* Stats, as Dispatch.process counts an answered MAD. */
static int count(Core *c, unsigned key, int answered)
{
    if (bump(c->stats, s_mads) < 0)
        return -1;
    PyObject *classes = PyObject_GetAttr(c->stats, s_classes);
    if (classes == NULL)
        return -1;
    int r = -1;
    PyObject *k = PyLong_FromUnsignedLong(key), *w = NULL;
    if (k != NULL && PyDict_Check(classes)) {
        PyObject *v = PyDict_GetItemWithError(classes, k); /* borrowed */
        if (v != NULL || !PyErr_Occurred()) {
            w = v != NULL ? PyNumber_Add(v, s_one) : PyLong_FromLong(1);
            if (w != NULL)
                r = PyDict_SetItem(classes, k, w);
        }
    } else if (k != NULL) {
        PyErr_SetString(PyExc_TypeError, "stats.classes is not a dict");
    }
    Py_XDECREF(k);
    Py_XDECREF(w);
    Py_DECREF(classes);
    if (r < 0)
        return -1;
    return answered ? bump(c->stats, s_answered) : 0;
}

/* The datagram of ``n`` bytes in the buffer, from the client ``cid`` at row ``src``:
 * 1 answered in place (the buffer holds the answer to send); 2 a directed-route SMP
 * Get or Set for an attribute the SMA has (``sma``) routed and counted both ways, as
 * Dispatch.process does before and after the SMA's handler, its requester and return
 * path written and ``routed`` its destination: Python's SMA answers it; 0 Python's
 * from the start, untouched; -1 error. */
static int answer(Core *c, int32_t src, uint32_t cid, Py_ssize_t n)
{
    uint8_t *b = c->buf, *m = b + MAD_AT;
    if (n != REQ_SIZE || c->buflen < REQ_SIZE || cid > 0xFFFF)
        return 0;
    if (src < 0 || src >= c->rows || !c->present[src] || node_of(c, src) < 0)
        return 0;
    if (!PyDict_Check(c->drops) || PyDict_GET_SIZE(c->drops) != 0)
        return 0; /* a port loses MADs (a fault): Python decides which */
    unsigned mclass = m[1];
    int directed = mclass == CLASS_SMI_DR, method = m[3];
    if (m[0] != 1 || (mclass != CLASS_SMI && !directed))
        return 0;
    if (method != METHOD_GET && !(directed && method == METHOD_SET))
        return 0;
    unsigned attr = be16(m + 16);
    uint32_t mod = be32(m + 20);
    unsigned dlid = be16(b), slid = be16(b + 4);
    uint32_t dqp = be32(b + 8), sqp = be32(b + 12);
    Hops go, back;
    go.n = back.n = 0;
    uint8_t rpath[64], data[ATTR];
    int32_t dest;
    unsigned new_slid = slid;
    if (directed) {
        unsigned hops = m[7];
        if ((m[4] & 0x80) || m[6] != 0 || hops > MAX_DR_HOPS)
            return 0;
        if (be16(m + 32) != PERMISSIVE || be16(m + 34) != PERMISSIVE)
            return 0;
        dest = dr_out(c, src, m + DR_INITIAL, hops, rpath, &go);
    } else {
        if (slid == 0)
            new_slid = c->lid[src];
        if (new_slid > 0xFFFF)
            return 0;
        dest = dlid == PERMISSIVE ? src : lid_route(c, src, dlid, &go);
    }
    if (dest < 0)
        return 0;
    int mine = method == METHOD_GET && get_attr(c, dest, attr, mod, data);
    if (!mine && !(directed && PyBytes_Check(c->sma) && attr < (unsigned)PyBytes_GET_SIZE(c->sma) &&
                   PyBytes_AS_STRING(c->sma)[attr]))
        return 0;
    if (!directed && new_slid && dest != src) { /* the answer must find its way back */
        int32_t arrived = lid_route(c, dest, new_slid, &back);
        if (arrived < 0 || c->node[arrived] != c->node[src])
            return 0;
    }
    if (count(c, mclass << 8 | (unsigned)method, mine) < 0)
        return -1;
    /* --- answered: counted on the way there and back, then turned around */
    for (int i = 0; i < go.n; i++) {
        c->mad_out[go.eg[i]]++;
        c->mad_in[go.in[i]]++;
        if (directed) { /* router.retrace */
            c->mad_out[go.in[i]]++;
            c->mad_in[go.eg[i]]++;
        }
    }
    for (int i = 0; i < back.n; i++) {
        c->mad_out[back.eg[i]]++;
        c->mad_in[back.in[i]]++;
    }
    put16(m + 8, cid); /* the requester, in TransactionID bits 48-63 */
    if (directed)
        memcpy(m + DR_RETURN, rpath, 64);
    if (!mine) {
        c->routed = dest;
        return 2;
    }
    memcpy(m + SMP_DATA, data, ATTR);
    m[3] = METHOD_GET_RESP; /* RequestView.turn_around */
    put16(m + 4, directed ? 0x8000 : 0);
    put16(b, new_slid);
    put16(b + 2, 0);
    put16(b + 4, dlid);
    put16(b + 6, 0);
    put32(b + 8, sqp);
    put32(b + 12, dqp);
    put32(b + 16, 0);
    return 1;
}

static int args_row(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, long *out)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "expected %zd arguments", want);
        return -1;
    }
    for (Py_ssize_t i = 0; i < want; i++) {
        out[i] = PyLong_AsLong(args[i]);
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static PyObject *Core_answer(Core *c, PyObject *const *args, Py_ssize_t nargs)
{
    long a[3];
    if (args_row(args, nargs, 3, a) < 0)
        return NULL;
    if (a[0] < 0 || a[0] > INT32_MAX || a[1] < 0 || a[1] > UINT32_MAX)
        return PyLong_FromLong(-1);
    int r = answer(c, (int32_t)a[0], (uint32_t)a[1], a[2]);
    if (r < 0)
        return NULL;
    return PyLong_FromLong(r == 2 ? c->routed : r == 1 ? -2 : -1);
}

/* One datagram from the socket ``fd`` of the client ``cid`` at row ``src``: -1 none
 * waiting, -2 answered but not sent (Python sends it), -3 answered and sent, -4 the
 * receive failed (Python receives, and sees why), -16 - row: routed to row for
 * Python's SMA (answer() 2), n >= 0 a datagram for Python. */
static PyObject *Core_pump(Core *c, PyObject *const *args, Py_ssize_t nargs)
{
    long a[3];
    if (args_row(args, nargs, 3, a) < 0)
        return NULL;
    ssize_t n = recv((int)a[0], c->buf, (size_t)c->buflen, MSG_DONTWAIT);
    if (n < 0)
        return PyLong_FromLong((errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : -4);
    if (a[1] < 0 || a[1] > INT32_MAX || a[2] < 0 || a[2] > UINT32_MAX)
        return PyLong_FromSsize_t(n);
    int r = answer(c, (int32_t)a[1], (uint32_t)a[2], n);
    if (r < 0)
        return NULL;
    if (r == 0)
        return PyLong_FromSsize_t(n);
    if (r == 2)
        return PyLong_FromLong(-16L - c->routed);
    if (send((int)a[0], c->buf, REQ_SIZE, MSG_DONTWAIT) != REQ_SIZE)
        return PyLong_FromLong(-2);
    return PyLong_FromLong(-3);
}

static void Core_dealloc(Core *c)
{
    for (int i = 0; i < c->nviews; i++)
        PyBuffer_Release(&c->views[i]);
    if (c->has_buf)
        PyBuffer_Release(&c->bufview);
    Py_XDECREF(c->lfts);
    Py_XDECREF(c->pkeys);
    Py_XDECREF(c->stats);
    Py_XDECREF(c->drops);
    Py_XDECREF(c->sma);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int Core_init(Core *c, PyObject *args, PyObject *kw)
{
    PyObject *flat, *buf, *stats, *drops, *sma;
    int pi_local_at;
    static char *names[] = {"flat", "buf", "stats", "drops", "pi_local_at", "sma", NULL};
    if (c->nviews || c->has_buf) {
        PyErr_SetString(PyExc_RuntimeError, "Core initialised twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOiS", names, &flat, &buf, &stats, &drops,
                                     &pi_local_at, &sma))
        return -1;
    if (pi_local_at < 0 || pi_local_at >= ATTR || !PyDict_Check(drops)) {
        PyErr_SetString(PyExc_ValueError, "bad pi_local_at or drops");
        return -1;
    }
    c->pi_local_at = pi_local_at;
    if (PyObject_GetBuffer(buf, &c->bufview, PyBUF_WRITABLE) < 0)
        return -1;
    c->has_buf = 1;
    c->buf = c->bufview.buf;
    c->buflen = c->bufview.len;
    c->rows = c->nodes = -1;
    for (int i = 0; i < F_COUNT; i++) {
        PyObject *a = PyObject_GetAttrString(flat, FIELDS[i].name);
        if (a == NULL)
            return -1;
        int r = PyObject_GetBuffer(a, &c->views[i], PyBUF_WRITABLE | PyBUF_FORMAT);
        Py_DECREF(a);
        if (r < 0)
            return -1;
        c->nviews = i + 1;
        Py_buffer *v = &c->views[i];
        Py_ssize_t count = v->len / (FIELDS[i].itemsize * FIELDS[i].width);
        Py_ssize_t *want = FIELDS[i].per_node ? &c->nodes : &c->rows;
        if (v->itemsize != (FIELDS[i].width > 1 ? 1 : FIELDS[i].itemsize) ||
            v->len % (FIELDS[i].itemsize * FIELDS[i].width) != 0 || (*want >= 0 && *want != count)) {
            PyErr_Format(PyExc_ValueError, "flat.%s has the wrong size or type", FIELDS[i].name);
            return -1;
        }
        *want = count;
    }
    if (c->rows > INT32_MAX || c->nodes > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "fabric too large");
        return -1;
    }
    c->node = c->views[F_NODE].buf;
    c->num = c->views[F_NUM].buf;
    c->present = c->views[F_PRESENT].buf;
    c->peer = c->views[F_PEER].buf;
    c->phys = c->views[F_PHYS].buf;
    c->lid = c->views[F_LID].buf;
    c->lmc = c->views[F_LMC].buf;
    c->endport = c->views[F_ENDPORT].buf;
    c->mad_in = c->views[F_IN].buf;
    c->mad_out = c->views[F_OUT].buf;
    c->pi = c->views[F_PI].buf;
    c->pi_valid = c->views[F_PI_VALID].buf;
    c->ni = c->views[F_NI].buf;
    c->ni_valid = c->views[F_NI_VALID].buf;
    c->is_switch = c->views[F_IS_SWITCH].buf;
    c->first = c->views[F_FIRST].buf;
    c->nports = c->views[F_NPORTS].buf;
    c->node_desc = c->views[F_NODE_DESC].buf;
    c->lft_top = c->views[F_LFT_TOP].buf;
    c->lft_cap = c->views[F_LFT_CAP].buf;
    c->si = c->views[F_SI].buf;
    c->si_valid = c->views[F_SI_VALID].buf;
    c->lfts = PyObject_GetAttrString(flat, "lfts");
    c->pkeys = PyObject_GetAttrString(flat, "pkeys");
    if (c->lfts == NULL || c->pkeys == NULL)
        return -1;
    Py_INCREF(stats);
    c->stats = stats;
    Py_INCREF(drops);
    c->drops = drops;
    Py_INCREF(sma);
    c->sma = sma;
    return 0;
}

static PyMethodDef Core_methods[] = {
    {"answer", (PyCFunction)(void (*)(void))Core_answer, METH_FASTCALL,
     "answer(src_row, client_id, n) -> -2 answered in place, -1 Python's, row: routed there"},
    {"pump", (PyCFunction)(void (*)(void))Core_pump, METH_FASTCALL,
     "pump(fd, src_row, client_id) -> -1 none, -2 answered unsent, -3 answered, -4 recv failed, "
     "-16 - row: routed there, n: a datagram for Python"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fabriclab.sim.wire._madcore.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The native MAD core over a fabric's flat state and a receive buffer.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_madcore", "fabriclab's native MAD core.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__madcore(void)
{
    s_mads = PyUnicode_InternFromString("mads");
    s_answered = PyUnicode_InternFromString("answered");
    s_classes = PyUnicode_InternFromString("classes");
    s_one = PyLong_FromLong(1);
    if (s_one == NULL || s_mads == NULL || s_answered == NULL || s_classes == NULL || PyType_Ready(&CoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
