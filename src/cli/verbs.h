// Every verb's registration function. main.cpp calls each one in the order listed in
// kVerbs; a verb appears here only when it works end to end.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/verb.h"

namespace hearth::cli {

Verb add_benchmark_verb(CLI::App& app);
Verb add_generate_verb(CLI::App& app);
Verb add_get_verb(CLI::App& app);
Verb add_perplexity_verb(CLI::App& app);
Verb add_convert_verb(CLI::App& app);
Verb add_ls_verb(CLI::App& app);
Verb add_gc_verb(CLI::App& app);
Verb add_fit_verb(CLI::App& app);
Verb add_template_verb(CLI::App& app);
Verb add_tokenize_verb(CLI::App& app);
Verb add_serve_verb(CLI::App& app);

using VerbFactory = Verb (*)(CLI::App& app);

inline constexpr VerbFactory kVerbs[] = {
    add_benchmark_verb,
    add_generate_verb,
    add_get_verb,
    add_perplexity_verb,
    add_convert_verb,
    add_ls_verb,
    add_gc_verb,
    add_fit_verb,
    add_template_verb,
    add_tokenize_verb,
    add_serve_verb,
    nullptr,  // sentinel keeps the array non-empty before the first verb lands
};

}  // namespace hearth::cli
