/* The SubnSet of PortInfo, native: the rules of fabriclab.sim.fabric.sma._set_port_info
 * and fabriclab.sim.fabric.portinfo's table, told to the core by Python
 * (Core.set_rules, made from portinfo.SETTABLE), applied to the port's values kept in
 * the flat state (setv, lid, lmc, state) and to its encoded PortInfo, which a Set
 * changes in those components only (the others are capabilities and the trained link).
 *
 * Only what the Python SMA would carry out with no side effect but the port's values
 * is done here: a Set that asks for a physical state, LinkState Down, a state change
 * the link's state machine refuses, a field out of its bounds, another port of a CA, or
 * a port whose PortInfo is not encoded, is left to Python untouched (plan() decides
 * before anything is written).  After a Set, Python is told the port changed
 * (Core.set_rules' on_set: the routes and the traffic look again), as SimPort.changed
 * and Dispatch.routed do. */
#include "madcore.h"

/* a big-endian bit field (IBA's numbering: bit 0 the top bit of byte 0) of at most 64
 * bits: the (at most 9) bytes it spans, as one number */
static uint64_t get_bits(const uint8_t *b, int off, int width)
{
    int first = off >> 3, last = (off + width - 1) >> 3, shift = 7 - ((off + width - 1) & 7);
    unsigned __int128 acc = 0;
    for (int i = first; i <= last; i++)
        acc = acc << 8 | b[i];
    acc >>= shift;
    return width == 64 ? (uint64_t)acc : (uint64_t)acc & ((UINT64_C(1) << width) - 1);
}

static void put_bits(uint8_t *b, int off, int width, uint64_t v)
{
    int first = off >> 3, last = (off + width - 1) >> 3, shift = 7 - ((off + width - 1) & 7);
    unsigned __int128 mask = width == 64 ? ~UINT64_C(0) : ((UINT64_C(1) << width) - 1);
    unsigned __int128 acc = 0;
    for (int i = first; i <= last; i++)
        acc = acc << 8 | b[i];
    acc = (acc & ~(mask << shift)) | (((unsigned __int128)v & mask) << shift);
    for (int i = last; i >= first; i--, acc >>= 8)
        b[i] = (uint8_t)acc;
}

static uint64_t stored(const Core *c, int32_t t, int64_t col)
{
    if (col >= 0)
        return c->setv[(size_t)t * (size_t)c->set_cols + (size_t)col];
    if (col == COL_LID)
        return (uint64_t)c->lid[t];
    if (col == COL_LMC)
        return (uint64_t)c->lmc[t];
    return 0;
}

static int field(const int64_t *f, const uint8_t *b, uint64_t *out)
{
    if (f[0] < 0)
        return 0;
    *out = get_bits(b, (int)f[0], (int)f[1]);
    return 1;
}

/* Whether row ``t``'s PortInfo is encoded, encoding it (Python's encoder, given by
 * set_rules) when it is not yet: a cache filled, nothing changed.  If that fails, the
 * MAD is left to Python, which meets the failure again and answers for it. */
int pi_ready(const Core *c, int32_t t)
{
    if (c->pi_valid[t])
        return 1;
    if (c->encode_pi == NULL)
        return 0;
    PyObject *row = PyLong_FromLong(t);
    PyObject *r = row != NULL ? PyObject_CallOneArg(c->encode_pi, row) : NULL;
    Py_XDECREF(row);
    if (r == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(r);
    return c->pi_valid[t];
}

/* Whether the Set in ``in`` to the PortInfo that modifier ``mod`` names, reached at row
 * ``d``, is one the core carries out; if so ``p`` says what it writes.  Writes nothing. */
int plan_set(const Core *c, int32_t d, uint32_t mod, const uint8_t *in, SetPlan *p)
{
    if (c->set_n == 0)
        return 0;
    int32_t n = node_of(c, d);
    if (n < 0)
        return 0;
    uint32_t num = mod & 0xFF;
    int32_t t;
    if (c->is_switch[n])
        t = port_of(c, n, num);
    else if (num == 0 || num == c->num[d])
        t = d;
    else
        return 0; /* another port of a CA: "invalid field", Python's to say */
    if (t < 0 || !pi_ready(c, t))
        return 0;
    const uint8_t *cur = c->pi + (size_t)t * ATTR;
    uint64_t state = get_bits(in, (int)c->facts[SF_STATE][0], (int)c->facts[SF_STATE][1]);
    uint64_t phys = get_bits(in, (int)c->facts[SF_PHYS][0], (int)c->facts[SF_PHYS][1]);
    if (phys != 0 || (state != PS_NOP && state != PS_ARMED && state != PS_ACTIVE))
        return 0; /* the link's state machine, or invalid: Python's */
    unsigned now = c->state[t];
    if (c->num[t] != 0 && (state == PS_ARMED || state == PS_ACTIVE)) {
        unsigned need = state == PS_ARMED ? PS_INIT : PS_ARMED;
        int32_t q = c->peer[t];
        if (c->phys[t] != LINKUP || q < 0 || q >= c->rows || (now != need && now != state) ||
            c->state[q] < need)
            return 0;
    }
    uint64_t mtu = 0, mtu_cap = 0, vls = 0, vl_cap = 0;
    if (!field(c->facts[SF_NEIGHBOR_MTU], in, &mtu) || !field(c->facts[SF_MTU_CAP], cur, &mtu_cap) ||
        !field(c->facts[SF_OPER_VLS], in, &vls) || !field(c->facts[SF_VL_CAP], cur, &vl_cap))
        return 0;
    if (mtu > mtu_cap || vls > vl_cap)
        return 0;
    int endport = c->endport[t], external = c->is_switch[n] && c->num[t] != 0;
    for (int i = 0; i < c->set_n; i++) {
        const int64_t *r = c->set_tab + (size_t)i * SET_ROW;
        uint64_t v = get_bits(in, (int)r[0], (int)r[1]), old = stored(c, t, r[3]), val = old;
        switch (r[2]) {
        case R_STORE:
            val = v;
            break;
        case R_ENDPORT:
            val = endport ? v : old;
            break;
        case R_NONZERO:
            val = v ? v : old;
            break;
        case R_ENABLED: { /* r[4]: all supported; r[5], r[6]: the Supported field, or -1: 0x7 */
            uint64_t sup = r[5] >= 0 ? get_bits(cur, (int)r[5], (int)r[6]) : 0x7;
            val = !v ? old : v == (uint64_t)r[4] ? sup : v;
            break;
        }
        case R_WIDTH: { /* r[5], r[6]: LinkWidthSupported */
            uint64_t sup = get_bits(cur, (int)r[5], (int)r[6]);
            val = !v ? old : v == 0xFF ? sup : (v & sup);
            break;
        }
        case R_EXTERNAL: /* r[4]: whether the switch offers it */
            val = r[4] && external ? v : old;
            break;
        default: /* LinkState, PortPhysicalState: above */
            break;
        }
        p->val[i] = val;
    }
    p->t = t;
    p->state = (c->num[t] != 0 && (state == PS_ARMED || state == PS_ACTIVE) && now != state)
                   ? (int)state
                   : -1;
    return 1;
}

/* Carry out ``p``: the port's values and its encoded PortInfo; ``out`` the answer's data
 * (LocalPortNum the port reached, row ``d``). */
void commit_set(Core *c, int32_t d, const SetPlan *p, uint8_t *out)
{
    int32_t t = p->t;
    uint8_t *pi = c->pi + (size_t)t * ATTR;
    for (int i = 0; i < c->set_n; i++) {
        const int64_t *r = c->set_tab + (size_t)i * SET_ROW;
        int64_t col = r[3];
        if (col >= 0)
            c->setv[(size_t)t * (size_t)c->set_cols + (size_t)col] = p->val[i];
        else if (col == COL_LID)
            c->lid[t] = (int64_t)p->val[i];
        else if (col == COL_LMC)
            c->lmc[t] = (int64_t)p->val[i];
        else
            continue;
        put_bits(pi, (int)r[0], (int)r[1], p->val[i]);
    }
    if (p->state >= 0) {
        c->state[t] = (uint8_t)p->state;
        put_bits(pi, (int)c->facts[SF_STATE][0], (int)c->facts[SF_STATE][1], (uint64_t)p->state);
    }
    memcpy(out, pi, ATTR);
    out[c->pi_local_at] = (uint8_t)c->num[d];
}

/* The SubnSet of a LinearForwardingTable block (sma.linear_fdb, SimSwitch.write_lft_block)
 * the port reached at row ``d`` asks of its switch: the switch's node, or -1 when Python
 * answers it (not a switch, a block beyond LinearFDBCap: "invalid field"). */
int32_t plan_lft(const Core *c, int32_t d, uint32_t mod)
{
    int32_t n = node_of(c, d);
    if (n < 0 || c->on_lft == NULL || !c->is_switch[n] || mod >= c->lft_cap[n] / 64)
        return -1;
    if (!PyList_Check(c->lfts) || n >= PyList_GET_SIZE(c->lfts) ||
        !PyByteArray_Check(PyList_GET_ITEM(c->lfts, n)))
        return -1;
    return n;
}

/* Write block ``mod`` of node ``n``'s table from ``in`` (the table grown with 0xFF to
 * hold it, as write_lft_block does), ``out`` the answer's data; -1 with a Python error
 * (the table could not grow). */
int commit_lft(Core *c, int32_t n, uint32_t mod, const uint8_t *in, uint8_t *out)
{
    if (!PyList_Check(c->lfts) || n >= PyList_GET_SIZE(c->lfts) ||
        !PyByteArray_Check(PyList_GET_ITEM(c->lfts, n))) { /* changed since plan_lft */
        PyErr_SetString(PyExc_RuntimeError, "a switch's forwarding table went away");
        return -1;
    }
    PyObject *lft = PyList_GET_ITEM(c->lfts, n);
    Py_ssize_t size = PyByteArray_GET_SIZE(lft), end = ((Py_ssize_t)mod + 1) * 64;
    if (size < end) {
        if (PyByteArray_Resize(lft, end) < 0)
            return -1;
        memset(PyByteArray_AS_STRING(lft) + size, 0xFF, (size_t)(end - size));
    }
    memcpy(PyByteArray_AS_STRING(lft) + (Py_ssize_t)mod * 64, in, 64);
    memcpy(out, in, ATTR);
    return 0;
}

/* set_rules(table, facts, setv, columns, on_set, on_lft, encode_pi): the Set rules (SET_ROW int64s a
 * settable component: bit offset, width, rule, column (COL_*), three arguments), the
 * facts (bit offset and width of LinkState, PortPhysicalState, NeighborMTU, OperVLs as
 * written, MtuCap and VLCap as encoded), the flat state's setv and its columns, and what
 * to call with a port's row after a PortInfo Set and with a switch's node after a
 * forwarding table block's, and to encode a port's PortInfo (its row) when the core
 * needs it and it is not encoded (a Set changed it since). */
static int read_int64s(PyObject *obj, int64_t *out, Py_ssize_t max, Py_ssize_t *n)
{
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_FORMAT) < 0)
        return -1;
    int ok = b.itemsize == 8 && b.format != NULL && (b.format[0] == 'q' || b.format[0] == 'l') &&
             b.len % 8 == 0 && b.len / 8 <= max;
    if (ok) {
        memcpy(out, b.buf, (size_t)b.len);
        *n = b.len / 8;
    }
    PyBuffer_Release(&b);
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "set rules: not an array of 64-bit ints, or too long");
    return ok ? 0 : -1;
}

static int bits_ok(int64_t off, int64_t width)
{
    return off >= 0 && width > 0 && width <= 64 && off + width <= 8 * ATTR;
}

PyObject *Core_set_rules(Core *c, PyObject *args)
{
    PyObject *table, *facts, *setv, *on_set, *on_lft, *encode_pi;
    Py_ssize_t cols, nt, nf;
    if (!PyArg_ParseTuple(args, "OOOnOOO", &table, &facts, &setv, &cols, &on_set, &on_lft,
                          &encode_pi))
        return NULL;
    if (c->set_n || c->has_setv) {
        PyErr_SetString(PyExc_RuntimeError, "set rules given twice");
        return NULL;
    }
    int64_t tab[SET_MAX * SET_ROW], fa[SF_COUNT * 2];
    if (read_int64s(table, tab, SET_MAX * SET_ROW, &nt) < 0 || read_int64s(facts, fa, SF_COUNT * 2, &nf) < 0)
        return NULL;
    int ok = nt > 0 && nt % SET_ROW == 0 && nf == SF_COUNT * 2 && cols >= 1 && PyCallable_Check(on_set) &&
             PyCallable_Check(on_lft) && PyCallable_Check(encode_pi);
    for (Py_ssize_t i = 0; ok && i < nt / SET_ROW; i++) { /* each field inside PortInfo */
        const int64_t *r = tab + i * SET_ROW;
        ok = bits_ok(r[0], r[1]) && r[2] >= R_LINK && r[2] <= R_EXTERNAL && r[3] >= COL_LINK &&
             r[3] < cols && (r[5] < 0 || bits_ok(r[5], r[6])) &&
             (r[2] != R_WIDTH || r[5] >= 0);
    }
    for (int i = 0; ok && i < SF_COUNT; i++)
        ok = bits_ok(fa[2 * i], fa[2 * i + 1]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "bad set rules");
        return NULL;
    }
    if (PyObject_GetBuffer(setv, &c->setview, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return NULL;
    if (c->setview.itemsize != 8 || c->setview.len != c->rows * cols * 8) {
        PyBuffer_Release(&c->setview);
        PyErr_SetString(PyExc_ValueError, "setv is not rows x columns of 64-bit values");
        return NULL;
    }
    c->has_setv = 1;
    c->setv = c->setview.buf;
    c->set_cols = cols;
    memcpy(c->set_tab, tab, sizeof(int64_t) * (size_t)nt);
    memcpy(c->facts, fa, sizeof c->facts);
    Py_INCREF(on_set);
    c->on_set = on_set;
    Py_INCREF(on_lft);
    c->on_lft = on_lft;
    Py_INCREF(encode_pi);
    c->encode_pi = encode_pi;
    c->set_n = (int)(nt / SET_ROW);
    Py_RETURN_NONE;
}
