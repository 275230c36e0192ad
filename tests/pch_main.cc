// Builds the tests' precompiled header (tests/CMakeLists.txt); runs no test of its own.
#include <catch2/catch.hpp>

TEST_CASE("the precompiled header's holder", "[pch]") { SUCCEED(); }
