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
#include "madcore.h"

static const struct { const char *name; Py_ssize_t itemsize; int per_node; Py_ssize_t width; } FIELDS[F_COUNT] = {
    {"node", 4, 0, 1}, {"num", 2, 0, 1}, {"present", 1, 0, 1}, {"peer", 4, 0, 1},
    {"phys", 1, 0, 1}, {"lid", 8, 0, 1}, {"lmc", 8, 0, 1}, {"is_endport", 1, 0, 1},
    {"mad_in", 8, 0, 1}, {"mad_out", 8, 0, 1}, {"pi", 1, 0, ATTR}, {"pi_valid", 1, 0, 1},
    {"ni", 1, 0, ATTR}, {"ni_valid", 1, 0, 1}, {"is_switch", 1, 1, 1}, {"first", 4, 1, 1},
    {"nports", 4, 1, 1}, {"node_desc", 1, 1, ATTR}, {"lft_top", 4, 1, 1},
    {"lft_cap", 4, 1, 1}, {"si", 1, 1, ATTR}, {"si_valid", 1, 1, 1}, {"state", 1, 0, 1},
};

static PyObject *s_mads, *s_answered, *s_classes, *s_one;

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
        if (slid == 0) {
            if (c->lid[src] < 0 || c->lid[src] > 0xFFFF)
                return 0;
            new_slid = (unsigned)c->lid[src];
        }
        dest = dlid == PERMISSIVE ? src : lid_route(c, src, dlid, &go);
    }
    if (dest < 0)
        return 0;
    SetPlan plan;
    int dr_set = directed && method == METHOD_SET;
    int setting = dr_set && attr == A_PORT_INFO && plan_set(c, dest, mod, m + SMP_DATA, &plan);
    int32_t lft_node = dr_set && attr == A_LINEAR_FDB ? plan_lft(c, dest, mod) : -1;
    int mine = setting || lft_node >= 0 ||
               (method == METHOD_GET && get_attr(c, dest, attr, mod, data));
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
    if (setting || lft_node >= 0) { /* carried out, then Python told (what changed) */
        if (setting)
            commit_set(c, dest, &plan, data);
        else if (commit_lft(c, lft_node, mod, m + SMP_DATA, data) < 0)
            return -1;
        PyObject *at = PyLong_FromLong(setting ? plan.t : lft_node);
        PyObject *r = at != NULL ? PyObject_CallOneArg(setting ? c->on_set : c->on_lft, at) : NULL;
        Py_XDECREF(at);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
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

int args_row(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, long *out)
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
 * waiting, -3 answered and sent, -2 answered but not sent (Python sends it), -4 the
 * receive failed (Python receives, and sees why), -16 - row: routed to row for
 * Python's SMA (answer() 2), n >= 0 a datagram for Python, PUMP_ERROR a Python error set.
 * Each code but -1, -3 and PUMP_ERROR leaves the datagram in the buffer. */
long pump_step(Core *c, int fd, int32_t row, uint32_t cid)
{
    ssize_t n = recv(fd, c->buf, (size_t)c->buflen, MSG_DONTWAIT);
    if (n < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : -4;
    if (row < 0)
        return (long)n;
    int r = answer(c, row, cid, n);
    if (r < 0)
        return PUMP_ERROR;
    if (r == 0)
        return (long)n;
    if (r == 2)
        return -16L - c->routed;
    if (send(fd, c->buf, REQ_SIZE, MSG_DONTWAIT) != REQ_SIZE)
        return -2;
    return -3;
}

/* The waiting datagrams of a client, up to ``max`` answered and sent here (a wake-up's
 * worth, without a call from Python for each): pump_step's codes, -3 when ``max`` were
 * answered (more may wait). */
static PyObject *Core_pump(Core *c, PyObject *const *args, Py_ssize_t nargs)
{
    long a[4];
    if (args_row(args, nargs, 4, a) < 0)
        return NULL;
    if (a[3] < 1 || a[3] > 1024) {
        PyErr_SetString(PyExc_ValueError, "max must be 1 to 1024");
        return NULL;
    }
    int32_t row = (a[1] < 0 || a[1] > INT32_MAX || a[2] < 0 || a[2] > UINT32_MAX) ? -1 : (int32_t)a[1];
    for (long i = 0; i < a[3]; i++) {
        long r = pump_step(c, (int)a[0], row, (uint32_t)a[2]);
        if (r == PUMP_ERROR)
            return NULL;
        if (r != -3)
            return PyLong_FromLong(r);
    }
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
    Py_XDECREF(c->on_set);
    Py_XDECREF(c->on_lft);
    Py_XDECREF(c->encode_pi);
    if (c->has_setv)
        PyBuffer_Release(&c->setview);
    PyMem_Free(c->reg_row);
    PyMem_Free(c->reg_cid);
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
    c->state = c->views[F_STATE].buf;
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
     "pump(fd, src_row, client_id, max) -> -1 none left, -3 max answered, -2 answered unsent, "
     "-4 recv failed, "
     "-16 - row: routed there, n: a datagram for Python"},
    {"set_rules", (PyCFunction)(void (*)(void))Core_set_rules, METH_VARARGS,
     "set_rules(table, facts, setv, columns, on_set): the PortInfo Set's rules; from then "
     "on the core carries out the Sets that change nothing but the port's values"},
    {"watch", (PyCFunction)(void (*)(void))Core_watch, METH_FASTCALL,
     "watch(fd, src_row, client_id): serve fd's datagrams in serve(); src_row -1: no longer"},
    {"serve", (PyCFunction)(void (*)(void))Core_serve, METH_FASTCALL,
     "serve(epoll_fd, timeout_ms, spin_us) -> (pending, events): the loop's wait (polling "
     "spin_us after the last thing found before it sleeps), answering the watched clients' "
     "datagrams it can until something needs Python or the time is up"},
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
