#include "base/hash.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/clock.h"

namespace hearth {
namespace {

// Reference digests: FIPS 180-2 test vectors.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(std::string_view("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 inc;
  inc.update(std::string_view("ab"));
  inc.update(std::string_view("c"));
  EXPECT_EQ(inc.digest_hex(), sha256_hex(std::string_view("abc")));
}

TEST(Sha256, FileMatchesInMemory) {
  std::string path = (std::filesystem::temp_directory_path() / "hearth_sha.bin").string();
  std::string data(200000, 'x');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  {
    std::ofstream out(path, std::ios::binary);
    out << data;
  }
  auto digest = sha256_file_hex(path);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(*digest, sha256_hex(std::string_view(data)));
  std::filesystem::remove(path);
  EXPECT_FALSE(sha256_file_hex(path).ok());
}

// XXH3-64 of the empty input with seed 0 is a published constant.
TEST(Xxh3, KnownValueAndSeedSensitivity) {
  EXPECT_EQ(xxh3_64(std::string_view("")), 0x2D06800538D394C2ULL);
  EXPECT_NE(xxh3_64(std::string_view("block"), 1), xxh3_64(std::string_view("block"), 2));
  EXPECT_EQ(xxh3_64(std::string_view("block")), xxh3_64(std::string_view("block")));
}

TEST(Stopwatch, IsMonotonic) {
  Stopwatch sw;
  std::int64_t a = monotonic_ns();
  std::int64_t b = monotonic_ns();
  EXPECT_LE(a, b);
  EXPECT_GE(sw.elapsed_seconds(), 0.0);
}

}  // namespace
}  // namespace hearth
