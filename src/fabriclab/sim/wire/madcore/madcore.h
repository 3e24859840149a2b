/* The native MAD core's shared definitions: the formats' constants, the core's state
 * (fabriclab.sim.fabric.flat's arrays, typed) and the routing and attribute functions
 * of route.c that madcore.c calls. */
#ifndef FABRICLAB_MADCORE_H
#define FABRICLAB_MADCORE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
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
    /* PortState (14.2.5.6): a Set's LinkState 0 is "no state change" */
    PS_NOP = 0, PS_DOWN = 1, PS_INIT = 2, PS_ARMED = 3, PS_ACTIVE = 4,
};

/* set.c: a settable PortInfo component's row of Core.set_rules' table: bit offset,
 * width, rule (portinfo.RULE_*), where its value is kept (a column of setv, or one of
 * COL_*), its rule's arguments */
enum { SET_ROW = 8, SET_MAX = 48 };
enum { R_LINK, R_STORE, R_ENDPORT, R_NONZERO, R_ENABLED, R_WIDTH, R_EXTERNAL };
enum { COL_LINK = -3, COL_LMC = -2, COL_LID = -1 };
/* the facts a Set is checked by: (bit offset, width) of each */
enum { SF_STATE, SF_PHYS, SF_NEIGHBOR_MTU, SF_OPER_VLS, SF_MTU_CAP, SF_VL_CAP, SF_COUNT };

/* What the core reads: each array of the flat state, by the buffer it exports. */
enum {
    F_NODE, F_NUM, F_PRESENT, F_PEER, F_PHYS, F_LID, F_LMC, F_ENDPORT, F_IN, F_OUT,
    F_PI, F_PI_VALID, F_NI, F_NI_VALID, F_IS_SWITCH, F_FIRST, F_NPORTS, F_NODE_DESC,
    F_LFT_TOP, F_LFT_CAP, F_SI, F_SI_VALID, F_STATE, F_COUNT
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
    const uint8_t *present, *phys, *endport, *ni, *ni_valid;
    uint8_t *pi, *pi_valid, *state; /* a Set writes these (set.c) */
    const uint8_t *is_switch, *node_desc, *si, *si_valid;
    int64_t *lid, *lmc;
    const uint32_t *first, *nports, *lft_top, *lft_cap;
    uint64_t *mad_in, *mad_out;
    uint8_t *buf;
    Py_ssize_t buflen;
    /* the clients loop.c serves, by descriptor: row + 1 (0: none) and client id */
    int32_t *reg_row;
    uint32_t *reg_cid;
    long last_ns; /* loop.c: when its wait last found something (CLOCK_MONOTONIC) */
    int spin_fails, spin_skip; /* loop.c: polls in vain in a row; waits left to sleep at once */
    /* set.c's rules (Core.set_rules; set_n 0: none given, Sets are Python's) */
    int set_n;
    int64_t set_tab[SET_MAX * SET_ROW];
    int64_t facts[SF_COUNT][2];
    Py_buffer setview;
    int has_setv;
    uint64_t *setv;
    Py_ssize_t set_cols;
    PyObject *on_set, *on_lft, *encode_pi;
} Core;

/* What a Set writes, planned before anything is (set.c). */
typedef struct {
    int32_t t;  /* the port set */
    int state;  /* the PortState it moves to, or -1 */
    uint64_t val[SET_MAX];
} SetPlan;

/* descriptors loop.c serves natively: below FD_MAX; its polling before it sleeps: at
 * most SPIN_US_MAX microseconds */
enum { FD_MAX = 1 << 16, SPIN_US_MAX = 10000, SPIN_BACKOFF_MAX = 6 };
#define PUMP_ERROR LONG_MIN /* pump_step: a Python error is set */


/* A walk: the (egress, ingress) rows of the links crossed. */
typedef struct {
    int n;
    int32_t eg[HOPS_MAX], in[HOPS_MAX];
} Hops;


static inline unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

int32_t node_of(const Core *c, int32_t r);
int32_t lid_route(const Core *c, int32_t src, uint32_t dlid, Hops *h);
int32_t dr_out(const Core *c, int32_t src, const uint8_t *path, unsigned hops, uint8_t *rpath,
               Hops *h);
int get_attr(const Core *c, int32_t d, unsigned attr, uint32_t mod, uint8_t *out);
int32_t port_of(const Core *c, int32_t n, uint32_t num);
int plan_set(const Core *c, int32_t d, uint32_t mod, const uint8_t *in, SetPlan *p);
void commit_set(Core *c, int32_t d, const SetPlan *p, uint8_t *out);
PyObject *Core_set_rules(Core *c, PyObject *args);
int32_t plan_lft(const Core *c, int32_t d, uint32_t mod);
int pi_ready(const Core *c, int32_t t);
int commit_lft(Core *c, int32_t n, uint32_t mod, const uint8_t *in, uint8_t *out);
long pump_step(Core *c, int fd, int32_t row, uint32_t cid);
PyObject *Core_watch(Core *c, PyObject *const *args, Py_ssize_t nargs);
PyObject *Core_serve(Core *c, PyObject *const *args, Py_ssize_t nargs);
int args_row(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, long *out);

#endif
