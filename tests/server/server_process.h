// Starts the real flover_server binary on 127.0.0.1 with an ephemeral port,
// reads its "listening on HOST:PORT" line, and stops it (SIGTERM, then
// SIGKILL if it does not exit in time). Also runs other binaries to completion.
#ifndef FLOVER_TESTS_SERVER_SERVER_PROCESS_H_
#define FLOVER_TESTS_SERVER_SERVER_PROCESS_H_

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace flover::testing {

// Spawns argv[0] with argv; stdout goes to a pipe when `out_fd` is not null.
inline pid_t Spawn(const std::vector<std::string>& args, int* out_fd) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int fds[2] = {-1, -1};
  if (out_fd != nullptr) {
    if (pipe(fds) != 0) return -1;
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
  }
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  if (out_fd != nullptr) {
    close(fds[1]);
    *out_fd = fds[0];
  }
  return pid;
}

// Waits up to `timeout` for pid; returns its exit code, 128 + signal, or -1
// on timeout.
inline int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// Runs a command to completion; returns its exit code (or -1 on timeout).
inline int RunCommand(const std::vector<std::string>& args,
                      std::chrono::milliseconds timeout = std::chrono::minutes(5)) {
  const pid_t pid = Spawn(args, nullptr);
  if (pid < 0) return -1;
  const int code = WaitExit(pid, timeout);
  if (code == -1) {
    kill(pid, SIGKILL);
    WaitExit(pid, std::chrono::seconds(5));
  }
  return code;
}

class ServerProcess {
 public:
  // Runs `binary` with `flags` and --listen=127.0.0.1:0.
  ServerProcess(const std::string& binary, std::vector<std::string> flags)
      : ServerProcess(std::vector<std::string>{binary}, std::move(flags)) {}

  // `command` is the server's command line, possibly behind a launcher
  // (mpirun ... flover_server --tp=2); `flags` and --listen follow it.
  ServerProcess(std::vector<std::string> command, std::vector<std::string> flags) {
    std::vector<std::string> args = std::move(command);
    args.push_back("--listen=127.0.0.1:0");
    args.insert(args.end(), flags.begin(), flags.end());
    pid_ = Spawn(args, &out_);
    if (pid_ < 0) return;
    // Lines before the address (start-up notes, such as a model's images
    // being off) are passed over.
    std::string line;
    const std::string prefix = "listening on ";
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      if (read(out_, &c, 1) != 1) break;  // the server exited
      if (c != '\n') {
        line += c;
        continue;
      }
      if (line.rfind(prefix, 0) == 0) {
        address_ = line.substr(prefix.size());
        break;
      }
      line.clear();
    }
    // Keep draining stdout so the server never blocks on a full pipe.
    drain_ = std::thread([fd = out_] {
      char buf[4096];
      while (read(fd, buf, sizeof(buf)) > 0) {
      }
    });
  }

  ~ServerProcess() {
    if (pid_ > 0 && exit_code_ == kRunning) Stop(std::chrono::seconds(10));
    if (drain_.joinable()) drain_.join();
    if (out_ >= 0) close(out_);
  }

  bool ok() const { return !address_.empty(); }
  const std::string& address() const { return address_; }  // HOST:PORT
  pid_t pid() const { return pid_; }

  void Signal(int sig) { kill(pid_, sig); }

  // The pid of MPI rank 0 among this process's children (when it is an
  // mpirun launcher), or the process itself. OpenMPI's mpirun exits 1 when
  // it is signalled itself, so a clean drain is asked of rank 0.
  pid_t Rank0() const {
    DIR* proc = opendir("/proc");
    if (proc == nullptr) return pid_;
    pid_t found = pid_;
    while (dirent* e = readdir(proc)) {
      const pid_t p = std::atoi(e->d_name);
      if (p <= 0) continue;
      std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
      std::string pid_s, comm, state;
      pid_t ppid = 0;
      stat >> pid_s >> comm >> state >> ppid;
      if (ppid != pid_) continue;
      std::ifstream env("/proc/" + std::string(e->d_name) + "/environ");
      std::string var;
      while (std::getline(env, var, '\0')) {
        if (var == "OMPI_COMM_WORLD_RANK=0") found = p;
      }
    }
    closedir(proc);
    return found;
  }

  // SIGTERM, then waits; SIGKILL after `timeout`. Returns the exit code.
  int Stop(std::chrono::milliseconds timeout) {
    Signal(SIGTERM);
    return Wait(timeout);
  }

  int Wait(std::chrono::milliseconds timeout) {
    if (exit_code_ != kRunning) return exit_code_;
    exit_code_ = WaitExit(pid_, timeout);
    if (exit_code_ == -1) {
      kill(pid_, SIGKILL);
      WaitExit(pid_, std::chrono::seconds(5));
    }
    return exit_code_;
  }

 private:
  static constexpr int kRunning = -2;
  pid_t pid_ = -1;
  int out_ = -1;
  std::string address_;
  std::thread drain_;
  int exit_code_ = kRunning;
};

}  // namespace flover::testing

#endif  // FLOVER_TESTS_SERVER_SERVER_PROCESS_H_
