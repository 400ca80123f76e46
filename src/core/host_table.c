/*
 * Host tables: host memory for a large table that the GPU reads over UVA,
 * mapped with huge pages where the system allows it (ingot.h, "Host
 * tables"; docs/ple.md). A setup call: the only allocation outside context
 * creation.
 *
 * Strategies, tried in this order among the allowed ones:
 *   hugetlb-1g  mmap(MAP_HUGETLB | 1 GiB), from the reserved 1 GiB pool
 *   hugetlb-2m  mmap(MAP_HUGETLB | 2 MiB), from the reserved 2 MiB pool
 *   thp         anonymous mmap aligned to 2 MiB + madvise(MADV_HUGEPAGE)
 *   pinned      cudaHostAlloc (CUDA), plain anonymous memory (CPU)
 * The first three are registered with the context's GPU by its backend
 * (cudaHostRegister, mapped + portable); a CPU context just keeps them.
 * hugetlb mappings reserve their pages at mmap time, and are then faulted in
 * (MADV_POPULATE_WRITE, Linux 5.14+), so that a pool too small or a
 * fault-time limit (a hugetlb cgroup, a NUMA policy) fails here with
 * ALLOC_FAILED, not later with SIGBUS on the caller's first write. Every
 * mapping is MADV_DONTFORK: a fork() does not copy (or share, stale) tens
 * of GB of registered pages.
 */
#if defined(__linux__)
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_HUGETLB, MADV_HUGEPAGE */
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

#if defined(__linux__)
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define HOST_TABLE_MMAP 1
#else
#define HOST_TABLE_MMAP 0
#endif

#define ALL_STRATEGIES                                                             \
  (INGOT_HOST_TABLE_HUGETLB_1G | INGOT_HOST_TABLE_HUGETLB_2M | INGOT_HOST_TABLE_THP | \
   INGOT_HOST_TABLE_PINNED)
#define MIB ((int64_t)1 << 20)
#define GIB ((int64_t)1 << 30)
#define WHY_BYTES 320

struct ingot_host_table {
  void *data;
  int64_t bytes;        /* as asked */
  int64_t mapped_bytes; /* rounded up to page_bytes */
  int64_t page_bytes;
  uint32_t strategy;
  int registered;       /* ops->host_register succeeded */
  int cuda_alloc;       /* data came from ops->host_alloc */
  int device;
  const ingot_backend_ops *ops;
  void *map_base; /* what to munmap / free (the mapping may start before data) */
  size_t map_len;
};

const char *ingot_host_table_strategy_name(uint32_t strategy) {
  switch (strategy) {
    case INGOT_HOST_TABLE_AUTO: return "auto";
    case INGOT_HOST_TABLE_HUGETLB_1G: return "hugetlb-1g";
    case INGOT_HOST_TABLE_HUGETLB_2M: return "hugetlb-2m";
    case INGOT_HOST_TABLE_THP: return "thp";
    case INGOT_HOST_TABLE_PINNED: return "pinned";
    default: return "invalid";
  }
}

static int64_t base_page_bytes(void) {
#if HOST_TABLE_MMAP
  long p = sysconf(_SC_PAGESIZE);
  if (p > 0) return (int64_t)p;
#endif
  return 4096;
}

/* ---- small readers of /proc and /sys --------------------------------------- */

#if HOST_TABLE_MMAP
/* One integer from a sysfs file; -1 if unreadable. */
static int64_t read_sys_int(const char *path) {
  FILE *f = fopen(path, "r");
  long long v = -1;
  if (f == NULL) return -1;
  if (fscanf(f, "%lld", &v) != 1) v = -1;
  fclose(f);
  return (int64_t)v;
}

/* The first line of a file into buf (newline removed); 0 on success. */
static int read_sys_line(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  int ok = fgets(buf, (int)size, f) != NULL;
  fclose(f);
  if (!ok) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}
#endif

/* ---- the strategies ---------------------------------------------------------- */

/* Maps [*data, *data + mapped) for one strategy; fills t's mapping fields.
 * Returns SUCCESS or a status with the reason in why. */
static ingot_status map_hugetlb(struct ingot_host_table *t, int64_t page, char *why,
                                size_t why_size) {
#if HOST_TABLE_MMAP
  int log2 = page == GIB ? 30 : 21;
  const char *label = page == GIB ? "1 GiB" : "2 MiB";
  const char *pool = page == GIB ? "/sys/kernel/mm/hugepages/hugepages-1048576kB"
                                 : "/sys/kernel/mm/hugepages/hugepages-2048kB";
  size_t len = (size_t)t->mapped_bytes;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (log2 << MAP_HUGE_SHIFT), -1, 0);
  if (p != MAP_FAILED) {
    /* fault every page in now: EINVAL means a kernel without the advice
     * (older than 5.14), where the mmap's reservation is all there is */
    if (madvise(p, len, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
      const int err = errno;
      munmap(p, len);
      snprintf(why, why_size, "%s pages reserved but not given (a cgroup or NUMA limit?): "
               "madvise(MADV_POPULATE_WRITE): %s", label, strerror(err));
      return INGOT_STATUS_ALLOC_FAILED;
    }
    madvise(p, len, MADV_DONTFORK);
    t->data = t->map_base = p;
    t->map_len = len;
    return INGOT_STATUS_SUCCESS;
  }
  int err = errno;
  char path[160];
  snprintf(path, sizeof path, "%s/free_hugepages", pool);
  int64_t free_pages = read_sys_int(path);
  snprintf(path, sizeof path, "%s/resv_hugepages", pool);
  int64_t resv = read_sys_int(path);
  int64_t need = t->mapped_bytes / page;
  if (free_pages < 0) {
    snprintf(why, why_size, "no %s huge pages on this kernel or CPU (mmap: %s)", label,
             strerror(err));
    return INGOT_STATUS_NOT_SUPPORTED;
  }
  if (err == ENOMEM) {
    int64_t avail = free_pages - (resv > 0 ? resv : 0);
    if (avail < 0) avail = 0;
    snprintf(why, why_size,
             "%s %s huge pages reserved: the table needs %" PRId64 ", %" PRId64 " free (%s)",
             avail == 0 ? "no" : "too few", label, need, avail,
             page == GIB ? "hugepages-1048576kB/nr_hugepages or boot hugepagesz=1G hugepages=N"
                         : "/proc/sys/vm/nr_hugepages");
    return INGOT_STATUS_ALLOC_FAILED;
  }
  snprintf(why, why_size, "mmap(MAP_HUGETLB, %s pages, %zu bytes): %s", label, len,
           strerror(err));
  return err == EINVAL ? INGOT_STATUS_NOT_SUPPORTED : INGOT_STATUS_ALLOC_FAILED;
#else
  (void)t, (void)page;
  snprintf(why, why_size, "hugetlb pages need Linux");
  return INGOT_STATUS_NOT_SUPPORTED;
#endif
}

static ingot_status map_thp(struct ingot_host_table *t, char *why, size_t why_size) {
#if HOST_TABLE_MMAP
  static const char setting[] = "/sys/kernel/mm/transparent_hugepage/enabled";
  char mode[128];
  if (read_sys_line(setting, mode, sizeof mode) != 0) {
    snprintf(why, why_size, "no transparent huge pages on this kernel (%s)", setting);
    return INGOT_STATUS_NOT_SUPPORTED;
  }
  if (strstr(mode, "[never]") != NULL) {
    snprintf(why, why_size, "transparent huge pages off (%s: set madvise or always)", setting);
    return INGOT_STATUS_NOT_SUPPORTED;
  }
  /* Over-map by one huge page and trim, so the table starts on a 2 MiB
   * boundary and every 2 MiB of it can be one huge page. */
  size_t len = (size_t)t->mapped_bytes, extra = (size_t)(2 * MIB);
  if (len > SIZE_MAX - extra) {
    snprintf(why, why_size, "%zu bytes + 2 MiB of alignment overflow", len);
    return INGOT_STATUS_ALLOC_FAILED;
  }
  uint8_t *p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    snprintf(why, why_size, "mmap(%zu bytes): %s", len + extra, strerror(errno));
    return INGOT_STATUS_ALLOC_FAILED;
  }
  uintptr_t a = ((uintptr_t)p + extra - 1) / extra * extra;
  size_t head = (size_t)(a - (uintptr_t)p), tail = extra - head;
  if (head) munmap(p, head);
  if (tail) munmap((uint8_t *)a + len, tail);
  if (madvise((void *)a, len, MADV_HUGEPAGE) != 0) {
    int err = errno;
    munmap((void *)a, len);
    snprintf(why, why_size, "madvise(MADV_HUGEPAGE): %s", strerror(err));
    return INGOT_STATUS_NOT_SUPPORTED;
  }
  madvise((void *)a, len, MADV_DONTFORK);
  t->data = t->map_base = (void *)a;
  t->map_len = len;
  return INGOT_STATUS_SUCCESS;
#else
  (void)t;
  snprintf(why, why_size, "transparent huge pages need Linux");
  return INGOT_STATUS_NOT_SUPPORTED;
#endif
}

static ingot_status map_plain(struct ingot_host_table *t, char *why, size_t why_size) {
  size_t len = (size_t)t->mapped_bytes;
#if HOST_TABLE_MMAP
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    snprintf(why, why_size, "mmap(%zu bytes): %s", len, strerror(errno));
    return INGOT_STATUS_ALLOC_FAILED;
  }
  madvise(p, len, MADV_DONTFORK);
#else
  void *p = aligned_alloc((size_t)t->page_bytes, len);
  if (p == NULL) {
    snprintf(why, why_size, "aligned_alloc(%zu bytes): out of host memory", len);
    return INGOT_STATUS_ALLOC_FAILED;
  }
#endif
  t->data = t->map_base = p;
  t->map_len = len;
  return INGOT_STATUS_SUCCESS;
}

static void unmap(struct ingot_host_table *t) {
  if (t->map_base == NULL) return;
#if HOST_TABLE_MMAP
  munmap(t->map_base, t->map_len);
#else
  free(t->map_base);
#endif
  t->map_base = t->data = NULL;
}

/* Appends the locked-memory limit to a registration failure's reason. */
static void add_memlock_hint(char *why, size_t why_size) {
#if HOST_TABLE_MMAP
  struct rlimit rl;
  size_t n = strlen(why);
  if (n + 1 >= why_size || getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return;
  if (rl.rlim_cur == RLIM_INFINITY)
    snprintf(why + n, why_size - n, "; RLIMIT_MEMLOCK unlimited");
  else
    snprintf(why + n, why_size - n, "; RLIMIT_MEMLOCK %llu KiB (ulimit -l)",
             (unsigned long long)rl.rlim_cur / 1024);
#else
  (void)why, (void)why_size;
#endif
}

/* One strategy: map (or allocate) and make it readable by the GPU. */
static ingot_status try_strategy(struct ingot_context *ctx, struct ingot_host_table *t,
                                 uint32_t strategy, int64_t bytes, char *why, size_t why_size) {
  const ingot_backend_ops *ops = ctx->ops;
  int64_t page = strategy == INGOT_HOST_TABLE_HUGETLB_1G   ? GIB
                 : strategy == INGOT_HOST_TABLE_HUGETLB_2M ? 2 * MIB
                 : strategy == INGOT_HOST_TABLE_THP        ? 2 * MIB
                                                           : base_page_bytes();
  memset(t, 0, sizeof *t);
  t->bytes = bytes;
  t->strategy = strategy;
  t->page_bytes = page;
  t->device = ctx->device;
  t->ops = ops;
  if (ingot_core_size_round_up(bytes, page, &t->mapped_bytes) ||
      (uint64_t)t->mapped_bytes > SIZE_MAX) {
    snprintf(why, why_size, "%" PRId64 " bytes rounded up to %" PRId64 "-byte pages overflow",
             bytes, page);
    return INGOT_STATUS_INVALID_ARGUMENT;
  }
  ingot_status st;
  if (strategy == INGOT_HOST_TABLE_PINNED && ops->host_alloc) {
    void *p = NULL;
    st = ops->host_alloc(ctx, (size_t)t->mapped_bytes, &p, why, why_size);
    if (st != INGOT_STATUS_SUCCESS) {
      add_memlock_hint(why, why_size);
      return st;
    }
    t->data = p;
    t->cuda_alloc = 1;
    return INGOT_STATUS_SUCCESS;
  }
  if (strategy == INGOT_HOST_TABLE_HUGETLB_1G || strategy == INGOT_HOST_TABLE_HUGETLB_2M)
    st = map_hugetlb(t, page, why, why_size);
  else if (strategy == INGOT_HOST_TABLE_THP)
    st = map_thp(t, why, why_size);
  else
    st = map_plain(t, why, why_size);
  if (st != INGOT_STATUS_SUCCESS) return st;
  if (ops->host_register) {
    st = ops->host_register(ctx, t->data, (size_t)t->mapped_bytes, why, why_size);
    if (st != INGOT_STATUS_SUCCESS) {
      add_memlock_hint(why, why_size);
      unmap(t);
      return st;
    }
    t->registered = 1;
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_host_table_create(ingot_context_t ctx, int64_t bytes, uint32_t strategies,
                                     ingot_host_table_t *out) {
  static const char op[] = "ingot_host_table_create";
  if (out != NULL) *out = NULL;
  ingot_status st = ingot_core_begin(ctx, op, NULL);
  if (st) return st;
  if (out == NULL) return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "out: NULL");
  if (bytes < 1)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "bytes: %" PRId64 ", must be >= 1", bytes);
  if ((uint64_t)bytes > SIZE_MAX || bytes > INT64_MAX - GIB)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "bytes: %" PRId64 " too large (rounded up to 1 GiB it overflows)",
                           bytes);
  if (strategies & ~(uint32_t)ALL_STRATEGIES)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "strategies: 0x%x has bits that are no INGOT_HOST_TABLE_* strategy "
                           "(0x%x)",
                           (unsigned)strategies, (unsigned)(strategies & ~(uint32_t)ALL_STRATEGIES));
  uint32_t allowed = strategies == INGOT_HOST_TABLE_AUTO ? ALL_STRATEGIES : strategies;
  int count = 0;
  for (uint32_t s = allowed; s; s &= s - 1) count++;

  struct ingot_host_table *t = (struct ingot_host_table *)calloc(1, sizeof *t);
  if (t == NULL) return ingot_core_fail(ctx, INGOT_STATUS_ALLOC_FAILED, op, "out of host memory");
  char reasons[INGOT_ERROR_TEXT_BYTES] = "";
  size_t used = 0;
  for (uint32_t bit = 1; bit <= INGOT_HOST_TABLE_PINNED; bit <<= 1) {
    if (!(allowed & bit)) continue;
    char why[WHY_BYTES] = "";
    st = try_strategy(ctx, t, bit, bytes, why, sizeof why);
    if (st == INGOT_STATUS_SUCCESS) {
      *out = t;
      return INGOT_STATUS_SUCCESS;
    }
    if (count == 1) {
      free(t);
      return ingot_core_fail(ctx, st, op, "strategy %s: %s", ingot_host_table_strategy_name(bit),
                             why);
    }
    if (used < sizeof reasons) {
      int n = snprintf(reasons + used, sizeof reasons - used, "%s%s: %s", used ? "; " : "",
                       ingot_host_table_strategy_name(bit), why);
      if (n > 0) used += (size_t)n;
    }
  }
  free(t);
  return ingot_core_fail(ctx, st, op, "no allowed strategy worked: %s", reasons);
}

void ingot_host_table_destroy(ingot_host_table_t t) {
  if (t == NULL) return;
  if (t->cuda_alloc) {
    if (t->ops->host_free) t->ops->host_free(t->device, t->data);
  } else {
    if (t->registered && t->ops->host_unregister) t->ops->host_unregister(t->device, t->data);
    unmap(t);
  }
  free(t);
}

void *ingot_host_table_data(ingot_host_table_t t) { return t ? t->data : NULL; }
int64_t ingot_host_table_bytes(ingot_host_table_t t) { return t ? t->bytes : 0; }
int64_t ingot_host_table_mapped_bytes(ingot_host_table_t t) { return t ? t->mapped_bytes : 0; }
uint32_t ingot_host_table_strategy(ingot_host_table_t t) { return t ? t->strategy : 0u; }
int64_t ingot_host_table_page_bytes(ingot_host_table_t t) { return t ? t->page_bytes : 0; }

/* ---- what the kernel actually gave: /proc/self/smaps --------------------------- */

ingot_status ingot_host_table_huge_page_bytes(ingot_host_table_t t, int64_t *bytes) {
  static const char op[] = "ingot_host_table_huge_page_bytes";
  ingot_core_clear_error(NULL);
  if (t == NULL) return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "table: NULL");
  if (bytes == NULL) return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "bytes: NULL");
#if HOST_TABLE_MMAP
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL)
    return ingot_core_fail(NULL, INGOT_STATUS_NOT_SUPPORTED, op, "/proc/self/smaps: %s",
                           strerror(errno));
  uintptr_t lo = (uintptr_t)t->data, hi = lo + (uintptr_t)t->mapped_bytes;
  double total = 0;    /* bytes, summed over the mappings that overlap the table */
  double share = 0;    /* the current mapping's overlap / its size */
  char line[512];
  while (fgets(line, sizeof line, f)) {
    unsigned long long a, b, kb;
    char key[64];
    if (sscanf(line, "%llx-%llx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      uintptr_t s = (uintptr_t)a, e = (uintptr_t)b;
      uintptr_t o0 = s > lo ? s : lo, o1 = e < hi ? e : hi;
      share = (o1 > o0 && e > s) ? (double)(o1 - o0) / (double)(e - s) : 0;
      continue;
    }
    if (share > 0 && sscanf(line, "%63[^:]: %llu kB", key, &kb) == 2 &&
        (strcmp(key, "AnonHugePages") == 0 || strcmp(key, "Private_Hugetlb") == 0 ||
         strcmp(key, "Shared_Hugetlb") == 0))
      total += share * (double)kb * 1024.0;
  }
  fclose(f);
  *bytes = (int64_t)(total + 0.5);
  return INGOT_STATUS_SUCCESS;
#else
  return ingot_core_fail(NULL, INGOT_STATUS_NOT_SUPPORTED, op, "needs Linux (/proc/self/smaps)");
#endif
}
