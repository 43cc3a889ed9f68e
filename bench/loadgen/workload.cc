#include "bench/loadgen/workload.h"

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace statecache::loadgen {
namespace {

using nlohmann::json;

absl::Status LineError(int64_t line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("workload line ", line, ": ", what));
}

// The integer `key` of `obj`, in [lo, hi].
absl::StatusOr<int64_t> Int(const json& obj, const char* key, int64_t line,
                            int64_t lo,
                            int64_t hi = std::numeric_limits<int64_t>::max()) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) {
    return LineError(line, absl::StrCat("`", key, "` must be an integer"));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return LineError(line, absl::StrCat("`", key, "` = ", v, " outside [", lo,
                                        ", ", hi, "]"));
  }
  return v;
}

// The hashes of `array` into `out`: each an integer in [0, 2^63).
absl::Status ReadHashes(const json& array, int64_t line,
                        std::vector<int64_t>& out) {
  out.reserve(array.size());
  for (const json& h : array) {
    if (!h.is_number_integer() || h.get<int64_t>() < 0) {
      return LineError(line, "a block hash is not an integer in [0, 2^63)");
    }
    out.push_back(h.get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status ReadHeader(const json& h, Workload& w) {
  if (!h.is_object() || h.value("format", "") != "statecache-workload") {
    return LineError(1, "not a statecache-workload header");
  }
  auto version = Int(h, "version", 1, 1, 1);
  if (!version.ok()) return version.status();
  auto bs = Int(h, "hash_block_size", 1, 1);
  if (!bs.ok()) return bs.status();
  w.hash_block_size = *bs;
  w.params_json = h.contains("params") ? h["params"].dump() : "{}";
  return absl::OkStatus();
}

absl::Status ReadRequest(const json& r, int64_t line, Workload& w) {
  if (!r.is_object() || r.value("type", "") != "request") {
    return LineError(line, "not a request line (`type` != \"request\")");
  }
  auto session = Int(r, "session", line, 0);
  if (!session.ok()) return session.status();
  auto turn = Int(r, "turn", line, 0);
  if (!turn.ok()) return turn.status();
  const int64_t n_sessions = static_cast<int64_t>(w.sessions.size());
  if (*session == n_sessions) {
    Session s;
    s.id = static_cast<int32_t>(*session);
    if (r.contains("parent") && !r["parent"].is_null()) {
      auto parent = Int(r, "parent", line, 0, *session - 1);
      if (!parent.ok()) return parent.status();
      const Session& p = w.sessions[*parent];
      auto parent_turn = Int(r, "parent_turn", line, 0,
                             static_cast<int64_t>(p.turns.size()) - 1);
      if (!parent_turn.ok()) return parent_turn.status();
      s.parent = static_cast<int32_t>(*parent);
      s.parent_turn = static_cast<int32_t>(*parent_turn);
    }
    if (r.contains("agent")) {
      auto agent =
          Int(r, "agent", line, 0, std::numeric_limits<int32_t>::max());
      if (!agent.ok()) return agent.status();
      s.agent = static_cast<int32_t>(*agent);
    }
    w.sessions.push_back(std::move(s));
  } else if (*session != n_sessions - 1) {
    return LineError(line, absl::StrCat("session ", *session,
                                        " out of order (sessions are numbered "
                                        "0, 1, ... and kept together)"));
  }
  Session& s = w.sessions.back();
  if (*turn != static_cast<int64_t>(s.turns.size())) {
    return LineError(line, absl::StrCat("turn ", *turn, " of session ", s.id,
                                        " expected ", s.turns.size()));
  }
  Turn t;
  auto think = Int(r, "think_ms", line, 0);
  if (!think.ok()) return think.status();
  auto prompt = Int(r, "prompt_tokens", line, 1);
  if (!prompt.ok()) return prompt.status();
  auto output = Int(r, "output_tokens", line, 1);
  if (!output.ok()) return output.status();
  t.think_ms = *think;
  t.prompt_tokens = *prompt;
  t.output_tokens = *output;
  auto blocks = r.find("blocks");
  if (blocks == r.end() || !blocks->is_array()) {
    return LineError(line, "`blocks` must be an array of hashes");
  }
  const int64_t want = t.prompt_tokens / w.hash_block_size;
  if (static_cast<int64_t>(blocks->size()) != want) {
    return LineError(line, absl::StrCat(blocks->size(), " block hashes for ",
                                        t.prompt_tokens, " tokens; want ", want,
                                        " (full blocks only)"));
  }
  if (absl::Status st = ReadHashes(*blocks, line, t.blocks); !st.ok()) {
    return st;
  }
  auto output_blocks = r.find("output_blocks");
  if (output_blocks == r.end()) {
    ++w.lines_without_output_blocks;
  } else {
    if (!output_blocks->is_array()) {
      return LineError(line, "`output_blocks` must be an array of hashes");
    }
    const int64_t want_output =
        (t.prompt_tokens + t.output_tokens) / w.hash_block_size - want;
    if (static_cast<int64_t>(output_blocks->size()) != want_output) {
      return LineError(
          line, absl::StrCat(output_blocks->size(), " output block hashes for ",
                             t.prompt_tokens, " + ", t.output_tokens,
                             " tokens; want ", want_output));
    }
    if (absl::Status st = ReadHashes(*output_blocks, line, t.output_blocks);
        !st.ok()) {
      return st;
    }
  }
  s.turns.push_back(std::move(t));
  return absl::OkStatus();
}

}  // namespace

int64_t Workload::requests() const {
  int64_t n = 0;
  for (const Session& s : sessions) n += static_cast<int64_t>(s.turns.size());
  return n;
}

int64_t Workload::prompt_tokens() const {
  int64_t n = 0;
  for (const Session& s : sessions) {
    for (const Turn& t : s.turns) n += t.prompt_tokens;
  }
  return n;
}

int64_t Workload::output_tokens() const {
  int64_t n = 0;
  for (const Session& s : sessions) {
    for (const Turn& t : s.turns) n += t.output_tokens;
  }
  return n;
}

absl::StatusOr<Workload> ReadWorkload(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  Workload w;
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return LineError(line, "not JSON");
    absl::Status status =
        line == 1 ? ReadHeader(parsed, w) : ReadRequest(parsed, line, w);
    if (!status.ok()) return status;
  }
  if (line == 0) return LineError(1, "empty file: no header");
  if (w.sessions.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no request lines"));
  }
  return w;
}

}  // namespace statecache::loadgen
