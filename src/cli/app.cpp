// Command-line dispatch for the hearth binary.
#include "cli/app.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "base/log.h"
#include "cli/suggest.h"
#include "cli/verbs.h"

namespace hearth::cli {
namespace {

std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : command.get_options()) {
    for (const auto& n : opt->get_lnames()) names.push_back("--" + n);
    for (const auto& n : opt->get_snames()) names.push_back("-" + n);
  }
  if (command.get_parent() != nullptr) {
    auto parent = option_names(*command.get_parent());
    names.insert(names.end(), parent.begin(), parent.end());
  }
  return names;
}

void print_usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth: %s\n", message.c_str());
}

// An argument left over after parsing: a mistyped flag or a stray positional.
int report_extra(const CLI::App& command, const std::string& extra) {
  std::string where = command.get_parent() ? "hearth " + command.get_name() : "hearth";
  if (!extra.empty() && extra[0] == '-') {
    std::string flag = extra.substr(0, extra.find('='));
    auto suggestion = closest_match(flag, option_names(command));
    print_usage_error(fmt::format("unknown option '{}' for '{}'{}", flag, where,
                                  suggestion ? fmt::format("; did you mean '{}'?", *suggestion)
                                             : std::string("; see --help")));
  } else {
    print_usage_error(
        fmt::format("unexpected argument '{}' for '{}'; see {} --help", extra, where, where));
  }
  return kExitUsage;
}

}  // namespace

int run_cli(const std::vector<std::string>& args) {
  CLI::App app{"hearth: local LLM inference server and toolkit", "hearth"};
  app.set_version_flag("--version,-V", std::string("hearth ") + HEARTH_VERSION);
  app.require_subcommand(0, 1);
  app.fallthrough();
  app.allow_extras();
  std::string log_level = "info";
  app.add_option("--log-level", log_level,
                 "Log verbosity: trace, debug, info, warn, error, critical, off")
      ->capture_default_str();

  std::map<const CLI::App*, std::function<int()>> runners;
  std::vector<std::string> verb_names;
  for (VerbFactory factory : kVerbs) {
    if (factory == nullptr) continue;
    Verb verb = factory(app);
    verb.command->allow_extras();
    runners[verb.command] = std::move(verb.run);
    verb_names.push_back(verb.command->get_name());
    for (const auto& alias : verb.command->get_aliases()) verb_names.push_back(alias);
  }

  // A first word that is no verb is a typo, not a positional argument.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    bool known = false;
    for (const auto& name : verb_names) known = known || name == args[0];
    if (!known) {
      auto suggestion = closest_match(args[0], verb_names);
      print_usage_error(fmt::format("unknown command '{}'{}", args[0],
                                    suggestion ? fmt::format("; did you mean '{}'?", *suggestion)
                                               : std::string("; see hearth --help")));
      return kExitUsage;
    }
  }

  // Bare `hearth [serve flags]` is `serve`: flags with no verb before them go to serve,
  // except the overview's own (--help, --version).
  std::vector<std::string> argv = args;
  bool has_serve = false;
  for (const auto& name : verb_names) has_serve = has_serve || name == "serve";
  if (has_serve && (argv.empty() || (argv[0][0] == '-' && argv[0] != "-h" && argv[0] != "--help" &&
                                     argv[0] != "-V" && argv[0] != "--version"))) {
    argv.insert(argv.begin(), "serve");
  }

  std::vector<std::string> reversed(argv.rbegin(), argv.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help / --version
      return app.exit(e);
    }
    print_usage_error(e.what());
    return kExitUsage;
  }

  init_logging();
  if (Status st = set_log_level(log_level); !st.ok()) {
    print_usage_error(st.message());
    return kExitUsage;
  }

  const CLI::App* chosen = nullptr;
  for (const CLI::App* sub : app.get_subcommands()) chosen = sub;
  const CLI::App& parsed = chosen ? *chosen : app;
  for (const auto& extra : parsed.remaining()) return report_extra(parsed, extra);
  // Unknown flags after a verb fall through to the top level; name the verb in the report.
  for (const auto& extra : app.remaining()) return report_extra(parsed, extra);

  if (chosen == nullptr) {
    // No verb and no serve verb to default to: the overview.
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  }
  return runners.at(chosen)();
}

}  // namespace hearth::cli
