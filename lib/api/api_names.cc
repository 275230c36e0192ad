// The C extension API's vocabulary (include/sncl/sncl_ext.h): sizes, datatype names and
// the build's version, one definition each for the library, its tools and benchmarks.
#include <string>

#include "lib/api/api_checks.h"
#include "lib/base/size_text.h"
#include "lib/exec/reduce.h"
#include "sncl/sncl_ext.h"
#include "sncl_revision.h"  // generated at build time: SNCL_GIT_REVISION

using sncl::fail;

// A parser's failure is the caller's to report (a tool prints it beside its usage): recorded
// for snclGetLastError, logged only at INFO.

SNCL_API snclResult_t snclParseSize(const char* text, size_t* bytes) {
  if (!text || !bytes) return fail(snclInvalidArgument, "snclParseSize: text or bytes is NULL");
  sncl::ExpectedErrors quiet;
  uint64_t v = 0;
  if (!sncl::parseSize(text, &v) || v > SIZE_MAX)
    return fail(snclInvalidArgument, "'{}' is not a size (a whole number of bytes, e.g. 65536, 64K, 1.5M, 2GiB)", text);
  *bytes = size_t(v);
  return snclSuccess;
}

SNCL_API snclResult_t snclDataTypeFromName(const char* name, snclDataType_t* type) {
  if (!name || !type) return fail(snclInvalidArgument, "snclDataTypeFromName: name or type is NULL");
  sncl::ExpectedErrors quiet;
  if (!sncl::dtypeFromName(name, type)) {
    std::string known;
    for (int t = 0; t < snclNumTypes; ++t) known += std::string(t ? ", " : "") + sncl::dtypeName(snclDataType_t(t));
    return fail(snclInvalidArgument, "unknown datatype '{}' (one of {}, or nccl-tests' half, float, double, f8e4m3, f8e5m2)",
                name, known);
  }
  return snclSuccess;
}

SNCL_API const char* snclDataTypeName(snclDataType_t type) { return sncl::dtypeName(type); }

SNCL_API const char* snclGetBuildVersion(void) {
  return SNCL_VERSION_TEXT " (git " SNCL_GIT_REVISION ")";
}
