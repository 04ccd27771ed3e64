// Runs a fuzz target over files without libFuzzer: every regular file named
// on the command line, or found in a directory named there, is one input.
// The g++ lanes build each target with this driver and replay the seed corpus
// (and every reproducer kept beside it), so the targets always build and the
// corpus stays a regression test under ASan and TSan. Exit 0 when every input
// ran; a crash or a sanitizer report ends the process.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

bool run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  (void)LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg, ec))
        if (entry.is_regular_file(ec)) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& file : files) {
        if (!run_file(file)) return 1;
        ++inputs;
      }
    } else {
      if (!run_file(arg)) return 1;
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "replay: no input files (a missing corpus must not pass)\n");
    return 1;
  }
  std::printf("replay: %zu inputs ran\n", inputs);
  return 0;
}
