/* fabriclab's host library: directories of the tray's tree (opendir, fdopendir,
 * readdir, rewinddir, telldir, seekdir, closedir) listed in the kernel's order, as
 * sysfs lists them. */
#include "hostlib.h"

/* sysfs lists a directory in kernfs order (fs/kernfs/dir.c: children sorted by
 * kernfs_name_hash, then name; "." and ".." first), not the tree's file system's.  It
 * matters: libibumad's default CA (umad.c resolve_ca_name) is the first one readdir
 * gives with an active port, which on a host is mlx5_0. */
static unsigned kernfs_hash(const char *name)
{
    uint64_t h = 0; /* init_name_hash(NULL), partial_name_hash, end_name_hash */
    for (; *name; name++)
        h = (h + ((uint64_t)(unsigned char)*name << 4) + ((unsigned char)*name >> 4)) * 11;
    unsigned x = (unsigned)((h * 0x61C8864680B583EBull) >> 32) & 0x7FFFFFFFu; /* hash_long */
    return x < 2 ? x + 2 : x >= INT_MAX ? INT_MAX - 1 : x;
}

/* qsort order of two entries: dots first, then kernfs order. */
static int kernfs_cmp(const void *a, const void *b)
{
    const char *x = (*(struct dirent64 *const *)a)->d_name;
    const char *y = (*(struct dirent64 *const *)b)->d_name;
    int dx = !strcmp(x, ".") ? 0 : !strcmp(x, "..") ? 1 : 2;
    int dy = !strcmp(y, ".") ? 0 : !strcmp(y, "..") ? 1 : 2;
    if (dx != dy || dx < 2)
        return dx - dy;
    unsigned hx = kernfs_hash(x), hy = kernfs_hash(y);
    return hx != hy ? (hx < hy ? -1 : 1) : strcmp(x, y);
}

/* An open directory of the tree: its entries, read at opendir and sorted. */
struct sdir {
    DIR *dir;
    struct dirent64 **ents;
    size_t n, at;
    struct sdir *next;
};
static struct sdir *sdirs;
static int sdir_count; /* 0: readdir passes at once */
static pthread_mutex_t sdir_lock = PTHREAD_MUTEX_INITIALIZER;

/* Lists `dir`, a directory of the tree, in kernfs order from now on. */
static void sdir_track(DIR *dir)
{
    struct sdir *d = calloc(1, sizeof *d);
    if (!d)
        return;
    d->dir = dir;
    for (struct dirent64 *e; (e = NEXT(readdir64)(dir));) {
        struct dirent64 **more = realloc(d->ents, (d->n + 1) * sizeof *more);
        struct dirent64 *copy = more ? malloc(e->d_reclen) : NULL;
        if (more)
            d->ents = more;
        if (!copy)
            break; /* out of memory: the entries so far */
        d->ents[d->n++] = memcpy(copy, e, e->d_reclen);
    }
    qsort(d->ents, d->n, sizeof *d->ents, kernfs_cmp);
    pthread_mutex_lock(&sdir_lock);
    d->next = sdirs;
    sdirs = d;
    __atomic_add_fetch(&sdir_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sdir_lock);
}

DIR *opendir(const char *path)
{
    char buf[PATH_MAX];
    const char *real = sys_path(path, buf);
    DIR *dir = NEXT(opendir)(real);
    if (dir && real != path)
        sdir_track(dir);
    return dir;
}

/* fdopendir of a directory of the tree (an fd opened at /sys/class/infiniband, which
 * open rewrote: Python's os.scandir(fd), fts, find): listed as opendir lists it. */
DIR *fdopendir(int fd)
{
    DIR *dir = NEXT(fdopendir)(fd);
    if (!dir || !active())
        return dir;
    char link[64], real[PATH_MAX], buf[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = NEXT(readlink)(link, real, sizeof real - 1);
    if (n > 0) {
        real[n] = '\0';
        if (virtual_path(real, buf) != real)
            sdir_track(dir);
    }
    return dir;
}

/* The tree's open directory `dir`, with sdir_lock held; or NULL (the lock not held). */
static struct sdir *sdir_find(DIR *dir)
{
    if (!__atomic_load_n(&sdir_count, __ATOMIC_ACQUIRE))
        return NULL;
    pthread_mutex_lock(&sdir_lock);
    struct sdir *d = sdirs;
    while (d && d->dir != dir)
        d = d->next;
    if (!d)
        pthread_mutex_unlock(&sdir_lock);
    return d;
}

/* The next entry of `dir` if it is the tree's (1, in *out), else 0. */
static int sdir_next(DIR *dir, struct dirent64 **out)
{
    struct sdir *d = sdir_find(dir);
    if (!d)
        return 0;
    *out = d->at < d->n ? d->ents[d->at++] : NULL;
    pthread_mutex_unlock(&sdir_lock);
    return 1;
}

/* rewinddir, telldir and seekdir of the tree's directories move in its sorted list. */
void rewinddir(DIR *dir)
{
    struct sdir *d = sdir_find(dir);
    NEXT(rewinddir)(dir); /* the fd's offset too: a dup of it (os.listdir(fd)) reads on */
    if (!d)
        return;
    d->at = 0;
    pthread_mutex_unlock(&sdir_lock);
}

long telldir(DIR *dir)
{
    struct sdir *d = sdir_find(dir);
    if (!d)
        return NEXT(telldir)(dir);
    long at = (long)d->at;
    pthread_mutex_unlock(&sdir_lock);
    return at;
}

void seekdir(DIR *dir, long at)
{
    struct sdir *d = sdir_find(dir);
    if (!d) {
        NEXT(seekdir)(dir, at);
        return;
    }
    d->at = at < 0 ? 0 : (size_t)at > d->n ? d->n : (size_t)at;
    pthread_mutex_unlock(&sdir_lock);
}

/* struct dirent and dirent64 are the same on x86-64 (LP64). */
struct dirent *readdir(DIR *dir)
{
    struct dirent64 *e;
    return sdir_next(dir, &e) ? (struct dirent *)e : NEXT(readdir)(dir);
}

struct dirent64 *readdir64(DIR *dir)
{
    struct dirent64 *e;
    return sdir_next(dir, &e) ? e : NEXT(readdir64)(dir);
}

int closedir(DIR *dir)
{
    if (__atomic_load_n(&sdir_count, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&sdir_lock);
        struct sdir **p = &sdirs;
        while (*p && (*p)->dir != dir)
            p = &(*p)->next;
        struct sdir *d = *p;
        if (d) {
            *p = d->next;
            __atomic_sub_fetch(&sdir_count, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&sdir_lock);
        if (d) {
            for (size_t i = 0; i < d->n; i++)
                free(d->ents[i]);
            free(d->ents);
            free(d);
        }
    }
    return NEXT(closedir)(dir);
}
