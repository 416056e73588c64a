// Child processes for the store tests: run a binary (its stdout on a pipe when asked,
// its stderr kept or discarded), wait for its first byte, and read how it ended.
#pragma once

#include <errno.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace attnjit::testing {

// Runs args[0] with args; with stdout_fd, the child's stdout goes to a pipe whose read end
// is returned there. Returns the pid, or -1.
inline pid_t spawn(const std::vector<std::string>& args, int* stdout_fd = nullptr, bool discard_stderr = false) {
  int fds[2] = {-1, -1};
  if (stdout_fd && pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (stdout_fd) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
    }
    if (discard_stderr)
      if (FILE* null = std::fopen("/dev/null", "w")) dup2(fileno(null), STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (stdout_fd) {
    close(fds[1]);
    *stdout_fd = fds[0];
  }
  return pid;
}

// Waits up to 60 s for the child's first byte on fd (the store workers write one once
// their first operation committed), then closes fd.
inline bool wait_first_byte(int fd) {
  pollfd p{fd, POLLIN, 0};
  char byte = 0;
  const bool ok = poll(&p, 1, 60000) == 1 && read(fd, &byte, 1) == 1;
  close(fd);
  return ok;
}

// The exit status, or 128 + the signal that ended the child.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace attnjit::testing
