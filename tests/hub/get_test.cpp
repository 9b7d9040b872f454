// `hearth get` end to end: the real binary against the mock Hub, checking the HF cache
// layout on disk, resume, verification, retries and error messages.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "base/hash.h"
#include "hub_test_util.h"

namespace hearth::hub::testing {
namespace {

constexpr const char* kRepo = "hearth-test/tiny-llama";
constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

class GetTest : public ::testing::Test {
 protected:
  fs::path cache() const { return tmp_.path() / "hub"; }
  fs::path repo_dir() const { return cache() / "models--hearth-test--tiny-llama"; }
  fs::path log() const { return tmp_.path() / "requests.jsonl"; }

  std::unique_ptr<MockHub> start(std::vector<std::string> args = {}) {
    std::error_code ec;
    fs::remove(log(), ec);
    return std::make_unique<MockHub>(args, log());
  }

  Env env(const MockHub& hub, const std::string& token = "") const {
    return {{"HF_ENDPOINT", hub.endpoint()},
            {"HF_HUB_CACHE", cache().string()},
            {"HF_HOME", (tmp_.path() / "hf-home").string()},
            {"HF_TOKEN", token}};
  }

  HearthRun get(const MockHub& hub, std::vector<std::string> args, const std::string& token = "") {
    args.insert(args.begin(), "get");
    return run_hearth(args, env(hub, token), tmp_.path());
  }

  std::string ref(const std::string& name) const { return read_text(repo_dir() / "refs" / name); }

  std::vector<fs::path> blobs_named(const std::string& suffix) const {
    std::vector<fs::path> out;
    if (!fs::exists(repo_dir() / "blobs")) return out;
    for (const auto& e : fs::directory_iterator(repo_dir() / "blobs")) {
      std::string name = e.path().filename();
      if (name.size() >= suffix.size() && name.ends_with(suffix)) out.push_back(e.path());
    }
    return out;
  }

  TempDir tmp_;
};

TEST_F(GetTest, DownloadsIntoTheHfCacheLayout) {
  auto hub = start();
  HearthRun r = get(*hub, {kRepo}, "hf_secret");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string commit = ref("main");
  ASSERT_EQ(commit.size(), 40u);
  fs::path snapshot = repo_dir() / "snapshots" / commit;
  EXPECT_EQ(r.out, snapshot.string() + "\n");
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(snapshot)) {
    if (e.is_directory()) continue;
    ++files;
    ASSERT_TRUE(fs::is_symlink(e.symlink_status())) << e.path();
    fs::path target = fs::read_symlink(e.path());
    EXPECT_TRUE(target.is_relative()) << target;
    EXPECT_EQ(fs::canonical(e.path()).parent_path(), fs::canonical(repo_dir() / "blobs"));
  }
  EXPECT_EQ(files, 9);
  EXPECT_EQ(fs::read_symlink(snapshot / "onnx/model.onnx").string().substr(0, 15),
            "../../../blobs/");
  // LFS blobs are named by their content's SHA-256.
  fs::path shard = fs::canonical(snapshot / kShard1);
  EXPECT_EQ(sha256_file_hex(shard.string()).value(), shard.filename().string());
  EXPECT_NE(read_text(snapshot / "config.json").find("LlamaForCausalLM"), std::string::npos);
  // The token goes to the Hub, never to the CDN host it redirects to.
  int cdn = 0;
  for (const auto& req : hub->requests()) {
    std::string path = req["path"];
    if (path.starts_with("/__cdn/")) {
      ++cdn;
      EXPECT_TRUE(req["auth"].is_null()) << req.dump();
    } else {
      EXPECT_EQ(req["auth"], "Bearer hf_secret") << req.dump();
    }
  }
  EXPECT_EQ(cdn, 3);
  EXPECT_TRUE(blobs_named(".incomplete").empty());
}

TEST_F(GetTest, CompleteFilesAreNotFetchedAgain) {
  auto hub = start();
  ASSERT_EQ(get(*hub, {kRepo}).exit_code, 0);
  fs::remove(log());
  HearthRun r = get(*hub, {kRepo});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto requests = hub->requests();
  ASSERT_EQ(requests.size(), 1u);  // only the file listing
  EXPECT_NE(std::string(requests[0]["path"]).find("/api/models/"), std::string::npos);
  EXPECT_NE(r.err.find("0 downloaded, 9 already in the cache"), std::string::npos) << r.err;
}

TEST_F(GetTest, IncludeAndExcludeGlobs) {
  auto hub = start();
  HearthRun r = get(*hub, {kRepo, "--include", "*.json", "--include", "*.safetensors", "--exclude",
                           "tokenizer*"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::path snapshot = repo_dir() / "snapshots" / ref("main");
  EXPECT_TRUE(fs::exists(snapshot / "config.json"));
  EXPECT_TRUE(fs::exists(snapshot / kShard2));
  EXPECT_FALSE(fs::exists(snapshot / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(snapshot / "README.md"));
  EXPECT_FALSE(fs::exists(snapshot / "onnx"));
  HearthRun none = get(*hub, {kRepo, "--include", "*.gguf"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no file matches"), std::string::npos) << none.err;
}

TEST_F(GetTest, ResumesWithRangeAfterADroppedConnection) {
  auto hub = start({"--fault", std::string("drop:") + kShard1 + ":50000"});
  HearthRun r = get(*hub, {kRepo});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool resumed = false;
  for (const auto& req : hub->requests()) {
    if (req["range"] == "bytes=50000-") resumed = true;
  }
  EXPECT_TRUE(resumed);
  fs::path shard = fs::canonical(repo_dir() / "snapshots" / ref("main") / kShard1);
  EXPECT_EQ(sha256_file_hex(shard.string()).value(), shard.filename().string());
}

TEST_F(GetTest, ServerIgnoringRangeRestartsTheFile) {
  auto seed = start();
  ASSERT_EQ(get(*seed, {kRepo, "--include", kShard2}).exit_code, 0);
  fs::path blob = fs::canonical(repo_dir() / "snapshots" / ref("main") / kShard2);
  // A partial blob with its first 1000 bytes correct.
  std::string head = read_text(blob).substr(0, 1000);
  fs::remove_all(cache());
  write_text(fs::path(blob.string() + ".incomplete"), head);
  seed.reset();
  auto hub = start({"--fault", std::string("norange:") + kShard2});
  HearthRun r = get(*hub, {kRepo, "--include", kShard2});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(hub->requests_for(fs::path(blob).filename().string()).at(0)["range"], "bytes=1000-");
  EXPECT_EQ(sha256_file_hex(blob.string()).value(), blob.filename().string());
}

TEST_F(GetTest, WrongSha256DeletesTheBlobAndFails) {
  auto hub = start({"--fault", std::string("badsha:") + kShard2});
  HearthRun r = get(*hub, {kRepo});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("SHA-256 mismatch"), std::string::npos) << r.err;
  EXPECT_TRUE(blobs_named(".incomplete").empty());
  EXPECT_FALSE(fs::exists(repo_dir() / "refs/main"));  // the ref moves only on success
}

TEST_F(GetTest, RetriesOn429HonoringRetryAfterAnd500) {
  auto hub = start({"--fault", "429:config.json:1:1", "--fault", "500:api:2"});
  auto start_time = std::chrono::steady_clock::now();
  HearthRun r = get(*hub, {kRepo});
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(hub->requests_for("/config.json").size(), 2u);
  EXPECT_EQ(hub->requests_for("/revision/main").size(), 3u);
  EXPECT_GE(seconds, 1.0);  // Retry-After: 1 was honored
}

TEST_F(GetTest, PersistentServerErrorFailsAfterTheRetries) {
  auto hub = start({"--fault", "500:README.md:100"});
  HearthRun r = get(*hub, {kRepo, "--retries", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("failed after 2 attempts"), std::string::npos) << r.err;
  EXPECT_EQ(hub->requests_for("/README.md").size(), 2u);
}

TEST_F(GetTest, PrivateRepoNeedsTheToken) {
  auto hub = start({"--token", "hf_secret"});
  HearthRun anon = get(*hub, {kRepo});
  EXPECT_EQ(anon.exit_code, 1);
  EXPECT_NE(anon.err.find("private or gated"), std::string::npos) << anon.err;
  EXPECT_NE(anon.err.find("HF_TOKEN"), std::string::npos) << anon.err;
  HearthRun wrong = get(*hub, {kRepo}, "hf_wrong");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("HF_TOKEN has no access"), std::string::npos) << wrong.err;
  EXPECT_EQ(get(*hub, {kRepo}, "hf_secret").exit_code, 0);
}

TEST_F(GetTest, GatedRepoSaysSo) {
  auto hub = start();
  HearthRun anon = get(*hub, {"hearth-test/gated-model"});
  EXPECT_EQ(anon.exit_code, 1);
  EXPECT_NE(anon.err.find("is gated or private"), std::string::npos) << anon.err;
  HearthRun denied = get(*hub, {"hearth-test/gated-model"}, "hf_other");
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find("HTTP 403"), std::string::npos) << denied.err;
  EXPECT_EQ(get(*hub, {"hearth-test/gated-model"}, "hf_good_token").exit_code, 0);
}

TEST_F(GetTest, MissingRepoAndRevision) {
  auto hub = start();
  HearthRun repo = get(*hub, {"hearth-test/no-such-model"});
  EXPECT_EQ(repo.exit_code, 1);
  EXPECT_NE(repo.err.find("repository hearth-test/no-such-model not found"), std::string::npos)
      << repo.err;
  HearthRun rev = get(*hub, {kRepo, "--revision", "no-such-branch"});
  EXPECT_EQ(rev.exit_code, 1);
  EXPECT_NE(rev.err.find("has no revision 'no-such-branch'"), std::string::npos) << rev.err;
  HearthRun bad = get(*hub, {"../../etc"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("is not a repo id"), std::string::npos) << bad.err;
}

TEST_F(GetTest, TagsWriteRefsAndCommitsDoNot) {
  auto hub = start({"--head", "v2"});
  ASSERT_EQ(get(*hub, {kRepo, "--revision", "v1.0", "--include", "*.json"}).exit_code, 0);
  std::string v1 = ref("v1.0");
  ASSERT_EQ(v1.size(), 40u);
  ASSERT_EQ(get(*hub, {kRepo, "--include", "*.json"}).exit_code, 0);
  EXPECT_NE(ref("main"), v1);
  fs::remove_all(repo_dir() / "refs");
  HearthRun r = get(*hub, {kRepo, "--revision", v1, "--include", "config.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(repo_dir() / "refs"));
  EXPECT_TRUE(fs::exists(repo_dir() / "snapshots" / v1 / "config.json"));
}

TEST_F(GetTest, CtrlCLeavesAResumableDownload) {
  auto hub = start({"--fault", std::string("slow:") + kShard1 + ":40"});
  pid_t pid = spawn_hearth({"get", kRepo, "--include", kShard1}, env(*hub), tmp_.path());
  // Wait until some bytes of the shard are on disk, then interrupt.
  std::uintmax_t partial = 0;
  for (int i = 0; i < 200 && partial == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const auto& p : blobs_named(".incomplete")) partial = fs::file_size(p);
  }
  ASSERT_GT(partial, 0u);
  kill(pid, SIGINT);
  HearthRun r = wait_hearth(pid, tmp_.path());
  EXPECT_EQ(r.exit_code, 130);
  EXPECT_NE(r.err.find("resume"), std::string::npos) << r.err;
  auto left = blobs_named(".incomplete");
  ASSERT_EQ(left.size(), 1u);
  std::uintmax_t kept = fs::file_size(left[0]);
  EXPECT_GT(kept, 0u);
  EXPECT_FALSE(fs::exists(repo_dir() / "refs/main"));

  hub = start();
  HearthRun again = get(*hub, {kRepo, "--include", kShard1});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  auto cdn = hub->requests_for(left[0].stem().string());
  ASSERT_EQ(cdn.size(), 1u);
  EXPECT_EQ(cdn[0]["range"], fmt::format("bytes={}-", kept));
  fs::path shard = fs::canonical(repo_dir() / "snapshots" / ref("main") / kShard1);
  EXPECT_EQ(sha256_file_hex(shard.string()).value(), shard.filename().string());
}

}  // namespace
}  // namespace hearth::hub::testing
