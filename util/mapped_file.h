// A file's bytes, mapped read-only (or owned, for bytes already in memory),
// for readers of large untrusted files (safetensors, GGUF): pages are read
// from the page cache when touched, and a reader gives back the pages of a
// region it has converted, so loading costs what is converted, not the file.
#ifndef FLOVER_UTIL_MAPPED_FILE_H_
#define FLOVER_UTIL_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flover {

class MappedFile {
 public:
  // Maps `path` (a regular file; empty files are fine). NotFound when it
  // cannot be opened, InvalidArgument when it is not a regular file,
  // ResourceExhausted when it cannot be mapped; messages name the path.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path);
  // Bytes already in memory (tests, fuzzers).
  static std::shared_ptr<const MappedFile> FromBytes(std::string bytes);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::string_view bytes() const { return view_; }
  // Gives back the pages under [begin, end) (mapped files only): they are
  // read again from the page cache if touched later.
  void Release(int64_t begin, int64_t end) const;

 private:
  MappedFile() = default;
  std::string owned_;
  void* map_ = nullptr;
  absl::string_view view_;
};

}  // namespace flover

#endif  // FLOVER_UTIL_MAPPED_FILE_H_
