// Misuse of the collectives, reduction ops and groups gets InvalidArgument or
// InvalidUsage with a message, never a crash or a hang.
#include <catch2/catch.hpp>

#include <cstdint>
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
