// `hearth gc`: reclaim disk from the HF cache (superseded snapshots, dead blobs). Prints
// the plan; deletes only with --yes.
#include <cstdio>
#include <memory>

#include "cli/verb.h"
#include "hub/format.h"
#include "hub/gc.h"
#include "hub/hub_config.h"

namespace hearth::cli {
namespace {

int run_gc(bool yes) {
  hub::HubConfig config = hub::hub_config_from_env();
  auto plan = hub::plan_gc(config.cache_dir);
  if (!plan.ok()) {
    std::fprintf(stderr, "hearth gc: %s\n", plan.status().message().c_str());
    return kExitFailure;
  }
  if (plan->empty()) {
    std::printf("nothing to reclaim in %s\n", config.cache_dir.c_str());
    return kExitOk;
  }
  const char* verb = yes ? "remove" : "would remove";
  for (const auto& s : plan->snapshots) {
    std::printf("%s snapshot %s@%s: %s\n", verb, s.repo_id.c_str(), s.path.filename().c_str(),
                s.why.c_str());
  }
  for (const auto& b : plan->blobs) {
    std::printf("%s blob %s/%s (%s): %s\n", verb, b.repo_id.c_str(), b.path.filename().c_str(),
                hub::format_bytes(b.bytes).c_str(), b.why.c_str());
  }
  std::string total = hub::format_bytes(plan->bytes());
  if (!yes) {
    std::printf("%s reclaimable (%zu snapshots, %zu blobs); run `hearth gc --yes` to delete\n",
                total.c_str(), plan->snapshots.size(), plan->blobs.size());
    return kExitOk;
  }
  if (Status st = hub::execute_gc(*plan); !st.ok()) {
    std::fprintf(stderr, "hearth gc: %s\n", st.message().c_str());
    return kExitFailure;
  }
  std::printf("reclaimed %s\n", total.c_str());
  return kExitOk;
}

}  // namespace

Verb add_gc_verb(CLI::App& app) {
  auto yes = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "gc", "Reclaim superseded model snapshots and unreferenced blobs from the HF cache");
  cmd->add_flag("--yes,-y", *yes, "Delete (without it, only print the plan)");
  return {cmd, [yes] { return run_gc(*yes); }};
}

}  // namespace hearth::cli
