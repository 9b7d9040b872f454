// `hearth ls`, `gc` and `fit` and model resolution, end to end: models downloaded from
// the mock Hub into a temp cache, then listed, collected, fitted and resolved.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "hub/cache_scan.h"
#include "hub/file_filter.h"
#include "hub/resolve.h"
#include "hub_test_util.h"

namespace hearth::hub::testing {
namespace {

class ModelsTest : public ::testing::Test {
 protected:
  fs::path cache() const { return tmp_.path() / "hub"; }
  Env env(const std::string& endpoint = "http://127.0.0.1:9") const {
    return {{"HF_ENDPOINT", endpoint},
            {"HF_HUB_CACHE", cache().string()},
            {"HF_HOME", (tmp_.path() / "hf-home").string()},
            {"HF_TOKEN", ""}};
  }
  HearthRun hearth(const std::vector<std::string>& args, const std::string& endpoint = "") {
    return run_hearth(args, endpoint.empty() ? env() : env(endpoint), tmp_.path());
  }
  // Downloads the tiny llama at v1, then (the Hub's main moved) at v2, plus the mlx model.
  void download_all() {
    {
      MockHub v1({}, tmp_.path() / "log1");
      ASSERT_EQ(hearth({"get", "hearth-test/tiny-llama"}, v1.endpoint()).exit_code, 0);
      ASSERT_EQ(hearth({"get", "mlx-test/Qwen3-tiny-4bit"}, v1.endpoint()).exit_code, 0);
    }
    MockHub v2({"--head", "v2"}, tmp_.path() / "log2");
    HearthRun r = hearth({"get", "hearth-test/tiny-llama"}, v2.endpoint());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("3 downloaded, 6 already in the cache"), std::string::npos) << r.err;
  }
  TempDir tmp_;
};

TEST_F(ModelsTest, LsListsModelsWithTheirFacts) {
  download_all();
  HearthRun r = hearth({"ls", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["id"], "hearth-test/tiny-llama");
  EXPECT_EQ(rows[0]["architecture"], "LlamaForCausalLM");
  EXPECT_EQ(rows[0]["parameters"], 202048);  // counted from the safetensors headers
  EXPECT_EQ(rows[0]["quantization"], "bf16");
  EXPECT_EQ(rows[0]["context_length"], 4096);
  EXPECT_EQ(rows[0]["refs"], nlohmann::json::array({"main"}));
  EXPECT_EQ(rows[1]["id"], "mlx-test/Qwen3-tiny-4bit");
  EXPECT_EQ(rows[1]["parameters"], 229504);  // packed 4-bit weights unpacked, scales excluded
  EXPECT_EQ(rows[1]["quantization"], "4-bit g64 (mlx)");
  EXPECT_EQ(rows[1]["context_length"], 40960);
  HearthRun all = hearth({"ls", "--json", "--all-revisions"});
  EXPECT_EQ(nlohmann::json::parse(all.out).size(), 3u);
  HearthRun table = hearth({"ls"});
  EXPECT_NE(table.out.find("MODEL"), std::string::npos);
  EXPECT_NE(table.out.find("202.0K"), std::string::npos) << table.out;
}

TEST_F(ModelsTest, LsOnAnEmptyCacheSaysHowToGetOne) {
  HearthRun r = hearth({"ls"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("hearth get"), std::string::npos) << r.err;
  EXPECT_EQ(hearth({"ls", "--json"}).out, "[]\n");
}

TEST_F(ModelsTest, GcPlansThenDeletesOnlyWithYes) {
  download_all();
  fs::path repo = cache() / "models--hearth-test--tiny-llama";
  auto count_blobs = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(repo / "blobs")) n += e.is_regular_file();
    return n;
  };
  ASSERT_EQ(count_blobs(), 12);  // 9 files at v1, 3 changed at v2
  HearthRun plan = hearth({"gc"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("would remove snapshot hearth-test/tiny-llama@"), std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find("(1 snapshots, 3 blobs)"), std::string::npos) << plan.out;
  EXPECT_EQ(count_blobs(), 12);  // a plan deletes nothing
  HearthRun yes = hearth({"gc", "--yes"});
  ASSERT_EQ(yes.exit_code, 0) << yes.err;
  EXPECT_EQ(count_blobs(), 9);
  int snapshots = 0;
  for (const auto& e : fs::directory_iterator(repo / "snapshots")) snapshots += e.is_directory();
  EXPECT_EQ(snapshots, 1);
  // The remaining snapshot is whole.
  std::string main = read_text(repo / "refs/main");
  EXPECT_TRUE(fs::exists(repo / "snapshots" / main / "model-00002-of-00002.safetensors"));
  EXPECT_NE(hearth({"gc"}).out.find("nothing to reclaim"), std::string::npos);
}

TEST_F(ModelsTest, FitGivesAVerdictAndTheLongestContext) {
  download_all();
  HearthRun r = hearth({"fit", "hearth-test/tiny-llama", "--memory-budget", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto fit = nlohmann::json::parse(r.out);
  EXPECT_EQ(fit["weights_bytes"], 404096);
  EXPECT_EQ(fit["kv_bytes_per_token"], 2 * 2 * 2 * 16 * 2);  // K,V x layers x kv heads x dim
  EXPECT_EQ(fit["context"], 4096);
  EXPECT_TRUE(fit["fits"]);
  EXPECT_EQ(fit["max_context"], 4096);  // capped at the model's maximum
  // A budget just over weights + overhead leaves room for a shorter context only.
  // weights + CPU overhead + activations (2048-token chunk x 704 f32 + 4 x 1000 logits) +
  // 2000 tokens x batch 4 x 256 B of KV.
  double tight = (404096.0 + (1 << 29) + 2048 * 704 * 4 + 4 * 1000 * 4 + 2000 * 4 * 256) / 1e9;
  HearthRun t = hearth({"fit", "tiny-llama", "--batch", "4", "--memory-budget",
                        fmt::format("{:.9f}", tight), "--json"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  auto tf = nlohmann::json::parse(t.out);
  EXPECT_FALSE(tf["fits"]);
  EXPECT_GE(tf["max_context"].get<int64_t>(), 1999);
  EXPECT_LE(tf["max_context"].get<int64_t>(), 2000);
  HearthRun text = hearth({"fit", "qwen3", "--context", "1024"});
  EXPECT_NE(text.out.find("verdict"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("memory "), std::string::npos) << text.out;
}

TEST_F(ModelsTest, ResolutionByPathRepoIdAndQuery) {
  download_all();
  auto by_id = resolve_model("hearth-test/tiny-llama", cache());
  ASSERT_TRUE(by_id.ok()) << by_id.status().to_string();
  EXPECT_EQ(by_id->source, "cache");
  EXPECT_TRUE(fs::exists(by_id->dir / "config.json"));
  auto by_query = resolve_model("qwen3 4bit", cache());
  ASSERT_TRUE(by_query.ok()) << by_query.status().to_string();
  EXPECT_EQ(by_query->repo_id, "mlx-test/Qwen3-tiny-4bit");
  auto by_path = resolve_model(by_id->dir.string(), cache());
  ASSERT_TRUE(by_path.ok());
  EXPECT_EQ(by_path->source, "path");
  // Both revisions are reachable: the tag-less old one by commit prefix.
  auto scan = scan_cache(cache());
  ASSERT_TRUE(scan.ok());
  std::string old_commit;
  for (const auto& snap : (*scan)[0].snapshots) {
    if (snap.refs.empty()) old_commit = snap.commit;
  }
  ASSERT_FALSE(old_commit.empty());
  auto old = resolve_model("hearth-test/tiny-llama@" + old_commit.substr(0, 10), cache());
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->commit, old_commit);

  auto ambiguous = resolve_model("tiny", cache());
  EXPECT_EQ(ambiguous.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(ambiguous.status().message().find("mlx-test/Qwen3-tiny-4bit"), std::string::npos);
  auto missing = resolve_model("org/not-here", cache());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("hearth get org/not-here"), std::string::npos);
  EXPECT_EQ(resolve_model("./nowhere", cache()).status().code(), ErrorCode::kNotFound);
  HearthRun cli = hearth({"fit", "tiny"});
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_NE(cli.err.find("matches 2 downloaded models"), std::string::npos) << cli.err;
}

TEST_F(ModelsTest, DefaultModelIsTheNewestDownloadElseTheStarter) {
  fs::path starter = tmp_.path() / "starter";
  write_text(starter / "config.json", "{}");
  setenv("HEARTH_STARTER_DIR", starter.c_str(), 1);
  auto empty = default_model(cache());
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_EQ(empty->source, "starter");
  EXPECT_EQ(empty->dir, starter);
  download_all();
  auto newest = default_model(cache());
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(newest->repo_id, "hearth-test/tiny-llama");  // downloaded last (v2)
  unsetenv("HEARTH_STARTER_DIR");
}

TEST(FileFilter, HubGlobSemantics) {
  EXPECT_TRUE(keep_file("a/b.json", {"*.json"}, {}));  // '*' crosses '/'
  EXPECT_TRUE(keep_file("onnx/model.onnx", {"onnx/"}, {}));
  EXPECT_FALSE(keep_file("onnx/model.onnx", {}, {"onnx/*"}));
  EXPECT_FALSE(keep_file("model.bin", {"*.json", "*.safetensors"}, {}));
  EXPECT_FALSE(keep_file("tokenizer.json", {"*.json"}, {"tokenizer*"}));
  EXPECT_TRUE(keep_file("README.md", {}, {}));
}

}  // namespace
}  // namespace hearth::hub::testing
