// Memory sizes as people write them on a command line: "4GiB", "512MiB",
// "1.5G", "2000000000". Binary units: KiB, MiB, GiB, TiB and the bare K, M,
// G, T (as Docker reads them); decimal units: KB, MB, GB, TB; B or no unit:
// bytes. Case-insensitive; a fraction is allowed with a unit.
#ifndef FLOVER_UTIL_BYTE_SIZE_H_
#define FLOVER_UTIL_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover {

// The size in bytes; InvalidArgument naming `text` when it is not a size
// (negative, no number, an unknown unit, above 2^62).
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// "4.0 GiB", "512.0 MiB", "100 B": the largest binary unit under the size.
std::string FormatByteSize(int64_t bytes);

}  // namespace flover

#endif  // FLOVER_UTIL_BYTE_SIZE_H_
