// Where the build is not for x86-64: no AVX2 or AVX-512 kernel (the scalar loop runs).
#include "sharding/cpu_adamw.h"

namespace rtd::shard::cpu {

bool adamw_avx2(const AdamWShard&, const AdamWConstants&, std::size_t, std::size_t) {
  return false;
}

bool adamw_avx512(const AdamWShard&, const AdamWConstants&, std::size_t, std::size_t) {
  return false;
}

}  // namespace rtd::shard::cpu
