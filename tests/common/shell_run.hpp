// Runs a /bin/sh command line for the CLI tests: stdout captured, stderr through a file.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace attnjit::testing {

// Fills r.out, r.err and r.code (the exit status, -1 if the command did not exit).
// `cmd` must not redirect stderr itself; it goes to err_file.
template <class Result>
Result shell_run(const std::string& cmd, const std::string& err_file) {
  Result r;
  FILE* pipe = popen((cmd + " 2>'" + err_file + "'").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

}  // namespace attnjit::testing
