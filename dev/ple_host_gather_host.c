/*
 * Host side of the host-table gather probe (dev/ple_host_gather_probe.c):
 * clocks, readers of /proc and /sys, and the thread pool that gathers rows
 * into the staging buffer and fills the tables (ple_host_gather_host.h).
 */
#define _GNU_SOURCE /* sched_yield, and glibc's clock_gettime under -std=c11 */

#include "ple_host_gather_host.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double hg_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double hg_median(double *v, int n) {
  if (n < 1) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

uint64_t hg_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int hg_read_line(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char *r = fgets(buf, (int)size, f);
  fclose(f);
  if (r == NULL) return -1;
  buf[strcspn(buf, "\n")] = 0;
  return 0;
}

int64_t hg_mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  long long kb = -1;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

long long hg_hugetlb_free(long long page_kb) {
  char path[128], buf[64];
  snprintf(path, sizeof path, "/sys/kernel/mm/hugepages/hugepages-%lldkB/free_hugepages",
           page_kb);
  if (hg_read_line(path, buf, sizeof buf)) return -1;
  return strtoll(buf, NULL, 10);
}

double hg_huge_page_bytes(const void *p, size_t len) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return -1;
  uintptr_t lo = (uintptr_t)p, hi = lo + len;
  double total = 0, share = 0; /* share: the current mapping's overlap / its size */
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
  return total;
}

/* ---- thread pool ------------------------------------------------------------------------ */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* The word at word index i of a table: cheap, and no two rows alike. */
static uint64_t fill_word(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}

static void run_part(const hg_job *j, int part) {
  if (j->kind == HG_JOB_FILL) {
    size_t words = j->bytes / 8, per = words / (size_t)j->parts;
    size_t lo = per * (size_t)part, hi = part == j->parts - 1 ? words : lo + per;
    uint64_t *w = (uint64_t *)(void *)j->base;
    for (size_t i = lo; i < hi; i++) w[i] = fill_word(i);
    if (part == j->parts - 1)
      for (size_t b = words * 8; b < j->bytes; b++) j->base[b] = (uint8_t)b;
    return;
  }
  const int64_t lo = j->n * part / j->parts, hi = j->n * (part + 1) / j->parts;
  const size_t rb = j->row_bytes;
  const int pf = j->prefetch;
  for (int64_t i = lo; i < hi; i++) {
    /* random rows miss every cache: start the loads of rows ahead, so that
     * several misses are in flight at once */
    if (pf > 0 && i + pf < hi) {
      const uint8_t *q = j->table + (size_t)j->ids[i + pf] * rb;
      for (size_t o = 0; o < rb; o += 64) __builtin_prefetch(q + o);
      __builtin_prefetch(q + rb - 1);
    }
    const uint8_t *src = j->table + (size_t)j->ids[i] * rb;
    uint8_t *dst = j->dst + (size_t)i * rb;
    if (rb == 160)
      memcpy(dst, src, 160); /* the PLE row: a fixed size, inlined */
    else
      memcpy(dst, src, rb);
  }
}

static void *worker_main(void *arg) {
  hg_worker *w = (hg_worker *)arg;
  hg_pool *p = w->pool;
  unsigned my_epoch = 0, seen = 0, idle = 0;
  int spin = 0;
  for (;;) {
    unsigned e = atomic_load_explicit(&p->epoch, memory_order_acquire);
    if (e != my_epoch) {
      /* no job is in flight while the epoch changes (hg_pool_set_threads
       * waits for every ack), so the current generation is not a new job */
      my_epoch = e;
      if (atomic_load(&p->quit)) return NULL;
      spin = w->idx < atomic_load_explicit(&p->spinners, memory_order_relaxed);
      seen = atomic_load_explicit(&p->gen, memory_order_relaxed);
      atomic_store_explicit(&w->ack, e, memory_order_release);
      continue;
    }
    if (!spin) {
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->epoch) == my_epoch) pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
      continue;
    }
    unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (g == seen) {
      /* a yield now and then lets threads that share a core (more threads
       * than cores) still make progress */
      if (++idle % 4096 == 0) sched_yield();
      cpu_relax();
      continue;
    }
    seen = g;
    run_part(&p->job, w->idx + 1);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
  }
}

static void bump_epoch(hg_pool *p) {
  pthread_mutex_lock(&p->mu);
  unsigned e = atomic_fetch_add(&p->epoch, 1u) + 1u;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (atomic_load(&p->quit)) return;
  for (int i = 0; i < p->started; i++)
    while (atomic_load_explicit(&p->workers[i].ack, memory_order_acquire) != e) sched_yield();
}

void hg_pool_set_threads(hg_pool *p, int n) {
  int s = n - 1;
  if (s > p->started) s = p->started;
  if (s < 0) s = 0;
  if (atomic_load(&p->spinners) == s) return;
  atomic_store(&p->spinners, s);
  bump_epoch(p);
}

void hg_pool_run(hg_pool *p, const hg_job *j) {
  if (j->parts <= 1) {
    run_part(j, 0);
    return;
  }
  p->job = *j;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->gen, 1u, memory_order_release);
  run_part(&p->job, 0);
  unsigned idle = 0;
  while (atomic_load_explicit(&p->done, memory_order_acquire) < j->parts - 1) {
    if (++idle % 4096 == 0) sched_yield();
    cpu_relax();
  }
}

int hg_pool_create(hg_pool *p, int nworkers) {
  memset(p, 0, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  atomic_store(&p->epoch, 1u);
  p->nworkers = nworkers;
  p->workers = (hg_worker *)calloc((size_t)(nworkers > 0 ? nworkers : 1), sizeof *p->workers);
  if (p->workers == NULL) return -1;
  for (int i = 0; i < nworkers; i++) {
    p->workers[i].pool = p;
    p->workers[i].idx = i;
    if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) break;
    p->started = i + 1;
  }
  for (int i = 0; i < p->started; i++) /* every worker has seen epoch 1: asleep */
    while (atomic_load_explicit(&p->workers[i].ack, memory_order_acquire) != 1u) sched_yield();
  return p->started == nworkers ? 0 : -1;
}

void hg_pool_destroy(hg_pool *p) {
  if (p->workers == NULL) return;
  atomic_store(&p->quit, 1);
  bump_epoch(p);
  for (int i = 0; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
  free(p->workers);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  p->workers = NULL;
}
