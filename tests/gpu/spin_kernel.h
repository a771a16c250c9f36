#pragma once
#include <cuda_runtime_api.h>
// Occupies stream for about cycles GPU clock cycles.
void launch_spin(cudaStream_t stream, long long cycles);
