/* fabriclab's host protocol and the kernel's umad ABI, as the host library (hostlib.h)
 * speaks them.  Mirrors src/fabriclab/ib/hostwire.py (the protocol; its docstring is the
 * specification) and src/fabriclab/ib/umad.py (the ABI); tests/test_hostlib.py checks
 * every #define here against those modules. */
#ifndef FABRICLAB_HOSTWIRE_H
#define FABRICLAB_HOSTWIRE_H

#include <stdint.h>

/* --- the host protocol (ib/hostwire.py) ------------------------------------------ */
#define FL_MAGIC 0x31484C46u /* "FLH1" */
#define FL_VERSION 1
#define FL_KIND_UMAD 1
#define FL_KIND_ISSM 2
#define FL_KIND_TREE 3
#define FL_KIND_REGISTER 4
#define FL_KIND_UNREGISTER 5
#define FL_TRAY_MAX 64
#define FL_HELLO_SIZE 88
#define FL_REPLY_SIZE 16
#define FL_TEXT_MAX (4096 - FL_REPLY_SIZE)
#define FL_FRAME_MAX 65536       /* bytes of one frame: a longer message goes in pieces */
#define FL_MORE 0x80000000u      /* in a first frame's header status: pieces follow */
#define FL_MESSAGE_MAX (16 << 20) /* bytes of one message, header included, either way */
#define FL_SOCKET_KIND "host"    /* the listening socket is the file <name>.host */

/* over TCP (FABRICLAB_HOST_ADDR): each packet as a u32 LE length then its bytes; AUTH
 * (the token) before the HELLO; TREE's archive after its REPLY, in entries */
#define FL_LENGTH_SIZE 4         /* a packet's length on the stream */
#define FL_TOKEN_SIZE 64         /* the token: 64 hex characters */
#define FL_TREE_MAX (16 * 1024 * 1024) /* bytes of a TREE archive */
#define FL_ENTRY_SIZE 8          /* u8 type, u8 0, u16 path length, u32 data length */
#define FL_ENTRY_DIR 1
#define FL_ENTRY_FILE 2
#define FL_ENTRY_SYMLINK 3
#define FL_ENTRY_PATH_MAX 1024

/* HELLO: the first frame of every connection (little-endian, as on amd64) */
struct fl_hello {
    uint32_t magic;
    uint16_t version, kind;
    uint32_t pid, index, token, reserved;
    char tray[FL_TRAY_MAX];
};

/* REPLY: the server's answer to a HELLO, followed by text (a root path or an error) */
struct fl_reply {
    uint32_t magic;
    int32_t err;
    uint32_t token, value;
};

/* --- the kernel's umad ABI (ib/umad.py; include/uapi/rdma/ib_user_mad.h) ---------- */
#define UMAD_ABI_VERSION 5
#define UMAD_MAX_AGENTS 32      /* IB_UMAD_MAX_AGENTS (user_mad.c) */
#define UMAD_MAX_CLASS_VERSION 8 /* MAX_MGMT_VERSION (mad_priv.h) */
#define UMAD_HDR_SIZE 64        /* struct ib_user_mad_hdr with pkey_index */
#define UMAD_STATUS_AT 4
#define UMAD_LENGTH_AT 16
#define UMAD_QPN_AT 20
#define UMAD_LID_AT 28
#define UMAD_REG_REQ_SIZE 28    /* struct ib_user_mad_reg_req */
#define UMAD_REG_REQ2_SIZE 40   /* struct ib_user_mad_reg_req2 */
#define UMAD_USER_RMPP 1        /* IB_USER_MAD_USER_RMPP: REGISTER_AGENT2's only flag */
#define UMAD_REGISTER_AGENT 0xC01C1B01u   /* _IOWR(0x1b, 1, struct ib_user_mad_reg_req) */
#define UMAD_UNREGISTER_AGENT 0x40041B02u /* _IOW(0x1b, 2, __u32) */
#define UMAD_ENABLE_PKEY 0x00001B03u      /* _IO(0x1b, 3) */
#define UMAD_REGISTER_AGENT2 0xC0281B04u  /* _IOWR(0x1b, 4, struct ib_user_mad_reg_req2) */
#define UMAD_ETIMEDOUT 110
#define UMAD_MAD_HDR 24         /* IB_MGMT_MAD_HDR */
#define UMAD_TIMEOUT_SIZE (UMAD_HDR_SIZE + UMAD_MAD_HDR) /* 88 */
#define UMAD_MIN_WRITE (UMAD_HDR_SIZE + 36)             /* + IB_MGMT_RMPP_HDR: 100 */
#define UMAD_MAD_SIZE 256       /* IB_MGMT_MAD_SIZE */
#define UMAD_RMPP_FLAGS_AT 26   /* in the MAD: rmpp_rtime_flags */
#define UMAD_RMPP_ACTIVE 0x1

/* struct ib_user_mad_reg_req: the REGISTER_AGENT argument */
struct umad_reg_req {
    uint32_t id;
    uint32_t method_mask[4];
    uint8_t qpn, mgmt_class, mgmt_class_version, oui[3], rmpp_version;
} __attribute__((aligned(4)));

/* struct ib_user_mad_reg_req2: the REGISTER_AGENT2 argument, and what REGISTER sends */
struct umad_reg_req2 {
    uint32_t id, qpn;
    uint8_t mgmt_class, mgmt_class_version;
    uint16_t res;
    uint32_t flags;
    uint64_t method_mask[2];
    uint32_t oui;
    uint8_t rmpp_version, reserved[3];
};

_Static_assert(sizeof(struct fl_hello) == FL_HELLO_SIZE, "HELLO is 88 bytes");
_Static_assert(sizeof(struct fl_reply) == FL_REPLY_SIZE, "REPLY is 16 bytes");
_Static_assert(sizeof(struct umad_reg_req) == UMAD_REG_REQ_SIZE, "reg_req is 28 bytes");
_Static_assert(sizeof(struct umad_reg_req2) == UMAD_REG_REQ2_SIZE, "reg_req2 is 40 bytes");

#endif
