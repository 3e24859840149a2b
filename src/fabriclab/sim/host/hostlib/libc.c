/* fabriclab's host library: libc's own functions, looked up on first use (dlsym
 * RTLD_NEXT), for the calls the library wraps and still has to make (NEXT). */
#include "hostlib.h"

void *next_symbol(void **slot, const char *name)
{
    void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        if (!f) {
            fprintf(stderr, "fabriclab: libc has no %s\n", name);
            abort();
        }
        __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    }
    return f;
}
