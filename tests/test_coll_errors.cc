// Misuse of the collectives, reduction ops and groups gets InvalidArgument or
// InvalidUsage with a message, never a crash or a hang.
#include <catch2/catch.hpp>

#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "sncl/sncl.h"

namespace {

std::string lastError() { return snclGetLastError(nullptr); }

struct ThreadComms {
  std::vector<snclComm_t> comms;
  explicit ThreadComms(int n) : comms(n) { REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess); }
  ~ThreadComms() {
    for (auto c : comms)
      if (c) snclCommDestroy(c);
  }
};

}  // namespace

TEST_CASE("roots and peers out of range are refused", "[errors][collectives]") {
  ThreadComms tc(1);
  snclComm_t comm = tc.comms[0];
  float buf[8] = {0};
  CHECK(snclBroadcast(buf, buf, 8, snclFloat32, 1, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("snclBroadcast: root 1 out of range [0, 1)"));
  CHECK(snclBcast(buf, 8, snclFloat32, -1, comm, nullptr) == snclInvalidArgument);
  CHECK(snclReduce(buf, buf, 8, snclFloat32, snclSum, 3, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("snclReduce: root 3 out of range"));
  CHECK(snclGather(buf, buf, 1, snclFloat32, 2, comm, nullptr) == snclInvalidArgument);
  CHECK(snclScatter(buf, buf, 1, snclFloat32, -2, comm, nullptr) == snclInvalidArgument);
  CHECK(snclSend(buf, 8, snclFloat32, 1, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("snclSend: peer 1 out of range"));
  CHECK(snclRecv(buf, 8, snclFloat32, -1, comm, nullptr) == snclInvalidArgument);
}

TEST_CASE("counts whose bytes overflow size_t are refused", "[errors][collectives]") {
  ThreadComms tc(2);
  snclComm_t comm = tc.comms[0];
  float buf[8] = {0};
  CHECK(snclAllGather(buf, buf + 4, SIZE_MAX / 6, snclFloat32, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("overflows size_t"));
  CHECK(snclReduceScatter(buf, buf, SIZE_MAX / 12, snclFloat64, snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("x 2 ranks overflows"));
  CHECK(snclAlltoAll(buf, buf, SIZE_MAX / 2, snclInt8, comm, nullptr) == snclInvalidArgument);
  CHECK(snclBroadcast(buf, buf, SIZE_MAX / 3, snclInt32, 0, comm, nullptr) == snclInvalidArgument);
  CHECK(snclSend(buf, SIZE_MAX / 2, snclInt64, 1, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("overflows"));
  // No overflow, but no process has that much memory: a wrong count.
  CHECK(snclAllReduce(buf, buf, SIZE_MAX / 8, snclFloat32, snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("more than a process can address"));
}

TEST_CASE("buffers: NULL with a count, overlap that is not in place", "[errors][collectives]") {
  ThreadComms tc(2);
  snclComm_t comm = tc.comms[1];  // rank 1
  float buf[16] = {0};
  CHECK(snclAllGather(buf, nullptr, 4, snclFloat32, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("recvbuff is NULL"));
  // In place is sendbuff == recvbuff + rank * sendcount; anything else overlapping is not.
  CHECK(snclAllGather(buf, buf, 4, snclFloat32, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("overlap without being in place"));
  CHECK(snclReduceScatter(buf, buf + 1, 4, snclFloat32, snclSum, comm, nullptr) == snclInvalidArgument);
  CHECK(snclReduce(buf, nullptr, 4, snclFloat32, snclSum, 1, comm, nullptr) == snclInvalidArgument);
  CHECK(snclScatter(nullptr, buf, 4, snclFloat32, 1, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("sendbuff is NULL"));
  CHECK(snclSend(nullptr, 4, snclFloat32, 0, comm, nullptr) == snclInvalidArgument);
  CHECK(snclBroadcast(buf, buf, 4, static_cast<snclDataType_t>(12), 0, comm, nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("unknown datatype 12"));
}

TEST_CASE("pre-multiplied sum ops are valid only on their comm and datatype", "[errors][redop]") {
  ThreadComms tc(2);
  float scalar = 2.0f, buf[4] = {1, 2, 3, 4};
  snclRedOp_t op;
  REQUIRE(snclRedOpCreatePreMulSum(&op, &scalar, snclFloat32, snclScalarHostImmediate, tc.comms[0]) == snclSuccess);
  CHECK(op >= snclNumOps);
  CHECK(snclAllReduce(buf, buf, 4, snclFloat32, op, tc.comms[1], nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("created on another communicator"));
  CHECK(snclRedOpDestroy(op, tc.comms[1]) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("not created on this comm"));
  CHECK(snclReduce(buf, buf, 4, snclFloat64, op, 0, tc.comms[0], nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("created for float32, not for float64"));
  CHECK(snclRedOpDestroy(op, tc.comms[0]) == snclSuccess);
  CHECK(snclReduceScatter(buf, buf, 2, snclFloat32, op, tc.comms[0], nullptr) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("was destroyed"));
  CHECK(snclRedOpDestroy(op, tc.comms[0]) == snclInvalidArgument);
  CHECK(snclRedOpDestroy(snclSum, tc.comms[0]) == snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("built-in"));
  CHECK(snclRedOpCreatePreMulSum(&op, nullptr, snclFloat32, snclScalarDevice, tc.comms[0]) == snclInvalidArgument);
  CHECK(snclRedOpCreatePreMulSum(&op, &scalar, snclFloat32, static_cast<snclScalarResidence_t>(5), tc.comms[0]) ==
        snclInvalidArgument);
  CHECK(snclAllReduce(buf, buf, 4, snclFloat32, static_cast<snclRedOp_t>(snclNumOps + 3), tc.comms[0], nullptr) ==
        snclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("unknown reduction op"));
}

TEST_CASE("bitwise and logical ops on a float type are refused, not computed", "[errors][redop]") {
  ThreadComms tc(2);
  const snclRedOp_t ops[] = {snclBand, snclBor, snclBxor, snclLand, snclLor, snclLxor};
  const char* names[] = {"band", "bor", "bxor", "land", "lor", "lxor"};
  const snclDataType_t floats[] = {snclFloat16, snclFloat32, snclFloat64, snclBfloat16, snclFloat8e4m3, snclFloat8e5m2};
  const char* floatNames[] = {"float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  uint64_t buf[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
  for (size_t o = 0; o < std::size(ops); ++o) {
    for (size_t t = 0; t < std::size(floats); ++t) {
      const std::string want = std::string("reduction op ") + names[o] + " is not defined for " + floatNames[t];
      INFO(want);
      CHECK(snclAllReduce(buf, out, 4, floats[t], ops[o], tc.comms[0], nullptr) == snclInvalidArgument);
      CHECK_THAT(lastError(), Catch::Contains(std::string("snclAllReduce: ") + want));
      CHECK(snclReduce(buf, out, 4, floats[t], ops[o], 0, tc.comms[1], nullptr) == snclInvalidArgument);
      CHECK_THAT(lastError(), Catch::Contains(std::string("snclReduce: ") + want));
      CHECK(snclReduceScatter(buf, out, 2, floats[t], ops[o], tc.comms[0], nullptr) == snclInvalidArgument);
      CHECK_THAT(lastError(), Catch::Contains(std::string("snclReduceScatter: ") + want));
    }
    // In a group the call fails the group: nothing runs.
    CHECK(snclGroupStart() == snclSuccess);
    CHECK(snclAllReduce(buf, out, 4, snclFloat32, ops[o], tc.comms[0], nullptr) == snclInvalidArgument);
    CHECK(snclAllReduce(buf, out, 4, snclFloat32, ops[o], tc.comms[1], nullptr) == snclInvalidArgument);
    CHECK(snclGroupEnd() == snclInvalidArgument);
    CHECK(snclRedOpDestroy(ops[o], tc.comms[0]) == snclInvalidArgument);
    CHECK_THAT(lastError(), Catch::Contains("built-in"));
  }
  for (uint64_t x : out) CHECK(x == 0);
  // The integer types take them (tests/test_bitwise_ops.cc checks them at length).
  uint32_t in[2][3] = {{0xf0f0f0f0u, 0, 7}, {0xff00ff00u, 5, 7}}, res[2][3] = {};
  CHECK(snclGroupStart() == snclSuccess);
  for (int r = 0; r < 2; ++r) CHECK(snclAllReduce(in[r], res[r], 3, snclUint32, snclBxor, tc.comms[r], nullptr) == snclSuccess);
  CHECK(snclGroupEnd() == snclSuccess);
  for (int r = 0; r < 2; ++r) {
    CHECK(res[r][0] == 0x0ff00ff0u);
    CHECK(res[r][1] == 5);
    CHECK(res[r][2] == 0);
  }
}
