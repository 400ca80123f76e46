# The CUDA sampling paths (included by the root CMakeLists.txt): the
# dispatcher and its paths (sampling_dispatch.cu's comment has the rule).
set(INGOT_CUDA_SAMPLING_SOURCES
    src/cuda/sampling/sampling_dispatch.cu
    src/cuda/sampling/sampling_general.cu
    src/cuda/sampling/sampling_dense.cu
    src/cuda/sampling/sampling_softmax_half.cu
    src/cuda/sampling/sampling_wide_softmax.cu
    src/cuda/sampling/sampling_wide_sample.cu
    src/cuda/sampling/sampling_shard.cu
    src/cuda/sampling/sampling_shard_finish.cu)
