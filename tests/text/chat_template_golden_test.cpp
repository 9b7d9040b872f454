// Chat templates against goldens rendered by HF transformers (tools/gen_template_goldens.py):
// the real templates of six model families over varied conversations, and probe templates
// that each pin one Jinja behaviour. Renderings must match byte for byte; where transformers
// raised, hearth must fail too (with the same message for runtime errors).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "text/chat_template.h"

namespace hearth::text {
namespace {

using Json = nlohmann::ordered_json;

const std::string kFixtures = std::string(HEARTH_SOURCE_DIR) + "/tests/fixtures/templates";

Json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

const Json& goldens() {
  static const Json* g = new Json(read_json(kFixtures + "/goldens.json"));
  return *g;
}

Json model_config(const std::string& model) {
  return read_json(kFixtures + "/inputs/" + model + "/tokenizer_config.json");
}

// Python exception types whose message hearth reproduces; for the rest (syntax errors, missing
// loaders) only the failure itself is compared.
void expect_same_error(const Json& golden, const Status& st, const std::string& what) {
  ASSERT_FALSE(st.ok()) << what << ": transformers raised " << golden["error"];
  std::string err = golden["error"].get<std::string>();
  size_t colon = err.find(": ");
  std::string type = err.substr(0, colon);
  std::string message = err.substr(colon + 2);
  static const char* kExact[] = {"TemplateError", "UndefinedError", "TypeError", "SecurityError",
                                 "ZeroDivisionError"};
  for (const char* t : kExact) {
    if (type == t && message.find("no loader") == std::string::npos) {
      EXPECT_NE(st.message().find(message), std::string::npos)
          << what << "\n  hearth: " << st.message() << "\n  transformers: " << err;
    }
  }
}

TEST(ChatTemplateGolden, FixtureComesFromTransformers) {
  EXPECT_EQ(goldens()["generator"], "tools/gen_template_goldens.py");
  EXPECT_NE(goldens()["transformers"].get<std::string>(), "mock");
  EXPECT_GE(goldens()["cases"].size(), 150u);
  EXPECT_GE(goldens()["probes"].size(), 60u);
}

TEST(ChatTemplateGolden, ModelTemplatesRenderAsTransformers) {
  std::map<std::string, Result<ChatTemplate>> loaded;
  int compared = 0;
  for (const Json& c : goldens()["cases"]) {
    std::string model = c["model"];
    std::string what = model + " / " + c["name"].get<std::string>() +
                       (c["add_generation_prompt"].get<bool>() ? " +gen" : "");
    auto it = loaded.find(model);
    if (it == loaded.end()) {
      it = loaded.emplace(model, ChatTemplate::load(kFixtures + "/inputs/" + model)).first;
    }
    if (!it->second.ok()) {
      EXPECT_TRUE(c.contains("error")) << what << ": " << it->second.status().message();
      continue;
    }
    auto out = it->second->render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(),
                                  c["kwargs"]);
    if (c.contains("error")) {
      expect_same_error(c, out.status(), what);
    } else {
      ASSERT_TRUE(out.ok()) << what << ": " << out.status().message();
      EXPECT_EQ(*out, c["expected"].get<std::string>()) << what;
      ++compared;
    }
  }
  EXPECT_GE(compared, 90);
}

TEST(ChatTemplateGolden, ProbesRenderAsJinja2) {
  for (const Json& p : goldens()["probes"]) {
    std::string what = p["model"].get<std::string>() + " / " + p["name"].get<std::string>();
    Json config = model_config(p["model"]);
    config["chat_template"] = p["template"];
    auto tmpl = ChatTemplate::from_config(config);
    Result<std::string> out =
        tmpl.ok() ? tmpl->render(Json::array({{{"role", "user"}, {"content", "probe"}}}), nullptr,
                                 false, p["variables"])
                  : Result<std::string>(tmpl.status());
    if (p.contains("error")) {
      expect_same_error(p, out.status(), what);
    } else {
      ASSERT_TRUE(out.ok()) << what << ": " << out.status().message();
      EXPECT_EQ(*out, p["expected"].get<std::string>()) << what << "\n" << p["template"];
    }
  }
}

}  // namespace
}  // namespace hearth::text
