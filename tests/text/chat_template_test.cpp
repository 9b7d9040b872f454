// ChatTemplate loading rules (which template, which special tokens) and the `hearth template`
// verb driven through the real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/run_binary.h"
#include "text/chat_template.h"

namespace hearth::text {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string kFixtures = std::string(HEARTH_SOURCE_DIR) + "/tests/fixtures/templates";

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hearth_tpl_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
  }

 private:
  std::string path_;
};

Json user(const std::string& text) { return Json::array({{{"role", "user"}, {"content", text}}}); }

TEST(ChatTemplate, NamedTemplatesPickToolUseOnlyWithTools) {
  Json config = {{"chat_template", Json::array({{{"name", "default"}, {"template", "D{{ tools }}"}},
                                                {{"name", "tool_use"}, {"template", "T"}}})}};
  auto ct = ChatTemplate::from_config(config);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(*ct->render(user("x"), nullptr, false, Json::object()), "DNone");
  EXPECT_EQ(*ct->render(user("x"), Json::array(), false, Json::object()), "T");
  Json only_tools = {{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "T"}}})}};
  auto ct2 = ChatTemplate::from_config(only_tools);
  ASSERT_TRUE(ct2.ok());
  EXPECT_FALSE(ct2->render(user("x"), nullptr, false, Json::object()).ok());
}

TEST(ChatTemplate, JinjaFileWinsAndSpecialTokensMapOverrides) {
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"chat_template": "config", "bos_token": {"__type": "AddedToken", "content": "<B>"},
                "eos_token": "<E>", "unk_token": null})");
  dir.write("chat_template.jinja", "{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}\n");
  dir.write("special_tokens_map.json", R"({"eos_token": {"content": "<E2>"}})");
  auto ct = ChatTemplate::load(dir.path());
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(*ct->render(user("x"), nullptr, true, Json::object()), "<B><E2>False");
}

TEST(ChatTemplate, KwargsBecomeVariablesAndOverrideSpecialTokens) {
  Json config = {{"chat_template", "{{ bos_token }}|{{ flag }}|{{ add_generation_prompt }}"},
                 {"bos_token", "<s>"}};
  auto ct = ChatTemplate::from_config(config);
  ASSERT_TRUE(ct.ok());
  EXPECT_EQ(*ct->render(user("x"), nullptr, true, Json{{"flag", 3}}), "<s>|3|True");
  EXPECT_EQ(*ct->render(user("x"), nullptr, false, Json{{"bos_token", "B"}}), "B||False");
  EXPECT_FALSE(ct->render(user("x"), nullptr, false, Json{{"messages", 1}}).ok());
}

TEST(ChatTemplate, MissingOrBrokenTemplateIsAClearError) {
  auto none = ChatTemplate::load(kFixtures + "/inputs/llama2");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no chat template"), std::string::npos);
  auto broken = ChatTemplate::from_config(Json{{"chat_template", "a\n{% for %}"}});
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("line 2"), std::string::npos)
      << broken.status().message();
  EXPECT_FALSE(ChatTemplate::load("/nonexistent/model").ok());
}

TEST(ChatTemplate, PlainJsonKeepsWorking) {
  auto ct = ChatTemplate::load(kFixtures + "/inputs/llama3");
  ASSERT_TRUE(ct.ok());
  nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", " hi "}}});
  auto out = ct->render(messages, nlohmann::json(), true, nlohmann::json::object());
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

using tests::BinaryRun;

// `hearth <args>`, stdout and stderr together in `out`.
BinaryRun hearth(const std::string& args) {
  return tests::run_hearth(args, tests::Stderr::kMerged);
}

TEST(TemplateVerb, PrintsThePromptExactly) {
  ASSERT_TRUE(fs::exists(tests::hearth_binary())) << "build the hearth target first";
  TempDir dir;
  dir.write("messages.json",
            R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}])");
  dir.write("tools.json",
            R"([{"type": "function", "function": {"name": "calc", "parameters": {}}}])");
  std::string model = kFixtures + "/inputs/qwen3";
  BinaryRun plain = hearth("template --model " + model + " --messages " + dir.path() +
                           "/messages.json --kwargs '{\"enable_thinking\": false}'");
  EXPECT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(plain.out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  BinaryRun tools =
      hearth("template --model " + model + " --messages " + dir.path() + "/messages.json --tools " +
             dir.path() + "/tools.json --no-generation-prompt");
  EXPECT_EQ(tools.exit_code, 0) << tools.out;
  EXPECT_NE(tools.out.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"calc\", "
                           "\"parameters\": {}}}\n</tools>"),
            std::string::npos)
      << tools.out;
  EXPECT_EQ(tools.out.substr(tools.out.size() - 11), "<|im_end|>\n");
}

TEST(TemplateVerb, TemplateErrorsAreReported) {
  TempDir dir;
  dir.write("messages.json",
            R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  BinaryRun r = hearth("template --model " + kFixtures + "/inputs/gemma3 --messages " + dir.path() +
                       "/messages.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("Conversation roles must alternate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("line "), std::string::npos) << r.out;
  BinaryRun bad = hearth("template --model " + kFixtures + "/inputs/llama3 --messages " +
                         dir.path() + "/messages.json --kwargs '[1]'");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  BinaryRun missing =
      hearth("template --model " + kFixtures + "/inputs/llama3 --messages /nope.json");
  EXPECT_EQ(missing.exit_code, 1) << missing.out;
}

}  // namespace
}  // namespace hearth::text
