#include "daemon/device/layout_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/string_view_compat.h"
#include "nlohmann/json.hpp"

namespace statecache {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFormat = "statecache-layout/v1";

// Every error of one parse carries the same "<source>: " prefix.
class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  absl::Status Error(std::string_view path, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(source_), ": ", Av(path), ": ", Av(what)));
  }

  absl::Status CheckKeys(const Json& object, std::string_view path,
                         std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : object.items()) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || key == k;
      if (!ok) {
        return Error(path.empty() ? key : absl::StrCat(Av(path), ".", key),
                     "unknown key");
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> String(const Json& object, std::string_view key,
                                     std::string_view path) const {
    const Json& v = object.at(std::string(key));
    if (!v.is_string()) return Error(path, "must be a string");
    return v.get<std::string>();
  }

  absl::StatusOr<int64_t> Integer(const Json& v, std::string_view path) const {
    if (!v.is_number_integer()) return Error(path, "must be an integer");
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Error(path, "is out of range");
    }
    return v.get<int64_t>();
  }

  absl::StatusOr<StateTensorSpec> Tensor(const Json& v, size_t index) const {
    const std::string path = absl::StrCat("tensors[", index, "]");
    if (!v.is_object()) return Error(path, "must be an object");
    RETURN_IF_ERROR(CheckKeys(v, path, {"name", "dtype", "shape"}));
    for (const char* key : {"name", "dtype", "shape"}) {
      if (!v.contains(key)) {
        return Error(absl::StrCat(path, ".", key), "is required");
      }
    }
    StateTensorSpec spec;
    ASSIGN_OR_RETURN(spec.name, String(v, "name", path + ".name"));
    ASSIGN_OR_RETURN(std::string dtype, String(v, "dtype", path + ".dtype"));
    absl::StatusOr<DType> parsed = ParseDType(dtype);
    if (!parsed.ok()) {
      return Error(path + ".dtype", Sv(parsed.status().message()));
    }
    spec.dtype = *parsed;
    const Json& shape = v.at("shape");
    if (!shape.is_array()) return Error(path + ".shape", "must be an array");
    for (size_t d = 0; d < shape.size(); ++d) {
      const std::string dim_path = absl::StrCat(path, ".shape[", d, "]");
      ASSIGN_OR_RETURN(int64_t dim, Integer(shape[d], dim_path));
      if (dim < 1) {
        return Error(dim_path, absl::StrCat("must be >= 1, got ", dim));
      }
      spec.shape.push_back(dim);
    }
    return spec;
  }

  absl::StatusOr<StateLayout> Layout(std::string_view text) const {
    Json root;
    try {
      root = Json::parse(text);
    } catch (const Json::parse_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(source_), ": not valid JSON: ", e.what()));
    }
    if (!root.is_object()) return Error("(root)", "must be an object");
    RETURN_IF_ERROR(CheckKeys(
        root, "", {"format", "name", "arrangement", "num_layers", "tensors"}));
    if (root.contains("format")) {
      ASSIGN_OR_RETURN(std::string format, String(root, "format", "format"));
      if (format != kFormat) {
        return Error("format", absl::StrCat("must be \"", Av(kFormat),
                                            "\", got \"", format, "\""));
      }
    }
    std::string name;
    if (root.contains("name")) {
      ASSIGN_OR_RETURN(name, String(root, "name", "name"));
    }
    Arrangement arrangement = Arrangement::kSlotMajor;
    if (root.contains("arrangement")) {
      ASSIGN_OR_RETURN(std::string a,
                       String(root, "arrangement", "arrangement"));
      absl::StatusOr<Arrangement> parsed = ParseArrangement(a);
      if (!parsed.ok()) {
        return Error("arrangement", Sv(parsed.status().message()));
      }
      arrangement = *parsed;
    }
    if (!root.contains("num_layers")) return Error("num_layers", "is required");
    ASSIGN_OR_RETURN(int64_t num_layers,
                     Integer(root.at("num_layers"), "num_layers"));
    if (!root.contains("tensors")) return Error("tensors", "is required");
    const Json& tensors = root.at("tensors");
    if (!tensors.is_array()) return Error("tensors", "must be an array");
    std::vector<StateTensorSpec> specs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      ASSIGN_OR_RETURN(StateTensorSpec spec, Tensor(tensors[i], i));
      specs.push_back(std::move(spec));
    }
    absl::StatusOr<StateLayout> layout = StateLayout::Create(
        std::move(name), std::move(specs), num_layers, arrangement);
    if (!layout.ok()) {
      // Create's messages already start with the field's path.
      return absl::InvalidArgumentError(
          absl::StrCat(Av(source_), ": ", layout.status().message()));
    }
    return layout;
  }

 private:
  std::string_view source_;
};

}  // namespace

absl::StatusOr<StateLayout> ParseLayoutJson(std::string_view text,
                                            std::string_view source) {
  return Parser(source).Layout(text);
}

absl::StatusOr<StateLayout> LoadLayoutFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string what =
        absl::StrCat("cannot read layout file ", path, ": ", strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    if (err == EACCES) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseLayoutJson(text.str(), path);
}

std::string LayoutToJson(const StateLayout& layout) {
  Json root = Json::object();
  root["format"] = std::string(kFormat);
  if (!layout.name().empty()) root["name"] = layout.name();
  root["arrangement"] = std::string(ArrangementName(layout.arrangement()));
  root["num_layers"] = layout.num_layers();
  Json tensors = Json::array();
  for (const StateTensorSpec& t : layout.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(DTypeName(t.dtype))},
                       {"shape", t.shape}});
  }
  root["tensors"] = std::move(tensors);
  return root.dump(2);
}

}  // namespace statecache
