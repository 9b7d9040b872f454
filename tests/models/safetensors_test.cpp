// The safetensors header parser on malformed input: every case is an error naming the
// problem (and the tensor), never a crash. Run under -DHEARTH_SANITIZE=ON for ASan/UBSan.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/safetensors.h"

namespace hearth {
namespace {

std::vector<uint8_t> file_with(const std::string& header, std::size_t data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  bytes.append(data_bytes, '\0');
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

TEST(SafetensorsHeader, ParsesAValidFile) {
  auto f = file_with(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],)"
      R"("data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})",
      32);
  auto h = parse_safetensors_header(f);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->metadata.at("format"), "pt");
}

TEST(SafetensorsHeader, RejectsMalformedInput) {
  struct Bad {
    std::string header;
    std::size_t data;
    std::string expect;  // substring of the error
  };
  const std::vector<Bad> cases = {
      {"not json", 0, "JSON"},
      {"[1,2]", 0, "JSON object"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "'w'"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "'w'"},
      {R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8, "Q9"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "'w'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "'w'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "'w'"},
      {R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8, "dtype"},
      {R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", 8,
       "'w'"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlap"},
      {R"({"w":[1,2,3]})", 0, "'w'"},
  };
  for (const auto& c : cases) {
    auto h = parse_safetensors_header(file_with(c.header, c.data));
    ASSERT_FALSE(h.ok()) << c.header;
    EXPECT_NE(h.status().message().find(c.expect), std::string::npos)
        << c.header << " -> " << h.status().message();
  }
  // Header length past the end of the file, and a file shorter than the length prefix.
  auto f = file_with("{}", 0);
  f[0] = 200;
  EXPECT_FALSE(parse_safetensors_header(f).ok());
  EXPECT_FALSE(parse_safetensors_header(std::vector<uint8_t>{1, 2, 3}).ok());
}

}  // namespace
}  // namespace hearth
