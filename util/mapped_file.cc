#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace flover {

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open file (", std::strerror(errno), ")"));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  if (st.st_size > 0) {
    void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": cannot map the file (", std::strerror(e), ")"));
    }
    file->map_ = map;
    file->view_ = absl::string_view(static_cast<const char*>(map), static_cast<size_t>(st.st_size));
  }
  ::close(fd);  // the mapping keeps the file
  return std::shared_ptr<const MappedFile>(std::move(file));
}

std::shared_ptr<const MappedFile> MappedFile::FromBytes(std::string bytes) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->owned_ = std::move(bytes);
  file->view_ = file->owned_;
  return file;
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, view_.size());
}

void MappedFile::Release(int64_t begin, int64_t end) const {
  if (map_ == nullptr || end <= begin) return;
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t first = begin / page * page, last = (end + page - 1) / page * page;
  ::madvise(static_cast<char*>(map_) + first,
            std::min<int64_t>(last, static_cast<int64_t>(view_.size())) - first, MADV_DONTNEED);
}

}  // namespace flover
