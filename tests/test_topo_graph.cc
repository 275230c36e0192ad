#include <catch2/catch.hpp>
#include "lib/topo/graph.h"
TEST_CASE("x") { sncl::topo::Graph g; CHECK(g.vertexCount() == 0); CHECK(g.findVertex("a") == sncl::topo::kNone); }
