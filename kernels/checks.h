// Argument checks every backend runs at the top of an op, so a caller's
// mistake is an InvalidArgument naming the op, the tensor and what is wrong
// (never a fault inside a kernel). Host code only; compiles without nvcc.
#ifndef FLOVER_KERNELS_CHECKS_H_
#define FLOVER_KERNELS_CHECKS_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace flover::kernels {

// Any number of rows or columns.
inline constexpr int64_t kAnySize = -1;

// OK when t has memory, `rows` x `cols` elements (kAnySize matches any) and
// one of `dtypes`; otherwise InvalidArgument "<op>: <name> is ...".
absl::Status CheckTensor(const char* op, const char* name, const Tensor& t, int64_t rows,
                         int64_t cols, std::initializer_list<DType> dtypes);

// OK when every sequence of `seqs` has rows inside [0, num_rows), a slot of
// `kv` and positions inside it, and `kv` has memory.
absl::Status CheckSeqTable(const char* op, const SeqTable& seqs, const KvLayer* kv);

// OK when [0, len) fits a slot and both slots exist.
absl::Status CheckKvMove(const KvLayer& kv, int from, int to, int len);

}  // namespace flover::kernels

#endif  // FLOVER_KERNELS_CHECKS_H_
