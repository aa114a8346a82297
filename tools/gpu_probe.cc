// What a GPU host's CUDA libraries are, as the bundle's binaries will load
// them: the driver's and runtime's CUDA versions, cuBLASLt's and NCCL's,
// and the devices. Opens each library by its soname (the same search the
// CUDA module's loads get), so it links nothing of CUDA and runs, printing
// "absent", where a library is missing. Exit status 0 when the runtime sees
// at least one device, 1 otherwise.
#include <dlfcn.h>

#include <cstdio>

namespace {

void* Open(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  std::printf("%-20s %s\n", soname, h != nullptr ? "loaded" : dlerror());
  return h;
}

template <typename F>
F Symbol(void* lib, const char* name) {
  return lib == nullptr ? nullptr : reinterpret_cast<F>(dlsym(lib, name));
}

// CUDA's 13000 -> "13.0"; NCCL's 22809 -> "2.28.9", cuBLAS's 130100 -> "13.1.0".
void PrintCudaVersion(const char* what, int v) {
  std::printf("%-20s %d.%d (%d)\n", what, v / 1000, v % 1000 / 10, v);
}
void PrintDottedVersion(const char* what, int v) {
  std::printf("%-20s %d.%d.%d (%d)\n", what, v / 10000, v % 10000 / 100, v % 100, v);
}

}  // namespace

int main() {
  void* cudart = Open("libcudart.so.13");
  void* lt = Open("libcublasLt.so.13");
  void* nccl = Open("libnccl.so.2");
  int v = 0;
  if (auto f = Symbol<int (*)(int*)>(cudart, "cudaDriverGetVersion"); f && f(&v) == 0) {
    PrintCudaVersion("driver CUDA", v);
  }
  if (auto f = Symbol<int (*)(int*)>(cudart, "cudaRuntimeGetVersion"); f && f(&v) == 0) {
    PrintCudaVersion("runtime CUDA", v);
  }
  if (auto f = Symbol<size_t (*)()>(lt, "cublasLtGetVersion"); f) {
    PrintDottedVersion("cuBLASLt", static_cast<int>(f()));
  }
  if (auto f = Symbol<int (*)(int*)>(nccl, "ncclGetVersion"); f && f(&v) == 0) {
    PrintDottedVersion("NCCL", v);
  }
  int devices = 0;
  auto count = Symbol<int (*)(int*)>(cudart, "cudaGetDeviceCount");
  if (count == nullptr || count(&devices) != 0) devices = 0;
  std::printf("%-20s %d\n", "devices", devices);
  return devices > 0 ? 0 : 1;
}
