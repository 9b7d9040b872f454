#include "base/mapped_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace hearth {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("hearth_base_" + name)).string();
}

TEST(MappedFile, MapsContents) {
  std::string path = temp_path("mapped.bin");
  {
    std::ofstream out(path, std::ios::binary);
    out << "hello weights";
  }
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->size(), 13u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->data()), file->size()),
            "hello weights");
  MappedFile moved = std::move(file.value());
  EXPECT_EQ(moved.size(), 13u);
  EXPECT_EQ(file->size(), 0u);
  std::filesystem::remove(path);
}

TEST(MappedFile, EmptyFileMapsToEmptySpan) {
  std::string path = temp_path("empty.bin");
  { std::ofstream out(path, std::ios::binary); }
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file->bytes().empty());
  std::filesystem::remove(path);
}

TEST(MappedFile, MissingFileIsNotFound) {
  auto file = MappedFile::open(temp_path("does-not-exist"));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), ErrorCode::kNotFound);
}

TEST(MappedFile, DirectoryIsRejected) {
  auto file = MappedFile::open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), ErrorCode::kInvalidArgument);
}

TEST(ReadFile, ReadsWholeFile) {
  std::string path = temp_path("read.txt");
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string("a\0b", 3);
  }
  auto text = read_file(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, std::string("a\0b", 3));
  std::filesystem::remove(path);
  EXPECT_EQ(read_file(path).status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace hearth
