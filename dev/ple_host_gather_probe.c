/*
 * ple_host_gather_probe: how to bring random PLE rows from a host table to
 * the GPU (docs/ple.md, "Host tables"). A measurement probe, not part of
 * libingot; built with the CUDA backend (dev/CMakeLists.txt), not installed.
 *
 * Random 160-byte rows read by a kernel straight from a pinned host table
 * reach ~80% of the host-to-device copy rate from a 0.34 GB table but ~15%
 * from a 2.7 GB one, with cudaHostAlloc and with THP pages alike
 * (decisions/0003): the GPU's translation of host pages is the suspect.
 * This probe times, on one table at a time, the ways around it:
 *
 *   a  GPU gather kernel reading the host table, ids in random order
 *   b  the same with the ids sorted ascending on the host beforehand (the
 *      kernel scatters each row back to its position): does address
 *      locality help the translations?
 *   c  CPU staging: N host threads (the caller and N-1 threads of a
 *      persistent pool that spin while the probe stages) gather the rows
 *      into a pinned staging buffer, then one cudaMemcpyAsync
 *   d  the same in K chunks: chunk i is copied while the threads gather
 *      chunk i+1; the time runs from the start to the last copy's end
 *   f  CPU staging, then the gather kernel reads the (contiguous) staging
 *      buffer instead of a copy engine moving it
 *   e  cudaMemcpyBatchAsync, one row-sized copy a row (CUDA 12.8+ headers)
 *
 * on tables allocated by cudaHostAlloc ("pinned"), by mmap +
 * madvise(MADV_HUGEPAGE) + cudaHostRegister ("thp"), and by mmap(MAP_HUGETLB)
 * + cudaHostRegister ("hugetlb-2m", "hugetlb-1g": only where that many huge
 * pages are reserved). Every row count draws fresh uniform int64 row ids over
 * the whole table for each run (a repeated id set would find the rows in L2
 * and the translations cached); each time is the median of --reps runs after
 * --warmup runs. Kernel times (a, b) are GPU times of back-to-back launches
 * (a flag kernel holds the stream while the host enqueues them); staging
 * times (c, d, f) are host wall clock from the start of the gather to the
 * end of the copy, as a caller would wait; e is the call's host time plus
 * the copies' GPU time. Each variant's output of its last run is compared
 * byte for byte with a gather done on the host: MISMATCH.
 *
 * Usage: ple_host_gather_probe [--table-gb 2.684[,..]] [--real] [--rows 1024,4096,65536]
 *          [--row-bytes 160] [--threads 1,4,8,16] [--chunks 4,8]
 *          [--alloc pinned,thp,hugetlb-2m,hugetlb-1g] [--real-alloc LIST]
 *          [--variants abcdfe] [--reps 21] [--warmup 3] [--prefetch 16] [--seed 1]
 *          [--device 0] [--json FILE]
 * --real adds the real configuration's table (320001536 rows, 51.2 GB = 47.7 GiB)
 * where MemAvailable has it with 4 GiB to spare, allocated the --real-alloc
 * ways (default: --alloc's). One table exists at a time; --json is rewritten
 * after each. Exit status: 0, 1 on a MISMATCH or a CUDA failure, 2 on a
 * usage error.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_HUGETLB, MADV_HUGEPAGE */

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "ple_host_gather_host.h"
#include "ple_host_gather_kernels.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

#define MAX_LIST 16
#define MAX_REPS 200
#define REAL_ROWS INT64_C(320001536) /* the real configuration's table */
#define H2D_PROBE_BYTES ((size_t)512 << 20)
#define SPARE_BYTES (INT64_C(4) << 30) /* host memory left to the system */
#define WAIT_TIMEOUT_NS 2000000000ull

__attribute__((format(printf, 3, 4))) static void set_text(char *buf, size_t size,
                                                           const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
}

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "ple_host_gather_probe: %s: %s (%s)\n", what, cudaGetErrorString(e),
          cudaGetErrorName(e));
  return 0;
}
/* Jumps to the function's `fail` label on a CUDA error (message printed). */
#define CK(call)                          \
  do {                                    \
    if (!cuda_ok((call), #call)) goto fail; \
  } while (0)

/* ---- options ------------------------------------------------------------------------ */

enum { ALLOC_PINNED, ALLOC_THP, ALLOC_HUGE2M, ALLOC_HUGE1G, ALLOC_COUNT };
static const char *const alloc_names[ALLOC_COUNT] = {"pinned", "thp", "hugetlb-2m", "hugetlb-1g"};

typedef struct probe_options {
  double table_gb[MAX_LIST];
  int ntables;
  int real;
  int64_t rows[MAX_LIST];
  int nrows;
  int row_bytes;
  int threads[MAX_LIST];
  int nthreads;
  int chunks[MAX_LIST];
  int nchunks;
  int alloc[ALLOC_COUNT];
  int nalloc;
  int real_alloc[ALLOC_COUNT]; /* the real table's; nreal_alloc 0: as alloc */
  int nreal_alloc;
  char variants[16];
  int reps, warmup, prefetch, device;
  uint64_t seed;
  const char *json;
} probe_options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: ple_host_gather_probe [--table-gb G[,G..]] [--real] [--rows N[,N..]]\n"
          "         [--row-bytes B] [--threads N[,N..]] [--chunks K[,K..]]\n"
          "         [--alloc pinned,thp,hugetlb-2m,hugetlb-1g] [--real-alloc LIST]\n"
          "         [--variants abcdfe]\n"
          "         [--reps R] [--warmup W] [--prefetch D] [--seed S] [--device D] [--json FILE]\n"
          "defaults: --table-gb 2.684 --rows 1024,4096,65536 --row-bytes 160 --threads 1,4,8,16\n"
          "          --chunks 4,8 --alloc pinned,thp,hugetlb-2m,hugetlb-1g --variants abcdfe\n"
          "          --reps 21 --warmup 3 --prefetch 16\n"
          "--real adds the real table (320001536 rows x row bytes: 51.2 GB at 160 B) where\n"
          "MemAvailable has it with 4 GiB to spare, allocated as --real-alloc says (default:\n"
          "as --alloc). Tables are made one at a time, in the order given; --json is\n"
          "rewritten after each. hugetlb tables need that many pages\n"
          "reserved (/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages), else they are skipped.\n");
}

/* Comma-separated positive integers (int64) into out; count or -1. */
static int parse_i64_list(const char *s, int64_t *out, int max) {
  int n = 0;
  while (*s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || v < 1 || n == max || (*end && *end != ',')) return -1;
    out[n++] = v;
    s = *end ? end + 1 : end;
  }
  return n;
}

static int parse_int_list(const char *s, int *out, int max) {
  int64_t v[MAX_LIST];
  int n = parse_i64_list(s, v, max < MAX_LIST ? max : MAX_LIST);
  for (int i = 0; i < n; i++) {
    if (v[i] > 1 << 20) return -1;
    out[i] = (int)v[i];
  }
  return n;
}

/* Comma-separated allocation names into out[ALLOC_COUNT]; count or -1. */
static int parse_alloc_list(const char *s, int *out) {
  char buf[128];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int k = 0;
    while (k < ALLOC_COUNT && strcmp(t, alloc_names[k]) != 0) k++;
    if (k == ALLOC_COUNT || n == ALLOC_COUNT) return -1;
    out[n++] = k;
  }
  return n;
}

static int parse_args(int argc, char **argv, probe_options *o) {
  memset(o, 0, sizeof *o);
  o->table_gb[0] = 2.684; /* 2^24 rows of 160 B: the bench's host table */
  o->ntables = 1;
  o->rows[0] = 1024, o->rows[1] = 4096, o->rows[2] = 65536;
  o->nrows = 3;
  o->row_bytes = 160;
  o->threads[0] = 1, o->threads[1] = 4, o->threads[2] = 8, o->threads[3] = 16;
  o->nthreads = 4;
  o->chunks[0] = 4, o->chunks[1] = 8;
  o->nchunks = 2;
  for (int i = 0; i < ALLOC_COUNT; i++) o->alloc[i] = i;
  o->nalloc = ALLOC_COUNT;
  snprintf(o->variants, sizeof o->variants, "abcdfe");
  o->reps = 21;
  o->warmup = 3;
  o->prefetch = 16;
  o->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (strcmp(a, "--real") == 0) {
      o->real = 1;
      continue;
    }
    if (v == NULL) {
      fprintf(stderr, "ple_host_gather_probe: %s needs a value\n", a);
      return -1;
    }
    i++;
    if (strcmp(a, "--table-gb") == 0) {
      o->ntables = 0;
      const char *s = v;
      while (*s && !bad) {
        char *end;
        double g = strtod(s, &end);
        if (end == s || !(g > 0) || g > 1e4 || o->ntables == MAX_LIST || (*end && *end != ','))
          bad = 1;
        else
          o->table_gb[o->ntables++] = g;
        s = *end ? end + 1 : end;
      }
      bad |= o->ntables == 0;
    } else if (strcmp(a, "--rows") == 0) {
      bad = (o->nrows = parse_i64_list(v, o->rows, MAX_LIST)) < 1;
      for (int k = 0; k < o->nrows && !bad; k++) bad = o->rows[k] > (INT64_C(1) << 30);
    } else if (strcmp(a, "--row-bytes") == 0) {
      o->row_bytes = atoi(v);
      bad = o->row_bytes < 16 || o->row_bytes % 16 != 0 || o->row_bytes > (1 << 20);
    } else if (strcmp(a, "--threads") == 0) {
      bad = (o->nthreads = parse_int_list(v, o->threads, MAX_LIST)) < 1;
      for (int k = 0; k < o->nthreads && !bad; k++) bad = o->threads[k] > 256;
    } else if (strcmp(a, "--chunks") == 0) {
      bad = (o->nchunks = parse_int_list(v, o->chunks, MAX_LIST)) < 1;
    } else if (strcmp(a, "--alloc") == 0) {
      bad = (o->nalloc = parse_alloc_list(v, o->alloc)) < 1;
    } else if (strcmp(a, "--real-alloc") == 0) {
      bad = (o->nreal_alloc = parse_alloc_list(v, o->real_alloc)) < 1;
    } else if (strcmp(a, "--variants") == 0) {
      bad = strlen(v) < 1 || strlen(v) >= sizeof o->variants || strspn(v, "abcdef") != strlen(v);
      if (!bad) snprintf(o->variants, sizeof o->variants, "%s", v);
    } else if (strcmp(a, "--reps") == 0) {
      o->reps = atoi(v);
      bad = o->reps < 1 || o->reps > MAX_REPS;
    } else if (strcmp(a, "--warmup") == 0) {
      o->warmup = atoi(v);
      bad = o->warmup < 0 || o->warmup > 100;
    } else if (strcmp(a, "--prefetch") == 0) {
      o->prefetch = atoi(v);
      bad = o->prefetch < 0 || o->prefetch > 1024;
    } else if (strcmp(a, "--seed") == 0) {
      o->seed = strtoull(v, NULL, 10);
    } else if (strcmp(a, "--device") == 0) {
      o->device = atoi(v);
    } else if (strcmp(a, "--json") == 0) {
      o->json = v;
    } else {
      fprintf(stderr, "ple_host_gather_probe: unknown option %s\n", a);
      return -1;
    }
    if (bad) {
      fprintf(stderr, "ple_host_gather_probe: bad value for %s: %s\n", a, v);
      return -1;
    }
  }
  return 0;
}

/* ---- results ------------------------------------------------------------------------ */

typedef struct table_info {
  double gb;
  int64_t rows;
  int alloc;
  int skipped, failed; /* not measured; failed: an error, not a missing resource */
  double t_alloc, t_fill, t_register, t_free, huge_gb, copy_gbps;
  char why[320];
} table_info;

typedef struct probe_result {
  int table; /* index into probe.tables */
  char variant;
  int threads, chunks;
  int64_t rows;
  int reps;
  double us, gather_us, copy_us;
  int ok;      /* output matched */
  int skipped; /* not measured: note says why */
  char note[160];
} probe_result;

typedef struct probe {
  probe_options o;
  int sms;
  char device_name[256];
  cudaStream_t stream;
  cudaEvent_t ev[MAX_REPS + 1];
  cudaEvent_t e0, e1;
  volatile int *flag; /* host, mapped */
  int *d_timed_out;
  hg_pool pl;
  int pool_threads; /* the caller + workers */
  double h2d_gbps;
  int64_t max_rows;
  int nsets; /* warmup + reps */
  uint8_t *d_out, *d_h2d, *staging, *h_check, *h_expect;
  const uint8_t *staging_dev;
  int64_t *h_ids, *h_sorted, *d_ids;
  int32_t *h_pos, *d_pos;
  void **b_dst, **b_src;
  size_t *b_size;
  table_info tables[2 * MAX_LIST * ALLOC_COUNT];
  int ntables;
  probe_result *res;
  int nres, cap;
  int mismatches, failures;
  double t_start;
} probe;

static probe_result *add_result(probe *P, int table, char variant, int threads, int chunks,
                          int64_t rows) {
  if (P->nres == P->cap) {
    int cap = P->cap ? 2 * P->cap : 256;
    probe_result *r = (probe_result *)realloc(P->res, (size_t)cap * sizeof *r);
    if (r == NULL) return NULL;
    P->res = r;
    P->cap = cap;
  }
  probe_result *r = &P->res[P->nres++];
  memset(r, 0, sizeof *r);
  r->table = table;
  r->variant = variant;
  r->threads = threads;
  r->chunks = chunks;
  r->rows = rows;
  r->ok = 1;
  return r;
}

/* ---- host tables -------------------------------------------------------------------- */

typedef struct host_table {
  int alloc;
  uint8_t *host;      /* first byte */
  const uint8_t *dev; /* the GPU's address of it */
  size_t bytes;
  uint8_t *map;       /* mmap'd strategies: the mapping */
  size_t map_len;
  int registered;
  int64_t rows;
} host_table;

static void table_free(host_table *t) {
  if (t->alloc == ALLOC_PINNED) {
    if (t->host) cuda_ok(cudaFreeHost(t->host), "cudaFreeHost(table)");
  } else {
    if (t->registered) cuda_ok(cudaHostUnregister(t->map), "cudaHostUnregister(table)");
    if (t->map) munmap(t->map, t->map_len);
  }
  memset(t, 0, sizeof *t);
}

static void fill(probe *P, uint8_t *base, size_t bytes) {
  hg_job j;
  memset(&j, 0, sizeof j);
  j.kind = HG_JOB_FILL;
  j.parts = P->pool_threads;
  j.base = base;
  j.bytes = bytes;
  hg_pool_set_threads(&P->pl, j.parts);
  hg_pool_run(&P->pl, &j);
  hg_pool_set_threads(&P->pl, 1);
}

/* 0: made; 1: skipped (info->why); -1: failed (info->why). */
static int table_make(probe *P, host_table *t, table_info *info) {
  const size_t bytes = (size_t)info->rows * (size_t)P->o.row_bytes;
  const int64_t avail = hg_mem_available();
  memset(t, 0, sizeof *t);
  t->alloc = info->alloc;
  t->bytes = bytes;
  t->rows = info->rows;
  if (t->alloc == ALLOC_PINNED || t->alloc == ALLOC_THP) {
    if (avail >= 0 && (int64_t)bytes + SPARE_BYTES > avail) {
      set_text(info->why, sizeof info->why,
               "%.1f GB with 4 GiB to spare does not fit: MemAvailable %.1f GB",
               (double)bytes * 1e-9, (double)avail * 1e-9);
      return 1;
    }
  }
  double t0 = hg_now_s();
  if (t->alloc == ALLOC_PINNED) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      set_text(info->why, sizeof info->why, "cudaHostAlloc(%zu bytes): %s", bytes,
               cudaGetErrorString(e));
      return -1;
    }
    t->host = (uint8_t *)p;
    info->t_alloc = hg_now_s() - t0;
  } else {
    const int thp = t->alloc == ALLOC_THP;
    const size_t page = t->alloc == ALLOC_HUGE1G ? ((size_t)1 << 30) : ((size_t)2 << 20);
    const size_t len = (bytes + page - 1) / page * page;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (thp) {
      char mode[128];
      if (hg_read_line("/sys/kernel/mm/transparent_hugepage/enabled", mode, sizeof mode) ||
          strstr(mode, "[never]")) {
        set_text(info->why, sizeof info->why,
                 "transparent huge pages off or absent (/sys/kernel/mm/transparent_hugepage/"
                 "enabled)");
        return 1;
      }
    } else {
      long long page_kb = (long long)(page >> 10), need = (long long)(len / page);
      long long free_pages = hg_hugetlb_free(page_kb);
      if (free_pages < need) {
        set_text(info->why, sizeof info->why,
                 "%lld free pages of %lld kB, %lld needed (echo %lld > /sys/kernel/mm/hugepages/"
                 "hugepages-%lldkB/nr_hugepages)",
                 free_pages < 0 ? 0 : free_pages, page_kb, need, need, page_kb);
        return 1;
      }
      flags |= MAP_HUGETLB | ((t->alloc == ALLOC_HUGE1G ? 30 : 21) << MAP_HUGE_SHIFT);
    }
    /* THP: over-map by one huge page so the table starts on a 2 MiB boundary */
    size_t extra = thp ? page : 0;
    uint8_t *m = (uint8_t *)mmap(NULL, len + extra, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (m == MAP_FAILED) {
      set_text(info->why, sizeof info->why, "mmap(%zu bytes, %s): %s", len + extra,
               alloc_names[t->alloc], strerror(errno));
      return thp ? -1 : 1;
    }
    if (thp) {
      uintptr_t a = ((uintptr_t)m + page - 1) / page * page;
      size_t head = (size_t)(a - (uintptr_t)m), tail = extra - head;
      if (head) munmap(m, head);
      if (tail) munmap((uint8_t *)a + len, tail);
      m = (uint8_t *)a;
      if (madvise(m, len, MADV_HUGEPAGE) != 0) {
        set_text(info->why, sizeof info->why, "madvise(MADV_HUGEPAGE): %s", strerror(errno));
        munmap(m, len);
        return 1;
      }
    }
    t->map = t->host = m;
    t->map_len = len;
    info->t_alloc = hg_now_s() - t0;
  }
  /* the fill also faults the mmap'd pages in, on every pool thread at once */
  t0 = hg_now_s();
  fill(P, t->host, bytes);
  info->t_fill = hg_now_s() - t0;
  if (t->map) {
    t0 = hg_now_s();
    cudaError_t e =
        cudaHostRegister(t->map, t->map_len, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      set_text(info->why, sizeof info->why, "cudaHostRegister(%zu bytes, %s): %s", t->map_len,
               alloc_names[t->alloc], cudaGetErrorString(e));
      table_free(t);
      return -1;
    }
    t->registered = 1;
    info->t_register = hg_now_s() - t0;
  }
  void *d = NULL;
  cudaError_t e = cudaHostGetDevicePointer(&d, t->host, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    set_text(info->why, sizeof info->why, "cudaHostGetDevicePointer: %s", cudaGetErrorString(e));
    table_free(t);
    return -1;
  }
  t->dev = (const uint8_t *)d;
  info->huge_gb = hg_huge_page_bytes(t->host, t->map ? t->map_len : bytes) * 1e-9;
  return 0;
}

/* ---- row ids -------------------------------------------------------------------------- */

typedef struct id_pos {
  int64_t id;
  int32_t pos;
} id_pos;

static int cmp_id_pos(const void *a, const void *b) {
  int64_t x = ((const id_pos *)a)->id, y = ((const id_pos *)b)->id;
  return (x > y) - (x < y);
}

/* Fresh sets of n uniform row ids in [0, rows) for one measurement: P->nsets
 * sets of n in h_ids; sorted ascending (with each id's position) in h_sorted /
 * h_pos when sorted is set. */
static int make_sets(probe *P, int64_t rows, int64_t n, uint64_t tag, int sorted) {
  uint64_t s = P->o.seed * 0x2545F4914F6CDD1Dull ^ tag;
  for (int64_t k = 0; k < (int64_t)P->nsets * n; k++)
    P->h_ids[k] = (int64_t)(hg_splitmix64(&s) % (uint64_t)rows);
  if (!sorted) return 0;
  id_pos *tmp = (id_pos *)malloc((size_t)n * sizeof *tmp);
  if (tmp == NULL) return -1;
  for (int set = 0; set < P->nsets; set++) {
    const int64_t *ids = P->h_ids + (int64_t)set * n;
    for (int64_t i = 0; i < n; i++) tmp[i].id = ids[i], tmp[i].pos = (int32_t)i;
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_id_pos);
    for (int64_t i = 0; i < n; i++) {
      P->h_sorted[(int64_t)set * n + i] = tmp[i].id;
      P->h_pos[(int64_t)set * n + i] = tmp[i].pos;
    }
  }
  free(tmp);
  return 0;
}

static uint64_t tag_of(int table, char variant, int threads, int chunks, int64_t rows) {
  uint64_t s = ((uint64_t)table << 48) ^ ((uint64_t)(unsigned char)variant << 40) ^
               ((uint64_t)threads << 28) ^ ((uint64_t)chunks << 20) ^ (uint64_t)rows;
  return hg_splitmix64(&s);
}

/* d_out (n rows) against the rows of the last set, gathered on the host. */
static int verify(probe *P, const host_table *t, int64_t n, probe_result *r) {
  const size_t rb = (size_t)P->o.row_bytes;
  const int64_t *ids = P->h_ids + (int64_t)(P->nsets - 1) * n;
  if (!cuda_ok(cudaMemcpy(P->h_check, P->d_out, (size_t)n * rb, cudaMemcpyDeviceToHost),
               "cudaMemcpy(check)"))
    return -1;
  for (int64_t i = 0; i < n; i++)
    memcpy(P->h_expect + (size_t)i * rb, t->host + (size_t)ids[i] * rb, rb);
  if (memcmp(P->h_check, P->h_expect, (size_t)n * rb) == 0) return 0;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(P->h_check + (size_t)i * rb, P->h_expect + (size_t)i * rb, rb) != 0) {
      if (first < 0) first = i;
      bad++;
    }
  r->ok = 0;
  P->mismatches++;
  set_text(r->note, sizeof r->note, "MISMATCH: %lld of %lld rows differ, first row %lld (id %lld)",
           (long long)bad, (long long)n, (long long)first, (long long)ids[first]);
  printf("  %s: %.3f GB %s table, variant %c, N=%d, K=%d, %lld rows\n", r->note,
         P->tables[r->table].gb, alloc_names[t->alloc], r->variant, r->threads, r->chunks,
         (long long)n);
  return 0;
}

/* ---- the variants ----------------------------------------------------------------------- */

/* a, b: the gather kernel reads the host table. */
static int measure_kernel(probe *P, const host_table *t, int64_t n, probe_result *r, int sorted) {
  const int rb = P->o.row_bytes, W = P->o.warmup, R = P->o.reps;
  const int max_blocks = P->sms * 16;
  double times[MAX_REPS];
  int timed_out = 0;
  if (make_sets(P, t->rows, n, tag_of(r->table, r->variant, 0, 0, n), sorted)) {
    set_text(r->note, sizeof r->note, "out of host memory");
    return -1;
  }
  size_t ids_bytes = (size_t)P->nsets * (size_t)n * sizeof(int64_t);
  CK(cudaMemcpy(P->d_ids, sorted ? P->h_sorted : P->h_ids, ids_bytes, cudaMemcpyHostToDevice));
  if (sorted)
    CK(cudaMemcpy(P->d_pos, P->h_pos, (size_t)P->nsets * (size_t)n * sizeof(int32_t),
                  cudaMemcpyHostToDevice));
  CK(cudaMemsetAsync(P->d_out, 0xA5, (size_t)n * (size_t)rb, P->stream));
  for (int w = 0; w < W; w++)
    CK(probe_launch_gather(t->dev, P->d_ids + (int64_t)w * n,
                           sorted ? P->d_pos + (int64_t)w * n : NULL, n, rb, P->d_out,
                           max_blocks, P->stream));
  CK(cudaStreamSynchronize(P->stream));
  /* hold the stream while every timed launch is enqueued: they then run back
   * to back, as in a graph */
  *P->flag = 0;
  atomic_thread_fence(memory_order_seq_cst);
  CK(cudaMemsetAsync(P->d_timed_out, 0, sizeof(int), P->stream));
  CK(probe_launch_wait(P->flag, WAIT_TIMEOUT_NS, P->d_timed_out, P->stream));
  CK(cudaEventRecord(P->ev[0], P->stream));
  for (int i = 0; i < R; i++) {
    int64_t set = W + i;
    CK(probe_launch_gather(t->dev, P->d_ids + set * n, sorted ? P->d_pos + set * n : NULL, n, rb,
                           P->d_out, max_blocks, P->stream));
    CK(cudaEventRecord(P->ev[i + 1], P->stream));
  }
  atomic_thread_fence(memory_order_seq_cst);
  *P->flag = 1;
  CK(cudaEventSynchronize(P->ev[R]));
  CK(cudaMemcpy(&timed_out, P->d_timed_out, sizeof timed_out, cudaMemcpyDeviceToHost));
  for (int i = 0; i < R; i++) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, P->ev[i], P->ev[i + 1]));
    times[i] = (double)ms * 1e3;
  }
  r->us = hg_median(times, R);
  r->reps = R;
  if (timed_out)
    set_text(r->note, sizeof r->note,
             "the flag wait timed out: launches may not have run back to back");
  return verify(P, t, n, r);
fail:
  *P->flag = 1;
  cudaStreamSynchronize(P->stream);
  set_text(r->note, sizeof r->note, "CUDA error (see stderr)");
  return -1;
}

/* c (chunks 1), d (chunks > 1), f (kernel_read): CPU gather into staging,
 * then a copy (or a kernel reading staging). */
static int measure_stage(probe *P, const host_table *t, int64_t n, probe_result *r, int nthreads,
                         int chunks, int kernel_read) {
  const size_t rb = (size_t)P->o.row_bytes;
  const int W = P->o.warmup, R = P->o.reps;
  double tot[MAX_REPS], gat[MAX_REPS], cop[MAX_REPS];
  if (make_sets(P, t->rows, n, tag_of(r->table, r->variant, nthreads, chunks, n), 0)) {
    set_text(r->note, sizeof r->note, "out of host memory");
    return -1;
  }
  if (chunks > n) chunks = (int)n;
  CK(cudaMemsetAsync(P->d_out, 0xA5, (size_t)n * rb, P->stream));
  CK(cudaStreamSynchronize(P->stream));
  hg_job j;
  memset(&j, 0, sizeof j);
  j.kind = HG_JOB_GATHER;
  j.parts = nthreads;
  j.table = t->host;
  j.row_bytes = rb;
  j.prefetch = P->o.prefetch;
  hg_pool_set_threads(&P->pl, nthreads);
  for (int set = 0; set < P->nsets; set++) {
    const int64_t *ids = P->h_ids + (int64_t)set * n;
    double g = 0, t0 = hg_now_s();
    for (int c = 0; c < chunks; c++) {
      int64_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
      j.ids = ids + lo;
      j.n = hi - lo;
      j.dst = P->staging + (size_t)lo * rb;
      double g0 = hg_now_s();
      hg_pool_run(&P->pl, &j);
      g += hg_now_s() - g0;
      if (c == 0) CK(cudaEventRecord(P->e0, P->stream));
      if (kernel_read)
        CK(probe_launch_gather(P->staging_dev + (size_t)lo * rb, NULL, NULL, hi - lo, (int)rb,
                               P->d_out + (size_t)lo * rb, P->sms * 16, P->stream));
      else
        CK(cudaMemcpyAsync(P->d_out + (size_t)lo * rb, P->staging + (size_t)lo * rb,
                           (size_t)(hi - lo) * rb, cudaMemcpyHostToDevice, P->stream));
    }
    CK(cudaEventRecord(P->e1, P->stream));
    CK(cudaEventSynchronize(P->e1));
    double t1 = hg_now_s();
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, P->e0, P->e1));
    if (set >= W) {
      tot[set - W] = (t1 - t0) * 1e6;
      gat[set - W] = g * 1e6;
      cop[set - W] = (double)ms * 1e3;
    }
  }
  hg_pool_set_threads(&P->pl, 1);
  r->us = hg_median(tot, R);
  r->gather_us = hg_median(gat, R);
  r->copy_us = hg_median(cop, R);
  r->reps = R;
  return verify(P, t, n, r);
fail:
  hg_pool_set_threads(&P->pl, 1);
  cudaStreamSynchronize(P->stream);
  set_text(r->note, sizeof r->note, "CUDA error (see stderr)");
  return -1;
}

/* e: cudaMemcpyBatchAsync, one copy a row; the time is the call's host
 * time + the copies' GPU time (the call may only hand the copies over when
 * it returns). */
static int measure_batch(probe *P, const host_table *t, int64_t n, probe_result *r) {
#if CUDART_VERSION >= 12080
  const size_t rb = (size_t)P->o.row_bytes;
  const int W = P->o.warmup, R = P->o.reps;
  double tot[MAX_REPS], api[MAX_REPS], gpu[MAX_REPS];
  int timed_out = 0;
  if (make_sets(P, t->rows, n, tag_of(r->table, r->variant, 0, 0, n), 0)) {
    set_text(r->note, sizeof r->note, "out of host memory");
    return -1;
  }
  CK(cudaMemsetAsync(P->d_out, 0xA5, (size_t)n * rb, P->stream));
  CK(cudaMemsetAsync(P->d_timed_out, 0, sizeof(int), P->stream));
  CK(cudaStreamSynchronize(P->stream));
  struct cudaMemcpyAttributes attr;
  memset(&attr, 0, sizeof attr);
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attr_idx = 0;
  for (int64_t i = 0; i < n; i++) {
    P->b_dst[i] = P->d_out + (size_t)i * rb;
    P->b_size[i] = rb;
  }
  for (int set = 0; set < P->nsets; set++) {
    const int64_t *ids = P->h_ids + (int64_t)set * n;
    for (int64_t i = 0; i < n; i++) P->b_src[i] = t->host + (size_t)ids[i] * rb;
    /* hold the stream during the call, so that the events time the copies
     * alone and the call's host time is measured apart */
    *P->flag = 0;
    atomic_thread_fence(memory_order_seq_cst);
    CK(probe_launch_wait(P->flag, WAIT_TIMEOUT_NS, P->d_timed_out, P->stream));
    CK(cudaEventRecord(P->e0, P->stream));
    double t0 = hg_now_s();
    /* the arrays go as void *: their declared types differ between the 12.8
     * and the 12.9+ headers, and 13.0 dropped the failIdx argument */
#if CUDART_VERSION >= 13000
    cudaError_t e = cudaMemcpyBatchAsync((void *)P->b_dst, (void *)P->b_src, P->b_size, (size_t)n,
                                         &attr, &attr_idx, 1, P->stream);
#else
    size_t fail_idx = 0;
    cudaError_t e = cudaMemcpyBatchAsync((void *)P->b_dst, (void *)P->b_src, P->b_size, (size_t)n,
                                         &attr, &attr_idx, 1, &fail_idx, P->stream);
#endif
    double t1 = hg_now_s();
    if (e != cudaSuccess) {
      cudaGetLastError();
      *P->flag = 1;
      cudaStreamSynchronize(P->stream);
      r->skipped = 1;
      set_text(r->note, sizeof r->note, "cudaMemcpyBatchAsync: %s (%s)", cudaGetErrorString(e),
               cudaGetErrorName(e));
      return 0;
    }
    CK(cudaEventRecord(P->e1, P->stream));
    atomic_thread_fence(memory_order_seq_cst);
    *P->flag = 1;
    CK(cudaEventSynchronize(P->e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, P->e0, P->e1));
    if (set >= W) {
      api[set - W] = (t1 - t0) * 1e6;
      gpu[set - W] = (double)ms * 1e3;
      tot[set - W] = api[set - W] + gpu[set - W];
    }
  }
  r->us = hg_median(tot, R);
  r->gather_us = hg_median(api, R);
  r->copy_us = hg_median(gpu, R);
  r->reps = R;
  CK(cudaMemcpy(&timed_out, P->d_timed_out, sizeof timed_out, cudaMemcpyDeviceToHost));
  if (timed_out)
    set_text(r->note, sizeof r->note, "the flag wait timed out during the call: GPU us too high");
  return verify(P, t, n, r);
fail:
  *P->flag = 1;
  cudaStreamSynchronize(P->stream);
  set_text(r->note, sizeof r->note, "CUDA error (see stderr)");
  return -1;
#else
  (void)P, (void)t, (void)n;
  r->skipped = 1;
  set_text(r->note, sizeof r->note,
           "skipped: cudaMemcpyBatchAsync needs CUDA 12.8+ headers (built with %d)",
           CUDART_VERSION);
  return 0;
#endif
}

/* Median pinned host-to-device copy rate of `bytes` from src, in GB/s. */
static int h2d_rate(probe *P, const void *src, size_t bytes, double *gbps) {
  double t[10];
  CK(cudaMemcpyAsync(P->d_h2d, src, bytes, cudaMemcpyHostToDevice, P->stream));
  for (int i = 0; i < 10; i++) {
    float ms = 0;
    CK(cudaEventRecord(P->e0, P->stream));
    CK(cudaMemcpyAsync(P->d_h2d, src, bytes, cudaMemcpyHostToDevice, P->stream));
    CK(cudaEventRecord(P->e1, P->stream));
    CK(cudaEventSynchronize(P->e1));
    CK(cudaEventElapsedTime(&ms, P->e0, P->e1));
    t[i] = (double)ms * 1e-3;
  }
  *gbps = (double)bytes / hg_median(t, 10) * 1e-9;
  return 0;
fail:
  return -1;
}

/* ---- output ------------------------------------------------------------------------------- */

static const char *variant_text(char v) {
  switch (v) {
    case 'a': return "a GPU gather, random ids";
    case 'b': return "b GPU gather, sorted ids";
    case 'c': return "c CPU gather + copy";
    case 'd': return "d CPU gather + copy, piped";
    case 'f': return "f CPU gather + kernel read";
    default: return "e cudaMemcpyBatchAsync";
  }
}

/* Whether t us for n rows meets the target (decode B = 64 / 256, prefill 4096 x 16). */
static int meets_target(const probe *P, int64_t n, double us) {
  if (n == 1024) return us <= 8.0;
  if (n == 4096) return us <= 20.0;
  if (n == 65536) return (double)n * P->o.row_bytes / (us * 1e-6) >= 0.70 * P->h2d_gbps * 1e9;
  return 0;
}

static double pct_of_h2d(const probe *P, int64_t n, double us) {
  return us > 0 ? 100.0 * (double)n * P->o.row_bytes / (us * 1e-6) / (P->h2d_gbps * 1e9) : 0;
}

static void print_table_block(const probe *P, int ti) {
  const table_info *info = &P->tables[ti];
  printf("\n== table %.3f GB (%lld rows), %s: ", info->gb, (long long)info->rows,
         alloc_names[info->alloc]);
  if (info->skipped) {
    printf("%s: %s\n", info->failed ? "FAILED" : "SKIPPED", info->why);
    return;
  }
  printf("alloc %.2f s, fill %.2f s", info->t_alloc, info->t_fill);
  if (info->alloc != ALLOC_PINNED) printf(", cudaHostRegister %.2f s", info->t_register);
  printf(", free %.2f s; %.3f GB in huge pages; H2D copy from it %.1f GB/s\n", info->t_free,
         info->huge_gb, info->copy_gbps);
  printf("%-27s %4s %3s", "variant", "N", "K");
  for (int k = 0; k < P->o.nrows; k++)
    printf(" | %7lld rows: us   %%H2D (gather+copy) ", (long long)P->o.rows[k]);
  printf("\n");
  for (int i = 0; i < P->nres;) {
    const probe_result *r = &P->res[i];
    if (r->table != ti) {
      i++;
      continue;
    }
    int stage = r->variant != 'a' && r->variant != 'b';
    char nbuf[8] = "-", kbuf[8] = "-";
    if (r->variant == 'c' || r->variant == 'd' || r->variant == 'f')
      snprintf(nbuf, sizeof nbuf, "%d", r->threads);
    if (r->variant == 'd') snprintf(kbuf, sizeof kbuf, "%d", r->chunks);
    printf("%-27s %4s %3s", variant_text(r->variant), nbuf, kbuf);
    int j = i;
    const char *note = NULL;
    for (; j < P->nres && P->res[j].table == ti && P->res[j].variant == r->variant &&
           P->res[j].threads == r->threads && P->res[j].chunks == r->chunks;
         j++) {
      const probe_result *q = &P->res[j];
      if (q->skipped || q->reps == 0) {
        printf(" | %-37s", q->skipped ? "skipped" : "failed");
      } else {
        printf(" | %8.1f%c %5.1f%%", q->us, meets_target(P, q->rows, q->us) ? '*' : ' ',
               pct_of_h2d(P, q->rows, q->us));
        if (stage)
          printf(" (%7.1f+%7.1f)%s", q->gather_us, q->copy_us, q->ok ? " " : "!");
        else
          printf("                  %s", q->ok ? " " : "!");
      }
      if (q->note[0]) note = q->note;
    }
    printf("\n");
    if (note) printf("    %s\n", note);
    i = j;
  }
}

/* The fastest measured variant of every table and row count, one line a table. */
static void print_summary(const probe *P) {
  printf("\nsummary: the fastest variant of each table and row count (* meets the target)\n");
  for (int ti = 0; ti < P->ntables; ti++) {
    const table_info *info = &P->tables[ti];
    if (info->skipped) continue;
    printf("  %7.3f GB %-10s", info->gb, alloc_names[info->alloc]);
    for (int k = 0; k < P->o.nrows; k++) {
      const probe_result *best = NULL;
      for (int i = 0; i < P->nres; i++) {
        const probe_result *r = &P->res[i];
        if (r->table == ti && r->rows == P->o.rows[k] && r->reps > 0 && r->ok &&
            (best == NULL || r->us < best->us))
          best = r;
      }
      if (best == NULL) {
        printf(" | %lld: -", (long long)P->o.rows[k]);
        continue;
      }
      char cfg[24] = "";
      if (best->variant == 'c' || best->variant == 'f')
        snprintf(cfg, sizeof cfg, " N=%d", best->threads);
      else if (best->variant == 'd')
        snprintf(cfg, sizeof cfg, " N=%d K=%d", best->threads, best->chunks);
      printf(" | %lld: %c%s %.1f us %.0f%%%s", (long long)best->rows, best->variant, cfg, best->us,
             pct_of_h2d(P, best->rows, best->us), meets_target(P, best->rows, best->us) ? "*" : "");
    }
    printf("\n");
  }
}

/* s as a JSON string. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static int write_json(const probe *P, const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "ple_host_gather_probe: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"device\": ");
  json_str(f, P->device_name);
  fprintf(f, ",\n  \"sms\": %d,\n  \"h2d_gbps\": %.3f,\n", P->sms, P->h2d_gbps);
  fprintf(f, "  \"row_bytes\": %d,\n  \"reps\": %d,\n  \"warmup\": %d,\n  \"prefetch\": %d,\n",
          P->o.row_bytes, P->o.reps, P->o.warmup, P->o.prefetch);
  fprintf(f, "  \"tables\": [\n");
  for (int i = 0; i < P->ntables; i++) {
    const table_info *t = &P->tables[i];
    fprintf(f,
            "    {\"index\": %d, \"gb\": %.4f, \"rows\": %lld, \"alloc\": \"%s\", \"skipped\": %s, "
            "\"failed\": %s, \"alloc_s\": %.3f, \"fill_s\": %.3f, \"register_s\": %.3f, \"free_s\": %.3f, "
            "\"huge_page_gb\": %.4f, \"h2d_from_table_gbps\": %.3f, \"why\": ",
            i, t->gb, (long long)t->rows, alloc_names[t->alloc], t->skipped ? "true" : "false",
            t->failed ? "true" : "false", t->t_alloc, t->t_fill, t->t_register, t->t_free, t->huge_gb, t->copy_gbps);
    json_str(f, t->why);
    fprintf(f, "}%s\n", i + 1 < P->ntables ? "," : "");
  }
  fprintf(f, "  ],\n  \"results\": [\n");
  for (int i = 0; i < P->nres; i++) {
    const probe_result *r = &P->res[i];
    fprintf(f,
            "    {\"table\": %d, \"variant\": \"%c\", \"threads\": %d, \"chunks\": %d, "
            "\"rows\": %lld, \"reps\": %d, \"us\": %.3f, \"pct_h2d\": %.2f, \"gather_us\": %.3f, "
            "\"copy_us\": %.3f, \"meets_target\": %s, \"ok\": %s, \"skipped\": %s, "
            "\"note\": ",
            r->table, r->variant, r->threads, r->chunks, (long long)r->rows, r->reps, r->us,
            pct_of_h2d(P, r->rows, r->us), r->gather_us, r->copy_us,
            r->reps && meets_target(P, r->rows, r->us) ? "true" : "false",
            r->ok ? "true" : "false", r->skipped ? "true" : "false");
    json_str(f, r->note);
    fprintf(f, "}%s\n", i + 1 < P->nres ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return fclose(f) == 0 ? 0 : -1;
}

/* ---- one table --------------------------------------------------------------------------- */

static int has_variant(const probe *P, char v) { return strchr(P->o.variants, v) != NULL; }

static void run_table(probe *P, int ti) {
  table_info *info = &P->tables[ti];
  host_table t;
  printf("\n[%6.1f s] table %.3f GB, %s ...\n", hg_now_s() - P->t_start, info->gb,
         alloc_names[info->alloc]);
  fflush(stdout);
  int made = table_make(P, &t, info);
  if (made != 0) {
    info->skipped = 1;
    info->failed = made < 0;
    if (made < 0) P->failures++;
    print_table_block(P, ti);
    return;
  }
  size_t probe_bytes = t.bytes < H2D_PROBE_BYTES ? t.bytes : H2D_PROBE_BYTES;
  if (h2d_rate(P, t.host, probe_bytes, &info->copy_gbps)) P->failures++;
  for (const char *v = "abcdfe"; *v; v++) {
    if (!has_variant(P, *v)) continue;
    int n_thr = (*v == 'c' || *v == 'd' || *v == 'f') ? P->o.nthreads : 1;
    int n_chk = *v == 'd' ? P->o.nchunks : 1;
    for (int a = 0; a < n_thr; a++)
      for (int c = 0; c < n_chk; c++)
        for (int k = 0; k < P->o.nrows; k++) {
          int64_t n = P->o.rows[k];
          int thr = (*v == 'c' || *v == 'd' || *v == 'f') ? P->o.threads[a] : 0;
          int chk = *v == 'd' ? P->o.chunks[c] : (*v == 'c' ? 1 : 0);
          probe_result *r = add_result(P, ti, *v, thr, chk, n);
          if (r == NULL) {
            P->failures++;
            continue;
          }
          int rc;
          if (*v == 'a' || *v == 'b')
            rc = measure_kernel(P, &t, n, r, *v == 'b');
          else if (*v == 'e')
            rc = measure_batch(P, &t, n, r);
          else
            rc = measure_stage(P, &t, n, r, thr, *v == 'd' ? chk : 1, *v == 'f');
          if (rc) P->failures++;
        }
  }
  double t0 = hg_now_s();
  table_free(&t);
  info->t_free = hg_now_s() - t0;
  print_table_block(P, ti);
  fflush(stdout);
}

/* ---- main ---------------------------------------------------------------------------------- */

static void probe_free(probe *P) {
  if (P->d_out) cudaFree(P->d_out);
  if (P->d_h2d) cudaFree(P->d_h2d);
  if (P->d_ids) cudaFree(P->d_ids);
  if (P->d_pos) cudaFree(P->d_pos);
  if (P->d_timed_out) cudaFree(P->d_timed_out);
  if (P->staging) cudaFreeHost(P->staging);
  if (P->flag) cudaFreeHost((void *)P->flag);
  for (int i = 0; i <= MAX_REPS; i++)
    if (P->ev[i]) cudaEventDestroy(P->ev[i]);
  if (P->e0) cudaEventDestroy(P->e0);
  if (P->e1) cudaEventDestroy(P->e1);
  if (P->stream) cudaStreamDestroy(P->stream);
  free(P->h_check);
  free(P->h_expect);
  free(P->h_ids);
  free(P->h_sorted);
  free(P->h_pos);
  free(P->b_dst);
  free(P->b_src);
  free(P->b_size);
  free(P->res);
  hg_pool_destroy(&P->pl);
}

int main(int argc, char **argv) {
  static probe P; /* large (event and table arrays): not on the stack */
  int rc = 1;
  if (parse_args(argc, argv, &P.o)) {
    usage(stderr);
    return 2;
  }
  P.t_start = hg_now_s();
  setvbuf(stdout, NULL, _IOLBF, 0);
  const probe_options *o = &P.o;
  const size_t rb = (size_t)o->row_bytes;
  P.nsets = o->warmup + o->reps;
  for (int k = 0; k < o->nrows; k++)
    if (o->rows[k] > P.max_rows) P.max_rows = o->rows[k];

  /* ---- the machine ---- */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int max_thr = 1;
  for (int k = 0; k < o->nthreads; k++)
    if (o->threads[k] > max_thr) max_thr = o->threads[k];
  /* the fill uses up to 16 cores, whatever --threads says (48 GB in seconds) */
  P.pool_threads = max_thr;
  if (ncpu > P.pool_threads) P.pool_threads = ncpu < 16 ? (int)ncpu : 16;
  if (max_thr > P.pool_threads) P.pool_threads = max_thr;
  char thp[128] = "absent", defrag[128] = "absent", nodes[64] = "?";
  hg_read_line("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
  hg_read_line("/sys/kernel/mm/transparent_hugepage/defrag", defrag, sizeof defrag);
  /* tables are spread over the NUMA nodes by first touch (unpinned threads) */
  hg_read_line("/sys/devices/system/node/online", nodes, sizeof nodes);
  int64_t avail = hg_mem_available();
  printf("ple_host_gather_probe: %ld CPUs online, NUMA nodes %s, MemAvailable %.1f GB, THP %s "
         "(defrag %s), hugetlb free: %lld x 2 MiB, %lld x 1 GiB\n",
         ncpu, nodes, (double)avail * 1e-9, thp, defrag, hg_hugetlb_free(2048),
         hg_hugetlb_free(1048576));
  if (max_thr > ncpu)
    printf("  note: --threads up to %d on %ld CPUs: spinning threads share cores\n", max_thr, ncpu);

  /* ---- CUDA ---- */
  CK(cudaSetDevice(o->device));
  /* spin, not yield, while waiting for an event: the staging totals are
   * wall clock and a yield would add the scheduler's latency */
  if (!cuda_ok(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceMapHost),
               "cudaSetDeviceFlags (continuing with the default)"))
    cudaGetLastError();
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, o->device));
  P.sms = prop.multiProcessorCount;
  snprintf(P.device_name, sizeof P.device_name, "%s", prop.name);
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  printf("device %d: %s, %d SMs, PCI %04x:%02x:%02x, CUDA runtime %d, driver %d\n", o->device,
         prop.name, P.sms, (unsigned)prop.pciDomainID, (unsigned)prop.pciBusID,
         (unsigned)prop.pciDeviceID, rt, drv);
  CK(cudaStreamCreateWithFlags(&P.stream, cudaStreamNonBlocking));
  for (int i = 0; i <= MAX_REPS; i++) CK(cudaEventCreate(&P.ev[i]));
  CK(cudaEventCreate(&P.e0));
  CK(cudaEventCreate(&P.e1));
  {
    void *f = NULL, *fd = NULL;
    CK(cudaHostAlloc(&f, 64, cudaHostAllocMapped));
    P.flag = (volatile int *)f;
    *P.flag = 1;
    CK(cudaHostGetDevicePointer(&fd, f, 0));
    CK(cudaMalloc((void **)&P.d_timed_out, sizeof(int)));
    /* the wait kernel polls the flag at its host address */
    if (fd != f) {
      fprintf(stderr, "ple_host_gather_probe: mapped host memory has a different device address; "
                      "this probe needs unified addressing\n");
      goto fail;
    }
  }

  /* ---- buffers ---- */
  const size_t out_bytes = (size_t)P.max_rows * rb;
  const size_t sets = (size_t)P.nsets * (size_t)P.max_rows;
  CK(cudaMalloc((void **)&P.d_out, out_bytes));
  CK(cudaMalloc((void **)&P.d_h2d, H2D_PROBE_BYTES));
  CK(cudaMalloc((void **)&P.d_ids, sets * sizeof(int64_t)));
  CK(cudaMalloc((void **)&P.d_pos, sets * sizeof(int32_t)));
  {
    void *s = NULL, *sd = NULL;
    CK(cudaHostAlloc(&s, out_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    P.staging = (uint8_t *)s;
    CK(cudaHostGetDevicePointer(&sd, s, 0));
    P.staging_dev = (const uint8_t *)sd;
  }
  P.h_check = (uint8_t *)malloc(out_bytes);
  P.h_expect = (uint8_t *)malloc(out_bytes);
  P.h_ids = (int64_t *)malloc(sets * sizeof(int64_t));
  P.h_sorted = (int64_t *)malloc(sets * sizeof(int64_t));
  P.h_pos = (int32_t *)malloc(sets * sizeof(int32_t));
  P.b_dst = (void **)malloc((size_t)P.max_rows * sizeof(void *));
  P.b_src = (void **)malloc((size_t)P.max_rows * sizeof(void *));
  P.b_size = (size_t *)malloc((size_t)P.max_rows * sizeof(size_t));
  if (!P.h_check || !P.h_expect || !P.h_ids || !P.h_sorted || !P.h_pos || !P.b_dst || !P.b_src ||
      !P.b_size) {
    fprintf(stderr, "ple_host_gather_probe: out of host memory for %lld rows x %d sets\n",
            (long long)P.max_rows, P.nsets);
    goto fail;
  }
  if (hg_pool_create(&P.pl, P.pool_threads - 1)) {
    fprintf(stderr, "ple_host_gather_probe: could not start %d threads\n", P.pool_threads - 1);
    goto fail;
  }

  /* ---- the floor: pinned H2D copy rate ---- */
  {
    void *h = NULL;
    CK(cudaHostAlloc(&h, H2D_PROBE_BYTES, cudaHostAllocPortable));
    memset(h, 1, H2D_PROBE_BYTES);
    int bad = h2d_rate(&P, h, H2D_PROBE_BYTES, &P.h2d_gbps);
    cudaFreeHost(h);
    if (bad) goto fail;
  }
  printf("pinned H2D copy (cudaMemcpyAsync, 512 MiB, median of 10): %.1f GB/s\n", P.h2d_gbps);
  printf("rows of %d B; each time the median of %d runs after %d warm-up runs, fresh uniform "
         "row ids every run; %d-thread fill, CPU gather prefetch %d rows ahead\n",
         o->row_bytes, o->reps, o->warmup, P.pool_threads, o->prefetch);
  printf("floor (rows x row bytes / H2D rate):");
  for (int k = 0; k < o->nrows; k++)
    printf("  %lld rows %.1f us", (long long)o->rows[k],
           (double)o->rows[k] * (double)rb / (P.h2d_gbps * 1e9) * 1e6);
  printf("\ntargets (* in the tables): 1024 rows <= 8 us, 4096 rows <= 20 us, 65536 rows >= 70%% "
         "of the H2D rate (<= %.1f us)\n",
         65536.0 * (double)rb / (0.7 * P.h2d_gbps * 1e9) * 1e6);
  printf("columns: us = median time a call; %%H2D = rows x row bytes / us over the H2D rate; "
         "(gather+copy): c, d, f: CPU gather us (d: summed over chunks) + GPU copy us (d: from "
         "the first copy's start to the last copy's end; f: the kernel); e: API call us + GPU "
         "us of the copies (us is their sum); ! = MISMATCH\n");

  /* ---- the tables, one at a time ---- */
  {
    double gbs[MAX_LIST + 1];
    int64_t rows[MAX_LIST + 1];
    int n = 0;
    for (int k = 0; k < o->ntables; k++) {
      gbs[n] = o->table_gb[k];
      rows[n++] = (int64_t)(o->table_gb[k] * 1e9 / (double)rb);
    }
    if (o->real) {
      rows[n] = REAL_ROWS;
      gbs[n++] = (double)REAL_ROWS * (double)rb * 1e-9;
    }
    for (int k = 0; k < n; k++) {
      if (rows[k] < 1) {
        fprintf(stderr, "ple_host_gather_probe: a %.3f GB table holds no row\n", gbs[k]);
        goto fail;
      }
      const int real = o->real && k == n - 1 && o->nreal_alloc > 0;
      const int nalloc = real ? o->nreal_alloc : o->nalloc;
      for (int a = 0; a < nalloc; a++) {
        table_info *info = &P.tables[P.ntables];
        memset(info, 0, sizeof *info);
        info->gb = (double)rows[k] * (double)rb * 1e-9;
        info->rows = rows[k];
        info->alloc = real ? o->real_alloc[a] : o->alloc[a];
        run_table(&P, P.ntables++);
        /* after every table, so that a run cut short keeps what it measured */
        if (o->json && write_json(&P, o->json)) P.failures++;
      }
    }
  }
  print_summary(&P);
  printf("\n[%6.1f s] done: %d MISMATCH, %d failures\n", hg_now_s() - P.t_start, P.mismatches,
         P.failures);
  rc = P.mismatches || P.failures ? 1 : 0;
  probe_free(&P);
  return rc;
fail:
  probe_free(&P);
  return 1;
}
