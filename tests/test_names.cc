// The vocabulary that every SNCL_* variable, tool and benchmark shares (sncl_ext.h): sizes,
// datatype names and the build's version. Random values round-trip through every way of
// writing them; malformed and overflowing text is refused with a message.
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "lib/base/env.h"
#include "sncl/sncl_ext.h"

namespace {

bool parse(const std::string& text, size_t* out) { return snclParseSize(text.c_str(), out) == snclSuccess; }

}  // namespace

TEST_CASE("sizes: every spelling of a random value reads back as that value", "[names]") {
  std::mt19937_64 rng(Catch::rngSeed());
  const char* suffixes[] = {"K", "M", "G", "T"};
  const char* units[] = {"", "B", "iB"};
  for (int i = 0; i < 2000; ++i) {
    // Any number of bytes, written plainly and with B.
    const uint64_t v = rng() >> (rng() % 64);
    size_t got = 0;
    REQUIRE(parse(std::to_string(v), &got));
    CHECK(got == v);
    REQUIRE(parse(std::to_string(v) + "B", &got));
    CHECK(got == v);
    // A multiple of a suffix, written with it, either case, with or without B / iB.
    const int k = int(rng() % 4);
    const int shift = 10 * (k + 1);
    const uint64_t units_ = rng() >> (shift + int(rng() % (64 - shift)));
    std::string text = std::to_string(units_) + suffixes[k];
    if (rng() % 2) text.back() = char(std::tolower(text.back()));
    text += units[rng() % 3];
    INFO(text);
    REQUIRE(parse(text, &got));
    CHECK(got == units_ << shift);
    // Halves and quarters of a suffix are whole numbers of bytes.
    const uint64_t quarters = rng() % 4000;
    const std::string frac = std::to_string(quarters / 4) + "." + std::to_string(quarters % 4 * 25) + suffixes[k];
    INFO(frac);
    REQUIRE(parse(frac, &got));
    CHECK(got == (quarters << shift) / 4);
  }
}

TEST_CASE("sizes: malformed, fractional bytes and overflow are refused with a message", "[names]") {
  size_t got = 12345;
  for (const char* bad : {"", " ", "-1", "+1", "1.", ".5K", "1.3", "0.1K", "1.5", "4X", "4KK", "4 K", "K", "4Bi",
                          "4iB", "0x10", "1e3", "18446744073709551616", "16777216T", "1.5B", "4M ", "nan"}) {
    INFO("'" << bad << "'");
    CHECK(snclParseSize(bad, &got) == snclInvalidArgument);
    CHECK(got == 12345);
    CHECK(std::strstr(snclGetLastError(nullptr), "is not a size") != nullptr);
  }
  size_t v = 0;
  CHECK(parse("18446744073709551615", &v));
  CHECK(v == UINT64_MAX);
  CHECK(parse("16777215T", &v));
  CHECK(v == 16777215ull << 40);
  CHECK(parse("0", &v));
  CHECK(v == 0);
  CHECK(parse("1.5K", &v));
  CHECK(v == 1536);
  CHECK(parse("0.000976562500K", &v));  // 1/1024 K: one byte, written exactly
  CHECK(v == 1);
  CHECK(snclParseSize(nullptr, &v) == snclInvalidArgument);
  CHECK(snclParseSize("1", nullptr) == snclInvalidArgument);
}

TEST_CASE("sizes: SNCL_* variables read the same syntax and keep the default on a bad one", "[names]") {
  setenv("SNCL_TEST_NAMES_SIZE", "1.5M", 1);
  CHECK(sncl::env::bytes("SNCL_TEST_NAMES_SIZE", 7) == 1572864);
  setenv("SNCL_TEST_NAMES_SIZE", "010", 1);  // decimal, never octal
  CHECK(sncl::env::bytes("SNCL_TEST_NAMES_SIZE", 7) == 10);
  setenv("SNCL_TEST_NAMES_SIZE", "12 apples", 1);
  CHECK(sncl::env::bytes("SNCL_TEST_NAMES_SIZE", 7) == 7);
  unsetenv("SNCL_TEST_NAMES_SIZE");
}

TEST_CASE("datatype names: NCCL's, nccl-tests' and the short spellings, any case", "[names]") {
  struct Name {
    const char* text;
    snclDataType_t type;
  };
  const Name names[] = {
      {"int8", snclInt8},           {"char", snclInt8},          {"uint8", snclUint8},          {"int32", snclInt32},
      {"int", snclInt32},           {"uint32", snclUint32},      {"int64", snclInt64},          {"uint64", snclUint64},
      {"float16", snclFloat16},     {"half", snclFloat16},       {"fp16", snclFloat16},         {"float32", snclFloat32},
      {"float", snclFloat32},       {"f32", snclFloat32},        {"float64", snclFloat64},      {"double", snclFloat64},
      {"bfloat16", snclBfloat16},   {"bf16", snclBfloat16},      {"float8e4m3", snclFloat8e4m3}, {"f8e4m3", snclFloat8e4m3},
      {"e4m3", snclFloat8e4m3},     {"float8e5m2", snclFloat8e5m2}, {"f8e5m2", snclFloat8e5m2}, {"ncclFloat32", snclFloat32},
      {"snclBfloat16", snclBfloat16}, {"HALF", snclFloat16},     {"Float8E5M2", snclFloat8e5m2}};
  for (const Name& n : names) {
    INFO(n.text);
    snclDataType_t t = snclNumTypes;
    REQUIRE(snclDataTypeFromName(n.text, &t) == snclSuccess);
    CHECK(t == n.type);
  }
  // Every canonical name reads back as its type.
  for (int t = 0; t < snclNumTypes; ++t) {
    snclDataType_t back = snclNumTypes;
    REQUIRE(snclDataTypeFromName(snclDataTypeName(snclDataType_t(t)), &back) == snclSuccess);
    CHECK(back == t);
  }
  snclDataType_t t = snclInt8;
  for (const char* bad : {"", "floot", "float 32", "nccl", "ncclncclFloat32", "float32x", "f8"}) {
    INFO("'" << bad << "'");
    CHECK(snclDataTypeFromName(bad, &t) == snclInvalidArgument);
    CHECK(std::strstr(snclGetLastError(nullptr), "unknown datatype") != nullptr);
  }
  CHECK(t == snclInt8);
  CHECK(std::string(snclDataTypeName(snclDataType_t(99))) == "invalid");
  CHECK(snclDataTypeFromName(nullptr, &t) == snclInvalidArgument);
}

TEST_CASE("the build names its version and revision", "[names]") {
  const std::string v = snclGetBuildVersion();
  int code = 0;
  REQUIRE(snclGetVersion(&code) == snclSuccess);
  const std::string expect = std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
                             std::to_string(code % 100) + " (git ";
  CHECK(v.rfind(expect, 0) == 0);
  CHECK(v.back() == ')');
  CHECK(v.size() > expect.size() + 1);
}
