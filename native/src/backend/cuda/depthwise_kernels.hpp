// Our depthwise backward-filter kernel (backend/depthwise_wgrad.hpp says why and what it computes).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/backend.hpp"
#include "backend/cuda/layer_kernels.hpp"

namespace ooc::cuda_kernels {

// dw (float32, [k, 1, kernel...]) = alpha * the chunk's depthwise filter gradient + beta * dw (beta
// == 0 never reads dw), for a chunk depthwise::serves; x and dy in the chunk's dtype. Part sums go
// through `scratch` (float64, grown as needed), launched on `stream`, every launch checked.
void depthwise_backward_filter(const ChunkConv& s, const void* x, const void* dy, float* dw, float alpha, float beta,
                               ReductionScratch& scratch, cudaStream_t stream);

}  // namespace ooc::cuda_kernels
