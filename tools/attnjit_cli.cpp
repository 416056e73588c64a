// The `attnjit` command line: doctor, prewarm, inspect, cache and demo
// (each subcommand lives in tools/cli/). Exit codes: 0 ok, 1 failure, 2 usage.
#include <CLI/CLI.hpp>

#include <iostream>

#include "attnjit/error.hpp"
#include "cli/context.hpp"
#include "util/bounded_input.hpp"

namespace {

// Every error is one "attnjit: <kind>: <message>" with control characters escaped
// (an ANSI escape or a NUL in the input must not reach the terminal raw).
void print_error(const char* kind, const std::string& message) {
  std::cerr << "attnjit: " << kind << ": " << attnjit::util::escape_controls(message) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace attnjit::cli;
  Context ctx;
  CLI::App app{"attnjit: JIT-compiled CUDA attention kernels. Prewarm, inspect and maintain the kernel cache.",
               "attnjit"};
  app.set_version_flag("--version", ATTNJIT_VERSION);
  app.fallthrough();  // global options may follow the subcommand
  // One command per run: a second name (`cache ls clear`, `inspect K doctor`) is
  // an "argument not expected" usage error, not a command that replaces the first.
  app.require_subcommand(0, 1);
  app.add_option("--cache-dir", ctx.cache_dir, "Cache folder (overrides $ATTNJIT_CACHE_DIR)")
      ->check(CLI::Validator(
          [](std::string& dir) {
            // '' is a typo (an unset shell variable), not a request for the default folder.
            return dir.empty() ? std::string("empty folder name (expected a path)") : std::string();
          },
          "DIR"));
  app.add_flag("-v,--verbose", ctx.verbose, "More log output (-v info, -vv debug, -vvv trace; see $ATTNJIT_LOG_LEVEL)");

  add_doctor_command(app, ctx);
  add_prewarm_command(app, ctx);
  add_inspect_command(app, ctx);
  add_cache_command(app, ctx);
  add_demo_command(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error("usage error", std::string(e.what()) + " (see `attnjit --help`)");
    return kExitUsage;
  }
  try {
    apply_global_options(ctx);
    if (!ctx.action) {  // no subcommand, or a group (`cache`) without its verb
      const CLI::App* target = &app;
      for (auto* sub = &app; sub;) {
        auto parsed = sub->get_subcommands();
        sub = parsed.empty() ? nullptr : parsed.front();
        if (sub) target = sub;
      }
      std::cerr << target->help();
      print_error("usage error", "a subcommand is required");
      return kExitUsage;
    }
    return ctx.action();
  } catch (const UsageError& e) {
    print_error("usage error", e.what());
    return kExitUsage;
  } catch (const attnjit::Error& e) {
    print_error(attnjit::to_string(e.code()), attnjit::util::bare_message(e));
    return kExitFailure;
  } catch (const std::exception& e) {
    print_error("error", e.what());
    return kExitFailure;
  }
}
