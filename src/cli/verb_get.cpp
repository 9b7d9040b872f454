// `hearth get <org/name>`: download a model from the Hugging Face Hub into the HF cache
// (resumable, verified). Progress goes to stderr; the snapshot path is printed on stdout.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>

#include "cli/verb.h"
#include "hub/downloader.h"
#include "hub/format.h"
#include "hub/hub_config.h"

namespace hearth::cli {
namespace {

// Ctrl-C sets this flag; a signal handler can only reach static storage.
std::atomic<bool>& interrupted() {
  static std::atomic<bool> flag{false};
  return flag;
}

extern "C" void on_interrupt(int) { interrupted().store(true); }

struct GetArgs {
  std::string repo;
  std::string revision = "main";
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  int parallel = 8;
  int retries = 5;
};

int run_get(const GetArgs& args) {
  hub::HubConfig config = hub::hub_config_from_env();
  interrupted().store(false);
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND;  // a second Ctrl-C kills at once
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  auto progress = hub::make_download_progress(isatty(STDERR_FILENO) == 1, stderr);
  hub::GetOptions options;
  options.repo_id = args.repo;
  options.revision = args.revision;
  options.include = args.include;
  options.exclude = args.exclude;
  options.parallel = args.parallel;
  options.retries = args.retries;
  options.cancel = &interrupted();
  options.progress = progress.get();
  auto result = hub::get_repo(config, options);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (!result.ok()) {
    std::fprintf(stderr, "hearth get: %s\n", result.status().message().c_str());
    return result.status().code() == ErrorCode::kCancelled ? 130 : kExitFailure;
  }
  std::fprintf(stderr, "%s@%s: %d files, %s (%d downloaded, %d already in the cache)\n",
               args.repo.c_str(), result->commit.c_str(), result->files,
               hub::format_bytes(result->bytes_total).c_str(), result->downloaded, result->reused);
  std::printf("%s\n", result->snapshot_dir.c_str());
  return kExitOk;
}

}  // namespace

Verb add_get_verb(CLI::App& app) {
  auto args = std::make_shared<GetArgs>();
  CLI::App* cmd = app.add_subcommand(
      "get", "Download a model from the Hugging Face Hub into the HF cache (resumable, verified)");
  cmd->add_option("repo", args->repo, "Repo id, org/name")->required();
  cmd->add_option("--revision", args->revision, "Branch, tag or commit to download")
      ->capture_default_str();
  cmd->add_option("--include", args->include, "Only files matching this glob (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--exclude", args->exclude, "Skip files matching this glob (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--parallel", args->parallel, "Files downloaded at once")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--retries", args->retries,
                  "Retries per request on HTTP 429/5xx and dropped connections")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  return {cmd, [args] { return run_get(*args); }};
}

}  // namespace hearth::cli
