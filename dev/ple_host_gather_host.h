/*
 * Host side of dev/ple_host_gather_probe.c: clocks, /proc and /sys readers,
 * and the persistent thread pool that gathers rows and fills tables
 * (dev/ple_host_gather_host.c). Not part of libingot.
 */
#ifndef INGOT_DEV_PLE_HOST_GATHER_HOST_H
#define INGOT_DEV_PLE_HOST_GATHER_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

double hg_now_s(void);
/* Median of v[0..n) (reorders v); 0 for n < 1. */
double hg_median(double *v, int n);
uint64_t hg_splitmix64(uint64_t *state);
/* First line of a file into buf, without its newline; 0 on success. */
int hg_read_line(const char *path, char *buf, size_t size);
/* MemAvailable of /proc/meminfo in bytes; -1 where unknown. */
int64_t hg_mem_available(void);
/* Free pages of the hugetlb pool of page_kb (2048, 1048576); -1 where unknown. */
long long hg_hugetlb_free(long long page_kb);
/* Bytes of [p, p + len) that huge pages back now (/proc/self/smaps:
 * AnonHugePages and the hugetlb fields, in proportion for mappings partly
 * inside); -1 where unreadable. */
double hg_huge_page_bytes(const void *p, size_t len);

/* ---- thread pool ----
 * A job runs in `parts` parts: part 0 on the caller, parts 1..parts-1 on
 * pool threads. Dispatch must cost well under a microsecond (a decode
 * gather of 1024 rows takes a few), so the threads taking part spin on a
 * generation counter; hg_pool_set_threads says how many take part, and the
 * others sleep on a condition variable until that changes. */

typedef enum { HG_JOB_GATHER, HG_JOB_FILL } hg_job_kind;

typedef struct hg_job {
  hg_job_kind kind;
  int parts;
  /* gather: dst row i = table row ids[i], rows of row_bytes, i < n */
  const uint8_t *table;
  const int64_t *ids;
  uint8_t *dst;
  int64_t n;
  size_t row_bytes;
  int prefetch; /* rows ahead whose cache lines are prefetched; 0: none */
  /* fill: hg_fill_word(i) at 8-byte word i of [base, base + bytes) */
  uint8_t *base;
  size_t bytes;
} hg_job;

struct hg_pool;
typedef struct hg_worker {
  struct hg_pool *pool;
  int idx; /* takes part idx + 1 */
  _Atomic unsigned ack;
  pthread_t thread;
} hg_worker;

typedef struct hg_pool {
  int nworkers, started;
  hg_worker *workers;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic unsigned epoch; /* bumped by hg_pool_set_threads and at exit */
  _Atomic int spinners;   /* workers 0..spinners-1 spin and take parts */
  _Atomic int quit;
  _Atomic unsigned gen;   /* bumped by each job */
  _Atomic int done;       /* parts finished by workers */
  hg_job job;
} hg_pool;

/* Starts nworkers threads (sleeping); 0, or -1 if not all started. */
int hg_pool_create(hg_pool *p, int nworkers);
void hg_pool_destroy(hg_pool *p);
/* n threads (the caller and n - 1 workers, n - 1 <= nworkers) take part in
 * the jobs that follow, and those workers spin until the next call; returns
 * once every worker has seen the change. */
void hg_pool_set_threads(hg_pool *p, int n);
/* Runs j in j->parts parts (hg_pool_set_threads(j->parts) in force). */
void hg_pool_run(hg_pool *p, const hg_job *j);

#endif
