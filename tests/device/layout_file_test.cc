// Layout files: round trip, and refusals that name the file and the field.
#include "daemon/device/layout_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "daemon/device/layout_presets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace statecache {
namespace {

using ::testing::HasSubstr;

TEST(LayoutFileTest, RoundTripsEveryPreset) {
  for (std::string_view name : LayoutPresetNames()) {
    for (Arrangement a : {Arrangement::kSlotMajor, Arrangement::kLayerMajor}) {
      const StateLayout preset = *LayoutPreset(name, 2, a);
      absl::StatusOr<StateLayout> parsed =
          ParseLayoutJson(LayoutToJson(preset));
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, preset);
      EXPECT_EQ(parsed->fingerprint(), preset.fingerprint());
    }
  }
}

TEST(LayoutFileTest, MinimalFileDefaultsToSlotMajor) {
  absl::StatusOr<StateLayout> parsed = ParseLayoutJson(R"({
    "num_layers": 36,
    "tensors": [{"name": "conv", "dtype": "bfloat16", "shape": [3, 8192]},
                {"name": "ssm", "dtype": "bf16", "shape": [32, 128, 128]}]
  })");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->arrangement(), Arrangement::kSlotMajor);
  // Same memory as the preset: same fingerprint, whatever the name.
  EXPECT_EQ(parsed->fingerprint(),
            LayoutPreset("qwen3-next-80b-a3b")->fingerprint());
}

TEST(LayoutFileTest, RefusalsNameTheField) {
  const std::string good_tensor =
      R"({"name": "conv", "dtype": "bf16", "shape": [3, 8]})";
  struct Case {
    std::string text;
    std::string message;  // expected substring, after "f.json: "
  };
  const std::vector<Case> cases = {
      {"{", "not valid JSON"},
      {"[]", "(root): must be an object"},
      {R"({"tensors": [)" + good_tensor + "]}", "num_layers: is required"},
      {R"({"num_layers": 2})", "tensors: is required"},
      {R"({"num_layers": 2, "tensors": [], "layers": 3})",
       "layers: unknown key"},
      {R"({"num_layers": "2", "tensors": [)" + good_tensor + "]}",
       "num_layers: must be an integer"},
      {R"({"num_layers": 2.5, "tensors": [)" + good_tensor + "]}",
       "num_layers: must be an integer"},
      {R"({"num_layers": 0, "tensors": [)" + good_tensor + "]}",
       "num_layers: must be in 1.."},
      {R"({"num_layers": 2, "tensors": {}})", "tensors: must be an array"},
      {R"({"num_layers": 2, "tensors": []})", "tensors: a layout needs"},
      {R"({"num_layers": 2, "tensors": [7]})", "tensors[0]: must be an object"},
      {R"({"num_layers": 2, "tensors": [)" + good_tensor +
           R"(, {"name": "ssm", "dtype": "bf16"}]})",
       "tensors[1].shape: is required"},
      {R"({"num_layers": 2, "tensors": [)" + good_tensor +
           R"(, {"name": "ssm", "dtype": "bf16", "shape": [4, 4, 0]}]})",
       "tensors[1].shape[2]: must be >= 1, got 0"},
      {R"({"num_layers": 2, "tensors": [)" + good_tensor +
           R"(, {"name": "ssm", "dtype": "bf16", "shape": [4, "x"]}]})",
       "tensors[1].shape[1]: must be an integer"},
      {R"({"num_layers": 2, "tensors": [)" + good_tensor +
           R"(, {"name": "ssm", "dtype": "int3", "shape": [4]}]})",
       "tensors[1].dtype: unknown dtype \"int3\""},
      {R"({"num_layers": 2, "tensors": [)" + good_tensor +
           R"(, {"name": "ssm", "dtype": "bf16", "shape": [4], "x": 1}]})",
       "tensors[1].x: unknown key"},
      {R"({"num_layers": 2, "tensors": [)" + good_tensor + ", " + good_tensor +
           "]}",
       "tensors[1].name: duplicate tensor name"},
      {R"({"num_layers": 2, "arrangement": "diagonal", "tensors": [)" +
           good_tensor + "]}",
       "arrangement: unknown arrangement"},
      {R"({"format": "v0", "num_layers": 2, "tensors": [)" + good_tensor + "]}",
       "format: must be \"statecache-layout/v1\""},
      {R"({"name": 5, "num_layers": 2, "tensors": [)" + good_tensor + "]}",
       "name: must be a string"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<StateLayout> parsed = ParseLayoutJson(c.text, "f.json");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                ::testing::StartsWith("f.json: "));
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(c.message))
        << c.text;
  }
}

TEST(LayoutFileTest, LoadsFilesAndNamesMissingOnes) {
  const std::string path = ::testing::TempDir() + "/layout_file_test.json";
  {
    std::ofstream out(path);
    out << LayoutToJson(*LayoutPreset("nemotron-h-8b"));
  }
  absl::StatusOr<StateLayout> loaded = LoadLayoutFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, *LayoutPreset("nemotron-h-8b"));
  unlink(path.c_str());
  absl::StatusOr<StateLayout> missing = LoadLayoutFile(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));
}

}  // namespace
}  // namespace statecache
