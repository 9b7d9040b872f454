// The Jinja interpreter's own guarantees, beyond what the transformers goldens pin: errors
// name the template line, the sandbox budgets hold, hostile input fails cleanly, and a parsed
// template renders many times.
#include <gtest/gtest.h>

#include <ctime>

#include "text/jinja/py_format.h"
#include "text/jinja/template.h"

namespace hearth::text::jinja {
namespace {

Result<std::string> render(std::string_view source, DictData vars = {}, RenderLimits limits = {}) {
  HEARTH_ASSIGN_OR_RETURN(Template t, Template::parse(source, limits));
  return t.render(vars);
}

std::string error_of(std::string_view source, RenderLimits limits = {}) {
  auto r = render(source, {}, limits);
  return r.ok() ? "<rendered: " + *r + ">" : r.status().message();
}

TEST(Jinja, RendersManyTimesFromOneParse) {
  auto t = Template::parse("{{ greeting }}, {{ name | upper }}!");
  ASSERT_TRUE(t.ok()) << t.status().message();
  for (const char* name : {"ann", "bob"}) {
    DictData vars;
    vars.set(Value::string("greeting"), Value::string("hi"));
    vars.set(Value::string("name"), Value::string(name));
    auto out = t->render(vars);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, std::string("hi, ") + (name[0] == 'a' ? "ANN" : "BOB") + "!");
  }
}

TEST(Jinja, RaiseExceptionNamesTheLine) {
  std::string err =
      error_of("line one\n{% if true %}\n{{ raise_exception('bad roles') }}\n{% endif %}");
  EXPECT_EQ(err, "line 3: bad roles");
}

TEST(Jinja, UndefinedCallNamesTheLine) {
  EXPECT_EQ(error_of("a\n\n{{ not_a_function(1) }}"), "line 3: 'not_a_function' is undefined");
  EXPECT_EQ(error_of("{% set m = {} %}\n{{ m.x.y }}"),
            "line 2: 'dict object' has no attribute 'x'");
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(error_of("ok\n{% if %}"),
            "line 2: Expected an expression, got 'end of statement block'");
  EXPECT_NE(error_of("{% for x in y %}\n\nno end").find("line 3"), std::string::npos);
  EXPECT_NE(error_of("{{ 'unterminated }}").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("{% frobnicate %}").find("unknown tag 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("{{ a | }}").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").find("not supported"), std::string::npos);
}

TEST(Jinja, LoopBudgetStopsRunawayTemplates) {
  RenderLimits limits;
  limits.max_loop_iterations = 1000;
  std::string err = error_of(
      "{% for i in range(100) %}{% for j in range(100) %}x{% endfor %}{% endfor %}", limits);
  EXPECT_NE(err.find("loop iterations"), std::string::npos) << err;
  EXPECT_NE(error_of("{{ range(100001) | length }}").find("MAX_RANGE"), std::string::npos);
}

TEST(Jinja, RecursionIsBounded) {
  std::string err = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(err.find("recursion deeper than"), std::string::npos) << err;
}

TEST(Jinja, OutputIsBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  EXPECT_NE(error_of("{% for i in range(500) %}abc{% endfor %}", limits).find("output exceeds"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 5000 }}", limits).find("output limit"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(20) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                     limits)
                .find("output limit"),
            std::string::npos);
}

TEST(Jinja, DeepNestingFailsCleanly) {
  std::string deep(5000, '(');
  std::string closing(5000, ')');
  EXPECT_NE(error_of("{{ " + deep + "1" + closing + " }}").find("too deep"), std::string::npos);
  std::string nested;
  for (int i = 0; i < 1000; ++i) nested += "{% if true %}";
  EXPECT_NE(error_of(nested).find("too deep"), std::string::npos);
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_NE(error_of(nots + "x }}").find("too deep"), std::string::npos);
}

TEST(Jinja, MalformedUtf8DoesNotCrash) {
  std::string bad = "\xff\xfe{{ s | upper }}\xc3";
  DictData vars;
  vars.set(Value::string("s"), Value::string("a\xe2\x82"));
  auto out = render(bad, vars);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->substr(0, 2), "\xff\xfe");
}

TEST(Jinja, StrftimeNowFormatsLocalTime) {
  auto out = render("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(out.ok());
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  EXPECT_EQ(*out, std::to_string(1900 + local.tm_year));
}

TEST(Jinja, NamespaceOnlyTargetsNamespaces) {
  EXPECT_NE(error_of("{% set d = {} %}{% set d.x = 1 %}").find("non-namespace"), std::string::npos);
}

TEST(Jinja, FloatReprMatchesPython) {
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(py_float_repr(-2.5), "-2.5");
  EXPECT_EQ(py_float_repr(100.0), "100.0");
}

}  // namespace
}  // namespace hearth::text::jinja
