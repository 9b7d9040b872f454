#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

// Only whole pages inside the range are dropped, and the bytes read the same afterwards.
TEST(MappedFile, DropPagesTakesWholePagesInside) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::string path = temp_path("pages.bin");
  std::string bytes(3 * page, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const std::uint8_t* d = file->data();
  EXPECT_EQ(file->drop_pages(d + 100, 3 * page - 200), page);
  EXPECT_EQ(file->drop_pages(d + 1, page), 0u);         // no whole page inside
  EXPECT_EQ(file->drop_pages(d + page, 3 * page), 0u);  // runs past the mapping
  EXPECT_EQ(file->drop_pages(bytes.data(), page), 0u);  // not in the mapping
  EXPECT_EQ(file->drop_pages(d, 3 * page), 3 * page);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(d), file->size()), bytes);
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
