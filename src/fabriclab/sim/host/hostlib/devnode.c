/* fabriclab's host library: /dev/infiniband/umad<N> and issm<N> as the kernel shows
 * them to stat and access (character devices); getcwd in the tree, and realpath, which
 * glibc resolves with its own system calls, so a path of the tray's tree or a device
 * node resolves as on a host. */
#include "hostlib.h"

#include <sys/sysmacros.h>

/* include/uapi/linux/major.h is silent; drivers/infiniband/core/user_mad.c:
 * IB_UMAD_MAJOR 231, umad<N> is minor N and issm<N> minor N + IB_UMAD_NUM_FIXED_MINOR
 * (64), as Documentation/admin-guide/devices.txt lists them (231 char: 0-63 umad,
 * 64-127 issm).  umad_devnode names the node "infiniband/%s" and sets no mode, so
 * devtmpfs makes it 0600. */
#define UMAD_MAJOR 231
#define UMAD_FIXED_MINORS 64

/* Whether `path` (relative to dirfd) is a device node the tray has: its kind (index in
 * *index), 0 when it is not one of ours, -1 (errno ENOENT) when the tray has no such
 * port.  The node exists when the tree lists it under class/infiniband_mad, as udev
 * makes the node for each device the kernel registers. */
static int dev_node(int dirfd, const char *path, unsigned *index, struct stat *tree_st)
{
    char norm[PATH_MAX];
    if (path && path[0] != '/' && dirfd != AT_FDCWD && strstr(path, "infiniband")) {
        if (lexical_path(dirfd, path, norm))
            return 0;
        path = norm;
    }
    int kind = dev_kind(path, index);
    if (!kind)
        return 0;
    char name[64], buf[PATH_MAX];
    snprintf(name, sizeof name, "/sys/class/infiniband_mad/%s%u",
             kind == FL_KIND_UMAD ? "umad" : "issm", *index);
    if (NEXT(stat)(sys_path(name, buf), tree_st) < 0)
        return errno = ENOENT, -1;
    return kind;
}

/* stat of a device node: 1 with the node's stat in *st (or -1 and errno in *ret), or 0
 * when `path` is not one. */
int dev_node_stat(int dirfd, const char *path, struct stat *st, int *ret)
{
    unsigned index;
    struct stat tree_st;
    int kind = dev_node(dirfd, path, &index, &tree_st);
    if (!kind)
        return 0;
    *ret = kind < 0 ? -1 : 0;
    if (kind < 0)
        return 1;
    struct stat dev;
    if (NEXT(stat)("/dev", &dev) < 0)
        memset(&dev, 0, sizeof dev);
    memset(st, 0, sizeof *st);
    st->st_dev = dev.st_dev; /* devtmpfs */
    unsigned minor = index + (kind == FL_KIND_ISSM ? UMAD_FIXED_MINORS : 0);
    st->st_ino = tree_st.st_ino;
    st->st_mode = S_IFCHR | 0600;
    st->st_nlink = 1;
    /* who may open it is whom the library serves (the fabric's owner, or root) */
    st->st_uid = geteuid();
    st->st_gid = getegid();
    st->st_rdev = makedev(UMAD_MAJOR, minor);
    st->st_blksize = 4096;
    st->st_atim = st->st_mtim = st->st_ctim = tree_st.st_ctim;
    return 1;
}

/* statx of a device node, as dev_node_stat. */
int dev_node_statx(int dirfd, const char *path, struct statx *stx, int *ret)
{
    struct stat st;
    if (!dev_node_stat(dirfd, path, &st, ret))
        return 0;
    if (*ret < 0)
        return 1;
    memset(stx, 0, sizeof *stx);
    stx->stx_mask = STATX_BASIC_STATS;
    stx->stx_blksize = (uint32_t)st.st_blksize;
    stx->stx_nlink = (uint32_t)st.st_nlink;
    stx->stx_uid = st.st_uid;
    stx->stx_gid = st.st_gid;
    stx->stx_mode = (uint16_t)st.st_mode;
    stx->stx_ino = st.st_ino;
    stx->stx_rdev_major = major(st.st_rdev);
    stx->stx_rdev_minor = minor(st.st_rdev);
    stx->stx_dev_major = major(st.st_dev);
    stx->stx_dev_minor = minor(st.st_dev);
    struct statx_timestamp t = {st.st_mtim.tv_sec, (uint32_t)st.st_mtim.tv_nsec, 0};
    stx->stx_atime = stx->stx_mtime = stx->stx_ctime = t;
    return 1;
}

/* access of a device node: read and write for whom the library serves, no execute. */
int dev_node_access(int dirfd, const char *path, int mode, int *ret)
{
    unsigned index;
    struct stat tree_st;
    int kind = dev_node(dirfd, path, &index, &tree_st);
    if (!kind)
        return 0;
    *ret = kind < 0 || (mode & X_OK) ? -1 : 0;
    if (kind > 0 && (mode & X_OK))
        errno = EACCES;
    return 1;
}

/* --- getcwd and realpath: a directory of the tree shows as /sys/class/... ---------- */

/* getcwd in the tree (after chdir("/sys/class/infiniband")): the path the process
 * went to, not the tree's own. */
char *getcwd(char *buf, size_t size)
{
    char *r = NEXT(getcwd)(buf, size);
    char v[PATH_MAX];
    const char *p = r ? virtual_path(r, v) : r;
    if (p == r)
        return r;
    size_t n = strlen(p) + 1;
    if (!buf) { /* glibc allocated it: size bytes, or as many as needed when 0 */
        free(r);
        if (size && n > size)
            return errno = ERANGE, NULL;
        return strdup(p);
    }
    if (n > size)
        return errno = ERANGE, NULL;
    return memcpy(buf, p, n);
}

/* get_current_dir_name: glibc's calls its own getcwd. */
char *get_current_dir_name(void)
{
    char *r = NEXT(get_current_dir_name)();
    char v[PATH_MAX];
    const char *p = r ? virtual_path(r, v) : r;
    if (p == r)
        return r;
    free(r);
    return strdup(p);
}

/* --- realpath: glibc's resolves with system calls of its own ------------------------ */

/* realpath for a path of the tray's tree (the tree's own path resolved, then shown as
 * /sys/class/...) or a device node of the tray (itself); libc's for anything else. */
static char *resolve(const char *path, char *resolved, size_t size)
{
    char norm[PATH_MAX], buf[PATH_MAX], out[PATH_MAX];
    unsigned index;
    struct stat st;
    const char *got;
    if (!path || !active())
        return NEXT(realpath)(path, resolved);
    int kind = dev_node(AT_FDCWD, path, &index, &st);
    if (kind < 0)
        return NULL;
    if (kind) {
        snprintf(norm, sizeof norm, "/dev/infiniband/%s%u",
                 kind == FL_KIND_UMAD ? "umad" : "issm", index);
        got = norm;
    } else {
        if (!NEXT(realpath)(sys_path(path, buf), out))
            return NULL;
        got = virtual_path(out, buf);
    }
    size_t n = strlen(got) + 1;
    if (!resolved)
        return strdup(got);
    if (n > size) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    return memcpy(resolved, got, n);
}

char *realpath(const char *path, char *resolved) { return resolve(path, resolved, PATH_MAX); }

char *canonicalize_file_name(const char *path) { return resolve(path, NULL, 0); }

/* The fortified realpath (glibc debug/realpath_chk.c). */
char *__realpath_chk(const char *path, char *resolved, size_t size);
char *__realpath_chk(const char *path, char *resolved, size_t size)
{
    if (resolved && size < PATH_MAX)
        abort(); /* __chk_fail */
    return resolve(path, resolved, PATH_MAX);
}
