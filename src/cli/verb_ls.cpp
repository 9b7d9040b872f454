// `hearth ls`: the models in the HF cache with size on disk, architecture, parameter
// count, quantization and context length; --json for scripts.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "cli/verb.h"
#include "hub/cache_scan.h"
#include "hub/format.h"
#include "hub/hub_config.h"
#include "hub/model_summary.h"

namespace hearth::cli {
namespace {

struct LsArgs {
  bool json = false;
  bool all_revisions = false;
};

struct Row {
  std::string id, revision, commit, path, size, arch, params, quant, context;
  nlohmann::json json;
};

Row make_row(const hub::CachedRepo& repo, const hub::CachedSnapshot& snap) {
  Row row;
  row.id = repo.repo_id;
  row.commit = snap.commit;
  row.path = snap.dir.string();
  std::string refs;
  for (const auto& r : snap.refs) refs += (refs.empty() ? "" : ",") + r;
  row.revision = refs.empty() ? snap.commit.substr(0, 12) : refs;
  row.size = hub::format_bytes(snap.bytes);
  row.json = {{"id", repo.repo_id},        {"refs", snap.refs},        {"commit", snap.commit},
              {"path", snap.dir.string()}, {"size_bytes", snap.bytes}, {"files", snap.files}};
  auto summary = hub::summarize_model(snap.dir);
  if (!summary.ok()) {
    row.arch = row.params = row.quant = row.context = "?";
    row.json["error"] = summary.status().message();
    return row;
  }
  row.arch = summary->architecture;
  row.quant = summary->quantization.empty() ? "?" : summary->quantization;
  row.params = summary->parameters ? hub::format_count(*summary->parameters) : "?";
  row.context = summary->context_length ? std::to_string(*summary->context_length) : "?";
  row.json["architecture"] = summary->architecture;
  row.json["quantization"] = summary->quantization;
  row.json["parameters"] =
      summary->parameters ? nlohmann::json(*summary->parameters) : nlohmann::json();
  row.json["context_length"] =
      summary->context_length ? nlohmann::json(*summary->context_length) : nlohmann::json();
  return row;
}

int run_ls(const LsArgs& args) {
  hub::HubConfig config = hub::hub_config_from_env();
  auto repos = hub::scan_cache(config.cache_dir);
  if (!repos.ok()) {
    std::fprintf(stderr, "hearth ls: %s\n", repos.status().message().c_str());
    return kExitFailure;
  }
  std::vector<Row> rows;
  for (const auto& repo : *repos) {
    if (args.all_revisions) {
      for (const auto& snap : repo.snapshots) rows.push_back(make_row(repo, snap));
    } else if (const hub::CachedSnapshot* snap = hub::current_snapshot(repo)) {
      rows.push_back(make_row(repo, *snap));
    }
  }
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& row : rows) out.push_back(row.json);
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  if (rows.empty()) {
    std::fprintf(stderr, "no models in %s; download one with: hearth get <org/name>\n",
                 config.cache_dir.c_str());
    return kExitOk;
  }
  std::vector<std::array<std::string, 7>> table = {
      {"MODEL", "REVISION", "SIZE", "ARCH", "PARAMS", "QUANT", "CONTEXT"}};
  for (const auto& r : rows) {
    table.push_back({r.id, r.revision, r.size, r.arch, r.params, r.quant, r.context});
  }
  std::array<size_t, 7> width{};
  for (const auto& line : table) {
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  for (const auto& line : table) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) {
      text += line[i];
      if (i + 1 < line.size()) text += std::string(width[i] - line[i].size() + 2, ' ');
    }
    std::printf("%s\n", text.c_str());
  }
  return kExitOk;
}

}  // namespace

Verb add_ls_verb(CLI::App& app) {
  auto args = std::make_shared<LsArgs>();
  CLI::App* cmd = app.add_subcommand("ls", "List downloaded models (the HF cache)");
  cmd->add_flag("--json", args->json, "Print a JSON array instead of a table");
  cmd->add_flag("--all-revisions", args->all_revisions,
                "One row per cached snapshot, not just the current one per model");
  return {cmd, [args] { return run_ls(*args); }};
}

}  // namespace hearth::cli
