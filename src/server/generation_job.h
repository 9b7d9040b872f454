// Runs one parsed generation request against a model: renders and tokenizes the prompt,
// checks it against the context, submits n choices, pipes their tokens through each
// choice's output pipeline and answers the client streamed or whole. A client that goes
// away cancels every choice at once.
#pragma once

#include <memory>
#include <optional>

#include "server/generation_request.h"
#include "server/http_server.h"
#include "server/model_backend.h"
#include "server/server_metrics.h"

namespace hearth::server {

// Server-wide defaults (serve flags); a request's own fields win.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<int> max_tokens;
  std::optional<bool> enable_thinking;
};

// Answers on `exchange` (now or later, from the engine thread). Never throws.
void run_generation(GenerationRequest request, std::shared_ptr<ModelBackend> backend,
                    const GenerationDefaults& defaults, std::shared_ptr<Exchange> exchange,
                    std::shared_ptr<ServerMetrics> metrics);

// The prompt ids a request renders to (chat template or raw text), for count_tokens and
// run_generation. Throws ApiException.
struct RenderedPrompt {
  std::string text;  // empty for a token-id prompt
  std::vector<int32_t> ids;
};
RenderedPrompt render_prompt(const GenerationRequest& request, const ModelBackend& backend,
                             const GenerationDefaults& defaults);

}  // namespace hearth::server
