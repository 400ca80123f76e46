#!/usr/bin/env python3
"""Writes an instrumented copy of src/cuda/sampling_dense.cu: thread 0 of
every block records %globaltimer (ns) at the dense kernel's phase
boundaries and its place in the order in which the blocks entered; the
8192 blocks from the one that enters at LAUNCH x B x C on (several
launches) keep theirs in device memory, printed at the process's exit (an
atexit handler registered after the CUDA runtime's), a line a block:

  ST <mode> <row> <rank> <smid> <entry ns> <d1> ... <d7> <order>

d_i = stamp i - entry ns: 1 after the PDL wait, 2 copies landed, 3 pass 1
done, 4 first reduction done, 5 second pass done, 6 second reduction done,
7 exit (0 where a phase did not run). The stamps cost the kernels 2-7%
(docs/perf-notes.md, session 17). dev/stamp_report.py cuts the lines into
launches (stamp_report.read_launches) and summarises the largest one;
dev/stamp_clusters.py reads them all: where the clusters land, how long
their slots sat free before they started, the seams between launches.
Usage: dev/stamp_dense.py OUT.cu [LAUNCH [SRC]]   (SRC: default
src/cuda/sampling_dense.cu), then build OUT.cu in place of SRC in a tree of
its own: dev/stamp_device.sh does it all. Do not copy it over the tracked
file on the device machine: the next call restores the file with its old
modification time, and ninja keeps the instrumented build."""
import sys

out = sys.argv[1]
launch = int(sys.argv[2]) if len(sys.argv) > 2 else 60
SRC = sys.argv[3] if len(sys.argv) > 3 else "src/cuda/sampling_dense.cu"
text = open(SRC).read()


def sub(old, new, count=1):
    global text
    if text.count(old) != count:
        sys.exit(f"stamp_dense.py: {old!r} found {text.count(old)} times, expected {count}")
    text = text.replace(old, new)


HEAD = f"""
__device__ unsigned long long g_stamp_entries;
__device__ unsigned long long g_stamp_out[8192][13];
__shared__ unsigned long long g_stamp[8];
__shared__ unsigned long long g_stamp_entry;
__device__ __forceinline__ void stamp(int i) {{
  if (threadIdx.x == 0) {{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_stamp[i] = t;
  }}
}}
/* the block's place in the order of entry (stamp_report.read_launches cuts launches by it) */
__device__ __forceinline__ void stamp_enter() {{
  if (threadIdx.x == 0) g_stamp_entry = atomicAdd(&g_stamp_entries, 1ull);
}}
/* no printf here: a call would change the kernel's register allocation */
__device__ __forceinline__ void stamp_print(int mode, long long r, long long batch) {{
  stamp(7);
  if (threadIdx.x != 0) return;
  /* 8192 blocks in the order of entry */
  const unsigned long long first = {launch}ull * batch * cluster_blocks();
  if (g_stamp_entry < first || g_stamp_entry - first >= 8192) return;
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  unsigned long long *o = g_stamp_out[g_stamp_entry - first];
  o[0] = 1 + mode, o[1] = r, o[2] = cluster_rank(), o[3] = smid, o[4] = g_stamp[0];
  for (int i = 1; i < 8; i++) o[4 + i] = g_stamp[i] ? g_stamp[i] - g_stamp[0] : 0;
  o[12] = g_stamp_entry;
}}
"""
DUMP = """
static void stamp_dump() {
  static unsigned long long h[8192][13];
  if (cudaMemcpyFromSymbol(h, g_stamp_out, sizeof h) != cudaSuccess) {
    printf("stamp_dump: %s\\n", cudaGetErrorString(cudaGetLastError()));
    return;
  }
  for (int b = 0; b < 8192; b++)
    if (h[b][0])
      printf("ST %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\\n",
             h[b][0] - 1, h[b][1], h[b][2], h[b][3], h[b][4], h[b][5], h[b][6], h[b][7],
             h[b][8], h[b][9], h[b][10], h[b][11], h[b][12]);
}
"""
sub("constexpr int kDenseThreads = 512;", HEAD + "constexpr int kDenseThreads = 512;")
# the softmax's phases (softmax_finish), and its exit
sub("    const unsigned long long z =\n        cluster_reduce(mass,",
    "    stamp(5);\n    const unsigned long long z =\n        cluster_reduce(mass,")
sub("&space.bar[1]);\n    inv_z = (float)((double)kMassUnit / (double)z);",
    "&space.bar[1]);\n    inv_z = (float)((double)kMassUnit / (double)z);\n    stamp(6);")
sub("    softmax_finish(a, r, lo, n, wlo, wend, T, raw_t, st, space, sv);\n    return;",
    "    stamp(4);\n    softmax_finish(a, r, lo, n, wlo, wend, T, raw_t, st, space, sv);\n"
    "    stamp_print(kMode, r, a.in.batch);\n    return;")
# the kernel's start
sub("  ReduceSpace &space = reduce_space;\n  if (threadIdx.x == 0) {",
    "  ReduceSpace &space = reduce_space;\n  if (threadIdx.x == 0) for (int i = 0; i < 8; i++) "
    "g_stamp[i] = 0;\n  stamp(0);\n  stamp_enter();\n  if (threadIdx.x == 0) {")
sub("  wait_for_previous_grid();\n\n  /* a row of the general kernel's",
    "  wait_for_previous_grid();\n  stamp(1);\n\n  /* a row of the general kernel's")
sub("  const Divisor raw_t = divisor_of(T > 0.0f ? T : 1.0f);\n  __syncthreads();",
    "  const Divisor raw_t = divisor_of(T > 0.0f ? T : 1.0f);\n  __syncthreads();\n  stamp(2);")
sub("  cluster_wait(); /* reduce_ready's: every block of the cluster runs */\n  LoadStats",
    "  stamp(3);\n  cluster_wait(); /* reduce_ready's: every block of the cluster runs */\n"
    "  LoadStats")
# the sampler's phases
sub("  flags = st.flags;\n  const bool empty = st.best == 0;",
    "  stamp(4);\n  flags = st.flags;\n  const bool empty = st.best == 0;")
sub("  if (second) {\n    DrawStats d;", "  stamp(5);\n  if (second) {\n    DrawStats d;")
sub("    mass = mass_value(fin.mass);\n    raw_sum = mass_value(fin.raw_sum);",
    "    stamp(6);\n    mass = mass_value(fin.mass);\n    raw_sum = mass_value(fin.raw_sum);")
END = "  if (small_draw || select_top) {\n    cluster_arrive_relaxed();\n    cluster_wait();\n  }\n"
sub(END, END + "  stamp_print(kMode, r, a.in.batch);\n")
sub("extern \"C\" void ingot_cuda_sampling_dense_init(struct ingot_context *ctx) {",
    DUMP + "extern \"C\" void ingot_cuda_sampling_dense_init(struct ingot_context *ctx) {\n"
    "  static bool registered = false;\n  if (!registered) registered = true, atexit(stamp_dump);")
open(out, "w").write(text)
