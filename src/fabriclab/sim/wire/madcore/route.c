/* The native MAD core's routing and answers: how a MAD crosses the fabric (as
 * fabriclab.sim.fabric.router walks it: IBA Vol. 1, 14.2.2; LID-routed SMPs on VL15
 * need only physically up links) and the SMA attributes a Get reads (as
 * fabriclab.sim.fabric.sma answers them: IBA Vol. 1, 14.2.5), from the flat state.
 * Every row, node and table index is checked before it is used. */
#include "madcore.h"

/* Port ``num`` of node ``n``: its row, or -1 when the node has no such port. */
int32_t port_of(const Core *c, int32_t n, uint32_t num)
{
    if (n < 0 || n >= c->nodes || num >= c->nports[n])
        return -1;
    uint64_t r = (uint64_t)c->first[n] + num;
    if (r >= (uint64_t)c->rows || !c->present[r])
        return -1;
    return (int32_t)r;
}

int32_t node_of(const Core *c, int32_t r)
{
    int32_t n = c->node[r];
    return (n >= 0 && n < c->nodes) ? n : -1;
}

/* SimPort.has_lid: 1 an end port whose base LID and LMC cover ``lid``, 0 not, -1 a
 * LMC Python would fail on (negative) or that this cannot be sure of. */
static int has_lid(const Core *c, int32_t r, uint32_t lid)
{
    int64_t base = c->lid[r], lmc = c->lmc[r];
    if (!c->endport[r] || base == 0)
        return 0;
    if (lmc < 0 || lmc > 62 || base > 0xFFFFFFFFLL || base < -0xFFFFFFFFLL)
        return -1;
    return base <= (int64_t)lid && (int64_t)lid < base + ((int64_t)1 << lmc);
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
int32_t lid_route(const Core *c, int32_t src, uint32_t dlid, Hops *h)
{
    h->n = 0;
    int here = has_lid(c, src, dlid);
    if (here)
        return here > 0 ? src : -1;
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
            return has_lid(c, port, dlid) > 0 ? port : -1;
        int out = out_port(c, n, dlid);
        if (out < 0)
            return -1;
        if (out == 0) {
            int32_t p0 = port_of(c, n, 0);
            return (p0 >= 0 && has_lid(c, p0, dlid) > 0) ? p0 : -1;
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
int32_t dr_out(const Core *c, int32_t src, const uint8_t *path, unsigned hops,
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
int get_attr(const Core *c, int32_t d, unsigned attr, uint32_t mod, uint8_t *out)
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
        if (t < 0 || !pi_ready(c, t))
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

