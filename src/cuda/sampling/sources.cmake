# The CUDA sampling paths (included by the root CMakeLists.txt).
set(INGOT_CUDA_SAMPLING_SOURCES
    src/cuda/sampling/sampling_general.cu
    src/cuda/sampling/sampling_dense.cu)
