/*
 * FlashInfer's header-only sampling kernels behind a plain C interface, for
 * bench/flashinfer_sampling.py: the script compiles this file with nvcc
 * against FlashInfer's include/ directory (never part of ingot), loads the
 * shared library with ctypes and times each path beside ingot, on the same
 * logits, as CUDA-graph replays.
 *
 * Written against the signatures of FlashInfer 0.6.17's
 * include/flashinfer/sampling.cuh and topk.cuh (namespace flashinfer::sampling);
 * a version whose signatures differ fails to compile here, by name.
 *
 * Paths (fi_path), f32 logits [B, V] with contiguous rows, one call each:
 *   FI_SOFTMAX          OnlineSoftmax, per-row temperature array: probs [B, V].
 *                       PDL on compute capability >= 9, as the package's
 *                       softmax does by default.
 *   FI_SAMPLE           SamplingFromLogits (Gumbel-max over the row).
 *   FI_TOPK_TOPP_JOINT  OnlineSoftmax (T = 1), then TopKTopPSamplingFromProb
 *                       with per-row top_k / top_p arrays: the package's
 *                       filter_apply_order="joint".
 *   FI_TOPK_TOPP_MASK   RadixTopKMaskLogitsMultiCTA (per-row top_k array),
 *                       OnlineSoftmax of the masked logits, TopPSamplingFromProb:
 *                       the package's "top_k_first" order with a top_k tensor.
 *   FI_TOPK_TOPP_FAST   TopKDispatch (sorted, deterministic) into [B, k] values
 *                       and ids, OnlineSoftmax of the [B, k] values,
 *                       TopPSamplingFromProb over them, then the ids gathered
 *                       (a kernel of this file): the package's "top_k_first"
 *                       path for a scalar k <= 256 and V >= 65536.
 * Where the package composes a torch.softmax, these paths use FlashInfer's
 * own OnlineSoftmax. Every draw is deterministic=true (the package default)
 * with seed and offset device arrays (graph-safe; 0.6.17's kernels read
 * element 0 alone: one seed for the batch, each row its own Philox
 * subsequence; the arrays hold the row index and 0 for B entries all the same).
 *
 * fi_setup allocates and fills everything a path needs besides the logits
 * and the output (parameter arrays, workspace, intermediate [B, V] buffers,
 * the zeroed radix row states), so fi_run only enqueues kernels: no
 * allocation, no host synchronisation, safe to capture in a CUDA graph.
 * Functions return 0 or a cudaError_t value; fi_last_error() says which
 * call failed and why.
 */
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <vector>

// FlashInfer's headers declare a few variables they do not use (nvcc's
// warning 177): not this file's to fix, so silenced for them alone.
#pragma nv_diagnostic push
#pragma nv_diag_suppress 177
#include <flashinfer/sampling.cuh>
#include <flashinfer/topk.cuh>
#pragma nv_diagnostic pop

namespace fis = flashinfer::sampling;

enum fi_path {
  FI_SOFTMAX = 0,
  FI_SAMPLE = 1,
  FI_TOPK_TOPP_JOINT = 2,
  FI_TOPK_TOPP_MASK = 3,
  FI_TOPK_TOPP_FAST = 4,
  FI_PATH_COUNT
};

// The package's cached buffers: 1 MB of softmax workspace and 1 MB of radix
// row states (zeroed once; every call leaves them zeroed).
static const size_t kWorkspaceBytes = 1u << 20;
static const size_t kRowStatesBytes = 1u << 20;

struct fi_state {
  int path;
  uint32_t batch, vocab, top_k;
  bool pdl;
  float *temperature, *top_p;  // [B]
  int32_t *top_k_arr;          // [B]
  uint64_t *seed, *offset;     // [B]
  bool *valid;                 // [B]
  void *workspace;             // OnlineSoftmax partials
  fis::RadixRowState *row_states;
  float *probs;                // [B, V]: JOINT, MASK
  float *masked;               // [B, V]: MASK
  float *values, *probs_k;     // [B, k]: FAST
  int32_t *ids, *local;        // [B, k] and [B]: FAST
};

static char g_error[1024];

static int fail(cudaError_t e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof g_error)
    snprintf(g_error + n, sizeof g_error - (size_t)n, ": %s (%s, %d)", cudaGetErrorString(e),
             cudaGetErrorName(e), (int)e);
  return (int)e;
}

static cudaError_t alloc(void **p, size_t bytes, const char *what, cudaError_t *first,
                         const char **first_what) {
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess && *first == cudaSuccess) {
    *first = e;
    *first_what = what;
  }
  return e;
}

template <typename T>
static cudaError_t upload(T *dst, T value, uint32_t n) {
  std::vector<T> h(n, value);
  return cudaMemcpy(dst, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
}

// tokens[r] = ids[r, local[r]]: the FAST path's draw over [B, k] mapped back
// to vocabulary ids.
__global__ void fi_gather_kernel(const int32_t *ids, const int32_t *local, int32_t *tokens,
                                 uint32_t batch, uint32_t k) {
  uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < batch) tokens[r] = ids[(size_t)r * k + (uint32_t)local[r]];
}

extern "C" {

const char *fi_last_error(void) { return g_error; }

void fi_free(void *handle) {
  fi_state *s = static_cast<fi_state *>(handle);
  if (!s) return;
  void *bufs[] = {s->temperature, s->top_p, s->top_k_arr, s->seed,   s->offset,
                  s->valid,       s->workspace, s->row_states, s->probs, s->masked,
                  s->values,      s->probs_k, s->ids,        s->local};
  for (void *b : bufs)
    if (b) cudaFree(b);
  delete s;
}

// device: the CUDA device (made current for the calling thread; fi_run
// calls come from that thread); path: an fi_path; top_k: k of the top-k
// paths (1 <= k < vocab; FAST: k <= 256, vocab >= 65536, as the package's
// fast path); top_p in (0, 1]; temperature > 0 (FI_SOFTMAX).
int fi_setup(int device, int path, int batch, int vocab, int top_k, float top_p,
             float temperature, void **out_state) {
  g_error[0] = 0;
  if (!out_state) return fail(cudaErrorInvalidValue, "fi_setup: out_state is NULL");
  *out_state = nullptr;
  if (path < 0 || path >= FI_PATH_COUNT)
    return fail(cudaErrorInvalidValue, "fi_setup: path %d is not in [0, %d)", path,
                (int)FI_PATH_COUNT);
  if (batch < 1 || vocab < 1)
    return fail(cudaErrorInvalidValue, "fi_setup: batch %d, vocab %d (both must be >= 1)", batch,
                vocab);
  const bool topk_path =
      path == FI_TOPK_TOPP_JOINT || path == FI_TOPK_TOPP_MASK || path == FI_TOPK_TOPP_FAST;
  if (topk_path && (top_k < 1 || top_k >= vocab))
    return fail(cudaErrorInvalidValue, "fi_setup: top_k %d is not in [1, vocab %d)", top_k,
                vocab);
  if (path == FI_TOPK_TOPP_FAST && (top_k > 256 || vocab < 65536))
    return fail(cudaErrorInvalidValue,
                "fi_setup: the top_k_first fast path takes top_k <= 256 and vocab >= 65536, "
                "not top_k %d, vocab %d",
                top_k, vocab);
  if (topk_path && !(top_p > 0.0f && top_p <= 1.0f))
    return fail(cudaErrorInvalidValue, "fi_setup: top_p %g is not in (0, 1]", (double)top_p);
  if (path == FI_SOFTMAX && !(temperature > 0.0f))
    return fail(cudaErrorInvalidValue, "fi_setup: temperature %g is not > 0",
                (double)temperature);

  fi_state *s = new fi_state();
  s->path = path;
  s->batch = (uint32_t)batch;
  s->vocab = (uint32_t)vocab;
  s->top_k = topk_path ? (uint32_t)top_k : 0;
  const size_t B = (size_t)batch, V = (size_t)vocab, K = s->top_k;
  int major = 0;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (e != cudaSuccess) {
    delete s;
    return fail(e, "fi_setup: CUDA device %d is not usable", device);
  }
  s->pdl = major >= 9;

  cudaError_t first = cudaSuccess;
  const char *what = "";
  alloc((void **)&s->temperature, B * sizeof(float), "temperature [B]", &first, &what);
  alloc((void **)&s->top_p, B * sizeof(float), "top_p [B]", &first, &what);
  alloc((void **)&s->top_k_arr, B * sizeof(int32_t), "top_k [B]", &first, &what);
  alloc((void **)&s->seed, B * sizeof(uint64_t), "seed [B]", &first, &what);
  alloc((void **)&s->offset, B * sizeof(uint64_t), "offset [B]", &first, &what);
  alloc((void **)&s->valid, B * sizeof(bool), "valid [B]", &first, &what);
  alloc(&s->workspace, kWorkspaceBytes, "softmax workspace (1 MB)", &first, &what);
  alloc((void **)&s->row_states, kRowStatesBytes, "radix row states (1 MB)", &first, &what);
  if (path == FI_TOPK_TOPP_JOINT || path == FI_TOPK_TOPP_MASK)
    alloc((void **)&s->probs, B * V * sizeof(float), "probs [B, V]", &first, &what);
  if (path == FI_TOPK_TOPP_MASK)
    alloc((void **)&s->masked, B * V * sizeof(float), "masked logits [B, V]", &first, &what);
  if (path == FI_TOPK_TOPP_FAST) {
    alloc((void **)&s->values, B * K * sizeof(float), "top-k values [B, k]", &first, &what);
    alloc((void **)&s->probs_k, B * K * sizeof(float), "top-k probs [B, k]", &first, &what);
    alloc((void **)&s->ids, B * K * sizeof(int32_t), "top-k ids [B, k]", &first, &what);
    alloc((void **)&s->local, B * sizeof(int32_t), "draw over the top-k [B]", &first, &what);
  }
  if (first != cudaSuccess) {
    fi_free(s);
    return fail(first, "fi_setup: cudaMalloc of %s (B = %d, V = %d)", what, batch, vocab);
  }

  e = upload(s->temperature, temperature, s->batch);
  if (e == cudaSuccess) e = upload(s->top_p, top_p, s->batch);
  if (e == cudaSuccess) e = upload(s->top_k_arr, (int32_t)s->top_k, s->batch);
  if (e == cudaSuccess) e = upload(s->offset, (uint64_t)0, s->batch);
  if (e == cudaSuccess) {
    std::vector<uint64_t> seeds(B);
    for (size_t r = 0; r < B; r++) seeds[r] = r;
    e = cudaMemcpy(s->seed, seeds.data(), B * sizeof(uint64_t), cudaMemcpyHostToDevice);
  }
  if (e == cudaSuccess) e = cudaMemset(s->row_states, 0, kRowStatesBytes);
  if (e == cudaSuccess) e = cudaMemset(s->workspace, 0, kWorkspaceBytes);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    fi_free(s);
    return fail(e, "fi_setup: filling the parameter arrays");
  }
  *out_state = s;
  return 0;
}

// One call of the state's path on `stream` (a cudaStream_t; 0: the legacy
// default stream). logits: f32 [B, V], rows contiguous. out: f32 probs
// [B, V] (FI_SOFTMAX) or int32 tokens [B] (the samplers).
int fi_run(void *handle, const float *logits, void *out, void *stream_handle) {
  fi_state *s = static_cast<fi_state *>(handle);
  if (!s || !logits || !out) return fail(cudaErrorInvalidValue, "fi_run: a NULL argument");
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  float *x = const_cast<float *>(logits);  // FlashInfer's entry points take non-const pointers
  const uint32_t B = s->batch, V = s->vocab;
  int32_t *tokens = static_cast<int32_t *>(out);
  cudaError_t e = cudaSuccess;
  const char *step = "";
  switch (s->path) {
    case FI_SOFTMAX:
      step = "OnlineSoftmax";
      e = fis::OnlineSoftmax<float>(x, static_cast<float *>(out), B, V, s->temperature, 1.0f,
                                    s->workspace, kWorkspaceBytes, s->pdl, stream);
      break;
    case FI_SAMPLE:
      step = "SamplingFromLogits";
      e = fis::SamplingFromLogits<float, int32_t>(x, tokens, nullptr, B, V, true, s->seed, 0,
                                                  s->offset, 0, stream);
      break;
    case FI_TOPK_TOPP_JOINT:
      step = "OnlineSoftmax";
      e = fis::OnlineSoftmax<float>(x, s->probs, B, V, nullptr, 1.0f, s->workspace,
                                    kWorkspaceBytes, s->pdl, stream);
      if (e != cudaSuccess) break;
      step = "TopKTopPSamplingFromProb";
      e = fis::TopKTopPSamplingFromProb<float, int32_t>(
          s->probs, s->top_k_arr, s->top_p, tokens, s->valid, nullptr, B, (int32_t)s->top_k, 1.0f,
          V, true, s->seed, 0, s->offset, 0, stream);
      break;
    case FI_TOPK_TOPP_MASK:
      step = "RadixTopKMaskLogitsMultiCTA";
      e = fis::RadixTopKMaskLogitsMultiCTA<float, int32_t>(x, s->masked, s->top_k_arr, B,
                                                            s->top_k, V, s->row_states, stream);
      if (e != cudaSuccess) break;
      step = "OnlineSoftmax";
      e = fis::OnlineSoftmax<float>(s->masked, s->probs, B, V, nullptr, 1.0f, s->workspace,
                                    kWorkspaceBytes, s->pdl, stream);
      if (e != cudaSuccess) break;
      step = "TopPSamplingFromProb";
      e = fis::TopPSamplingFromProb<float, int32_t>(s->probs, tokens, s->valid, nullptr, s->top_p,
                                                    B, 1.0f, V, true, s->seed, 0, s->offset, 0,
                                                    stream);
      break;
    case FI_TOPK_TOPP_FAST:
      step = "TopKDispatch";
      e = fis::TopKDispatch<float, int32_t>(x, s->ids, s->values, B, s->top_k, V, s->row_states,
                                            /*sorted_output=*/true, /*deterministic=*/true,
                                            fis::TopKTieBreak::None, stream);
      if (e != cudaSuccess) break;
      step = "OnlineSoftmax (top-k values)";
      e = fis::OnlineSoftmax<float>(s->values, s->probs_k, B, s->top_k, nullptr, 1.0f,
                                    s->workspace, kWorkspaceBytes, s->pdl, stream);
      if (e != cudaSuccess) break;
      step = "TopPSamplingFromProb (top-k values)";
      e = fis::TopPSamplingFromProb<float, int32_t>(s->probs_k, s->local, s->valid, nullptr,
                                                    s->top_p, B, 1.0f, s->top_k, true, s->seed, 0,
                                                    s->offset, 0, stream);
      if (e != cudaSuccess) break;
      step = "the id gather";
      fi_gather_kernel<<<(B + 127) / 128, 128, 0, stream>>>(s->ids, s->local, tokens, B,
                                                            s->top_k);
      e = cudaGetLastError();
      break;
    default:
      return fail(cudaErrorInvalidValue, "fi_run: path %d", s->path);
  }
  if (e != cudaSuccess)
    return fail(e, "fi_run: %s (path %d, B = %u, V = %u)", step, s->path, B, V);
  return 0;
}

}  // extern "C"
