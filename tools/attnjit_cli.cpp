// The `attnjit` command line: doctor, prewarm, inspect, cache and demo
// (each subcommand lives in tools/cli/). Exit codes: 0 ok, 1 failure, 2 usage.
#include <CLI/CLI.hpp>

#include <iostream>

#include "attnjit/error.hpp"
#include "cli/context.hpp"

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
  app.add_option("--cache-dir", ctx.cache_dir, "Cache folder (overrides $ATTNJIT_CACHE_DIR)");
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
    app.exit(e);
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
      std::cerr << target->help() << "attnjit: a subcommand is required\n";
      return kExitUsage;
    }
    return ctx.action();
  } catch (const UsageError& e) {
    std::cerr << "attnjit: " << e.what() << "\n";
    return kExitUsage;
  } catch (const attnjit::Error& e) {
    std::cerr << e.what() << "\n";  // already "attnjit: <kind>: <message>"
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "attnjit: " << e.what() << "\n";
    return kExitFailure;
  }
}
