/* fabriclab's host library: the umad ioctls, agent registration as the kernel does it
 * (user_mad.c ib_umad_reg_agent[2], mad.c); an agent with methods is told to the
 * server. */
#include "hostlib.h"

/* The kernel's checks of a registration (user_mad.c, then mad.c ib_register_mad_agent):
 * 0 or an errno. */
static int reg_check(const struct umad_reg_req2 *r)
{
    uint8_t c = r->mgmt_class;
    if (r->rmpp_version && r->rmpp_version != 1) /* IB_MGMT_RMPP_VERSION */
        return EINVAL;
    if (!c) /* no class: a send-only agent */
        return (r->flags & UMAD_USER_RMPP) ? EINVAL : 0;
    if (r->mgmt_class_version >= UMAD_MAX_CLASS_VERSION)
        return EINVAL;
    if (c >= 0x50 && c != 0x81) /* MAX_MGMT_CLASS; only directed route beyond it */
        return EINVAL;
    if (c >= 0x30 && c <= 0x4F && !r->oui) /* vendor range 2 needs an OUI */
        return EINVAL;
    if (!rmpp_class(c) && r->rmpp_version)
        return EINVAL;
    int smi = c == 0x01 || c == 0x81;
    return smi == (r->qpn == 0) ? 0 : EINVAL; /* SMI classes on QP0 only, GSI never */
}

/* A slot reserved while the server is told of it; a thread cancelled in that round
 * trip (hello waits in poll, a cancellation point) gives the slot back as it unwinds,
 * as the kernel's ioctl, which no signal interrupts half-way, never leaves it taken. */
struct reservation {
    struct ufd *u; /* NULL once the call has settled the slot itself */
    int id;
};

static void unreserve(struct reservation *r)
{
    if (!r->u)
        return;
    pthread_mutex_lock(&r->u->lock);
    r->u->agent[r->id].reserved = 0;
    pthread_mutex_unlock(&r->u->lock);
}

#define RESERVED(u, id) struct reservation res_ __attribute__((cleanup(unreserve))) = {u, id}
#define SETTLED() (res_.u = NULL)

/* Registers agent `r` on `u`: a free slot (0..31), and for a class with methods the
 * server told on a connection of its own (OpenSM registers while its receiver thread
 * sits in read on this fd).  The slot is reserved under the lock and the server told
 * without it, so that write and read on the fd go on meanwhile.  The slot, or -1 with
 * errno. */
static int agent_register(struct ufd *u, struct umad_reg_req2 *r)
{
    if (r->qpn != 0 && r->qpn != 1)
        return errno = EINVAL, -1;
    if (__atomic_load_n(&u->dead, __ATOMIC_ACQUIRE))
        return errno = EPIPE, -1; /* ib_umad_reg_agent: the port's device is gone */
    pthread_mutex_lock(&u->lock);
    int id = 0, err = 0;
    while (id < UMAD_MAX_AGENTS && (u->agent[id].used || u->agent[id].reserved))
        id++;
    if (id == UMAD_MAX_AGENTS)
        err = ENOMEM;
    else
        err = reg_check(r);
    if (!err)
        u->agent[id].reserved = 1;
    pthread_mutex_unlock(&u->lock);
    if (err)
        return errno = err, -1;
    RESERVED(u, id);
    int tell = r->mgmt_class && (r->method_mask[0] || r->method_mask[1]);
    if (tell) {
        char text[FL_TEXT_MAX + 1];
        uint32_t token = u->token;
        r->id = (uint32_t)id;
        int s = hello(FL_KIND_REGISTER, 0, &token, r, sizeof *r, 1, text);
        if (s < 0) {
            err = errno;
            if (err != EINVAL) /* EINVAL: a method taken, as the kernel says it */
                say_once(&said_failure, text);
        } else {
            NEXT(close)(s);
        }
    }
    SETTLED();
    pthread_mutex_lock(&u->lock);
    if (!err) {
        u->agent[id].used = 1;
        u->agent[id].told = (uint8_t)tell;
        u->agent[id].kernel_rmpp = r->rmpp_version && !(r->flags & UMAD_USER_RMPP);
        u->already_used = 1;
    }
    u->agent[id].reserved = 0;
    pthread_mutex_unlock(&u->lock);
    return err ? (errno = err, -1) : id;
}

/* Unregisters agent `id` of `u`: gone at once for write, its slot reserved until the
 * server has been told (without the lock), so that no new agent takes the id first. */
static int agent_unregister(struct ufd *u, uint32_t id)
{
    pthread_mutex_lock(&u->lock);
    int known = id < UMAD_MAX_AGENTS && u->agent[id].used;
    int told = known && u->agent[id].told;
    if (known) {
        memset(&u->agent[id], 0, sizeof u->agent[id]);
        u->agent[id].reserved = (uint8_t)told;
    }
    pthread_mutex_unlock(&u->lock);
    if (!known)
        return errno = EINVAL, -1;
    if (told) {
        RESERVED(u, (int)id);
        char text[FL_TEXT_MAX + 1];
        uint32_t token = u->token;
        int s = hello(FL_KIND_UNREGISTER, id, &token, NULL, 0, 1, text);
        if (s >= 0)
            NEXT(close)(s);
    }
    return 0;
}

/* The umad ioctls (user_mad.c ib_umad_ioctl); anything else is ENOTTY. */
static int umad_ioctl(struct ufd *u, unsigned long req, void *arg)
{
    if (u->kind != FL_KIND_UMAD)
        return errno = ENOTTY, -1;
    if (req == UMAD_REGISTER_AGENT || req == UMAD_REGISTER_AGENT2) {
        struct umad_reg_req2 r = {0};
        if (req == UMAD_REGISTER_AGENT) { /* the old request, as REGISTER_AGENT2's */
            struct umad_reg_req old;
            memcpy(&old, arg, sizeof old);
            r.qpn = old.qpn;
            r.mgmt_class = old.mgmt_class;
            r.mgmt_class_version = old.mgmt_class_version;
            r.oui = (uint32_t)old.oui[0] << 16 | old.oui[1] << 8 | old.oui[2];
            r.rmpp_version = old.rmpp_version;
            memcpy(r.method_mask, old.method_mask, sizeof r.method_mask);
        } else {
            memcpy(&r, arg, sizeof r);
            if (r.qpn != 0 && r.qpn != 1)
                return errno = EINVAL, -1;
            if (r.flags & ~(uint32_t)UMAD_USER_RMPP) { /* the flags it knows, written back */
                uint32_t cap = UMAD_USER_RMPP;
                memcpy((char *)arg + offsetof(struct umad_reg_req2, flags), &cap, sizeof cap);
                return errno = EINVAL, -1;
            }
            if (r.oui & 0xFF000000u)
                return errno = EINVAL, -1;
        }
        int id = agent_register(u, &r);
        if (id >= 0)
            memcpy(arg, &id, sizeof(uint32_t));
        return id < 0 ? -1 : 0;
    }
    if (req == UMAD_UNREGISTER_AGENT) {
        uint32_t id;
        memcpy(&id, arg, sizeof id);
        return agent_unregister(u, id);
    }
    if (req == UMAD_ENABLE_PKEY) { /* the 64-byte header is the only one served */
        pthread_mutex_lock(&u->lock);
        int used = u->already_used;
        pthread_mutex_unlock(&u->lock);
        return used ? (errno = EINVAL, -1) : 0;
    }
    return errno = ENOTTY, -1;
}

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    struct ufd *u HELD = ufd_get(fd);
    if (!u)
        return NEXT(ioctl)(fd, req, arg);
    return umad_ioctl(u, req, arg);
}
