/*
 * Replay driver of a fuzz target: runs LLVMFuzzerTestOneInput once on every
 * file named on the command line and on every file of every directory named
 * (not recursively; names starting with '.' are skipped), in name order.
 * Built with the normal compiler, so that every build (gcc included, and the
 * ASan + UBSan tree) replays the corpora. A finding aborts, as under
 * libFuzzer; each input is announced on stderr first ("replay: running
 * FILE"), so the last such line names the input of a finding.
 *
 * Usage: <target>_replay DIR_OR_FILE...   Exit: 0, or 2 on a usage / I/O
 * error (a missing directory is an error: the corpus must be there).
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, n = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (buf == NULL) {
      fprintf(stderr, "replay: %s: out of memory\n", path);
      fclose(f);
      return -1;
    }
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    cap *= 2;
    unsigned char *grown = realloc(buf, cap);
    if (grown == NULL) free(buf);
    buf = grown;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "replay: %s: read error\n", path);
    free(buf);
    return -1;
  }
  /* An exact-size copy, so that ASan sees a read past the input. */
  unsigned char *input = malloc(n ? n : 1);
  if (input == NULL) {
    free(buf);
    return -1;
  }
  memcpy(input, buf, n);
  free(buf);
  fprintf(stderr, "replay: running %s (%zu bytes)\n", path, n);
  LLVMFuzzerTestOneInput(input, n);
  free(input);
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, size_t *count) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **grown = realloc(names, cap * sizeof *names);
      if (grown == NULL) {
        rc = -1;
        break;
      }
      names = grown;
    }
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    if ((names[n] = malloc(len)) == NULL) {
      rc = -1;
      break;
    }
    snprintf(names[n++], len, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  if (n > 1) qsort(names, n, sizeof *names, cmp_names);
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      if (run_file(names[i]) != 0)
        rc = -1;
      else
        (*count)++;
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  size_t count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      return 2;
    }
    int rc = S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : run_file(argv[i]);
    if (rc != 0) return 2;
    if (!S_ISDIR(st.st_mode)) count++;
  }
  printf("replay: %zu inputs, no finding\n", count);
  return 0;
}
