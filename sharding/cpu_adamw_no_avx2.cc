// Where the build is not for x86-64: no AVX2 kernel (the scalar loop runs).
#include "sharding/cpu_adamw.h"

namespace rtd::shard::cpu {

bool adamw_avx2(const AdamWShard&, const AdamWConstants&, std::size_t, std::size_t) {
  return false;
}

}  // namespace rtd::shard::cpu
